"""`down` of your own box (issue 38 item 7; adversary F9, #28, #29): `down --timeout N` on a box
that never answers SSH holds N (N + ~6 s was seen), its manual stop names the engine record
where `up` found the agent's directory (not ~/.tailpod), and `down --all` stops and proves an
engine a box serves (it said "nothing tailpod-tagged is left" while the engine served)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger, PodExtra, PodRecord
from tailpod.provision.ssh_box import BoxAddress
from tailpod.provision.ssh_box.provider import RUN_MARKER

from .conftest import ssh_box_shell
from .test_ssh_box_port_open import POD_ID, TAG, _box_state, _local_agents, bound  # noqa: F401 - bound: a fixture
from .test_ssh_box_unreachable import no_banner  # noqa: F401 - a fixture, used by name


def test_down_timeout_holds_over_ssh_and_the_manual_stop_names_the_recorded_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_banner: int) -> None:  # noqa: F811
    ssh_box_shell(tmp_path, monkeypatch)
    box = BoxAddress("root", "127.0.0.1", no_banner)
    state_dir = "/srv/pods/alice/.tailpod"  # where the agent lived on the box ($TAILPOD_POD_HOME)
    Ledger(tmp_path / "home").put(PodRecord(
        run_tag="tp-box-t", provider="ssh", status="running", pod_id=box.pod_id("tp-box-t"),
        ssh={"host": "127.0.0.1", "port": no_banner}, extra=PodExtra(pod_state_dir=state_dir)))
    started = time.monotonic()
    result = CliRunner().invoke(app, ["down", "tp-box-t", "--timeout", "4"],
                                env={"COLUMNS": "250"})
    took = time.monotonic() - started
    assert result.exit_code == 3, result.output
    assert took < 4 + 1.5, f"down --timeout 4 over SSH took {took:.1f} s"
    flat = "".join(result.output.split())
    assert f"{state_dir}/engine.json".replace(" ", "") in flat, result.output
    assert "~/.tailpod" not in flat


def test_down_all_stops_and_proves_the_engine_a_box_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    ssh_box_shell(tmp_path, monkeypatch)
    state_dir = tmp_path / "box-state"
    _box_state(state_dir, bound.getsockname()[1])  # a box whose run marker names TAG
    _local_agents(monkeypatch, state_dir)
    Ledger(tmp_path / "home").put(PodRecord(run_tag=TAG, provider="ssh", status="running",
                                            pod_id=POD_ID, ssh={"host": "127.0.0.1", "port": 22}))
    result = CliRunner().invoke(app, ["down", "--all", "--timeout", "60"],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "nothing tailpod-tagged" not in result.output
    assert TAG in result.output
    assert not (state_dir / RUN_MARKER).exists()  # the box's terminate really ran
    record = Ledger(tmp_path / "home").get(TAG)
    assert record is not None and not record.active


def test_up_on_a_box_another_running_run_holds_is_refused_before_any_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    ssh_box_shell(tmp_path, monkeypatch)
    state_dir = tmp_path / "box-state"
    _box_state(state_dir, bound.getsockname()[1])
    _local_agents(monkeypatch, state_dir)
    Ledger(tmp_path / "home").put(PodRecord(run_tag=TAG, provider="ssh", status="running",
                                            pod_id=POD_ID, ssh={"host": "127.0.0.1", "port": 22}))
    result = CliRunner().invoke(app, ["up", "--provider", "ssh", "--host", "root@127.0.0.1",
                                      "--model", "Qwen/Qwen3-0.6B", "--spec-k", "0"])
    assert result.exit_code == 2, result.output
    assert f"already serves {TAG}" in " ".join(result.output.split())
    assert [r.run_tag for r in Ledger(tmp_path / "home").all()] == [TAG]  # nothing recorded
    assert (state_dir / RUN_MARKER).read_text() == TAG  # the holder's claim is untouched


def test_a_run_whose_box_another_run_now_holds_is_proven_down_without_touching_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """The holder's engine serves on its port: it is not this run's, so it neither fails this
    run's proof nor gets stopped by it."""
    from tailpod.config import load_settings
    from tailpod.provision.ssh_box.provider import SshBoxProvider

    state_dir = tmp_path / "box-state"
    _box_state(state_dir, bound.getsockname()[1])  # the marker names TAG
    _local_agents(monkeypatch, state_dir)
    bound.listen()  # TAG's engine port answers
    provider = SshBoxProvider(load_settings(env={}, dotenv_path=tmp_path / "absent.env"))
    other = BoxAddress("root", "127.0.0.1", 22).pod_id("tp-box-other")
    evidence = provider.billing_evidence("tp-box-other", other, 0.0)
    assert evidence.proven, evidence.checks
    assert any("now serves " + TAG in c.detail for c in evidence.checks)
    provider.terminate(other)
    assert (state_dir / RUN_MARKER).read_text() == TAG

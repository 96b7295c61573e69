"""A volume delete that fails leaves storage billing, and tailpod says so (issue 38 item 5;
adversary F6, #16, #20, #21): `volume rm` refused (503, or the volume is mounted) exits 3,
says the volume still bills, names the pod the ledger knows mounts it and gives the manual
delete with the key as `$RUNPOD_API_KEY`; `down --volumes` shows the pod's proof AND the
volume's failure and exits 3; `down --all --volumes` is refused before anything; `volume ls`
against an API that never answers holds `--timeout` and never says "no volumes"."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.provision import volumes as vol
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for
from .test_volumes import live_volumes


def _mounted(sandbox: Sandbox, home: Path, env: dict[str, str], name: str,
             run_tag: str) -> tuple[str, str]:
    """A volume NAME and a running pod of `run_tag` that mounts it: (volume id, pod id)."""
    made = CliRunner().invoke(app, ["volume", "create", name, "--size-gb", "10",
                                    "--datacenter", "EU-RO-1"])
    assert made.exit_code == 0, made.output
    settings = settings_for(sandbox, home, **env)
    ledger = Ledger(settings.state_dir)
    record = ledger.volume(vol.volume_tag(name))
    assert record is not None and record.volume_id
    spec = PodSpec(run_tag=run_tag, gpu_preference=["A40"], image="img",
                   start_command=["sleep", "30"], volume_id=record.volume_id,
                   data_center_ids=[record.data_center])
    _, info = up_remote(settings, ledger, spec, policy=fast_policy(), timings=fast_timings())
    vol.note_use(ledger, vol.volume_tag(name), run_tag)
    return record.volume_id, info.pod_id


def _says_it_still_bills(output: str, sandbox: Sandbox, volume_id: str) -> None:
    assert "still bills" in output, output
    # the manual delete: the route with the key as a variable, never its value
    assert f"/v2/network-volumes/{volume_id}" in output and "$RUNPOD_API_KEY" in output, output
    assert sandbox.runpod_key not in output


def test_rm_of_a_mounted_volume_says_it_bills_and_names_the_pod_that_mounts_it(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    volume_id, pod_id = _mounted(sandbox, tailpod_home, cli_env, "held", "tp-vol-held-1")
    rm = CliRunner().invoke(app, ["volume", "rm", "held"])
    assert rm.exit_code == 3, rm.output
    _says_it_still_bills(rm.output, sandbox, volume_id)
    assert pod_id in rm.output and "tp-vol-held-1" in rm.output, rm.output
    assert "tailpod down tp-vol-held-1" in rm.output, rm.output
    assert live_volumes(sandbox) == ["tp-vol-held"]  # it really is still there
    record = Ledger(tailpod_home).volume("tp-vol-held")
    assert record is not None and record.active and record.status == "kept"


def test_rm_answered_503_says_the_volume_still_bills_and_exits_3(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    made = CliRunner().invoke(app, ["volume", "create", "busy", "--size-gb", "10",
                                    "--datacenter", "EU-RO-1"])
    assert made.exit_code == 0, made.output
    volume_id = Ledger(tailpod_home).volume("tp-vol-busy").volume_id  # type: ignore[union-attr]
    sandbox.add_fault("server_error", provider="runpod", op="volume_delete", status=503)
    rm = CliRunner().invoke(app, ["volume", "rm", "busy"])
    assert rm.exit_code == 3, rm.output
    _says_it_still_bills(rm.output, sandbox, volume_id)
    assert "503" in rm.output
    assert live_volumes(sandbox) == ["tp-vol-busy"]
    sandbox.clear_faults()
    again = CliRunner().invoke(app, ["volume", "rm", "busy"])  # the retry it advises works
    assert again.exit_code == 0, again.output
    assert live_volumes(sandbox) == []


def test_down_volumes_with_a_failing_delete_shows_the_pods_proof_and_the_volume_and_exits_3(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    volume_id, pod_id = _mounted(sandbox, tailpod_home, cli_env, "dv1", "tp-vol-dv-1")
    sandbox.add_fault("server_error", provider="runpod", op="volume_delete", status=503)
    down = CliRunner().invoke(app, ["down", "tp-vol-dv-1", "--volumes"])
    assert down.exit_code == 3, down.output
    assert "billing proven stopped" in down.output, down.output  # the pod's proof is shown
    _says_it_still_bills(down.output, sandbox, volume_id)
    assert [r["name"] for r in sandbox.billing_now()] == ["tp-vol-dv1"]  # the pod is gone
    proof = json.loads((tailpod_home / "results" / "tp-vol-dv-1" / "billing-proof.json")
                       .read_text())
    assert proof["storage"]["deleted"] == []
    [failed] = proof["storage"]["delete_failed"]
    assert failed["volume"] == "dv1" and failed["volume_ids"] == [volume_id]


def test_down_all_with_volumes_is_refused_before_anything_is_stopped(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    _mounted(sandbox, tailpod_home, cli_env, "all1", "tp-vol-all-1")
    for flag in ("--all", "--expired"):
        down = CliRunner().invoke(app, ["down", flag, "--volumes"])
        assert down.exit_code == 2, down.output
        assert "--volumes" in down.output and "volume rm" in down.output, down.output
    # nothing was attempted: the pod and the volume both still bill
    assert sorted(r["name"] for r in sandbox.billing_now()) == ["tp-vol-all-1", "tp-vol-all1"]


def test_volume_ls_against_a_silent_api_holds_its_timeout_and_never_says_no_volumes(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch, silent_api: str) -> None:
    monkeypatch.setenv("TAILPOD_RUNPOD_URL", silent_api)
    started = time.monotonic()
    ls = CliRunner().invoke(app, ["volume", "ls", "--timeout", "2"])
    took = time.monotonic() - started
    assert ls.exit_code == 3, ls.output
    assert "no volumes" not in ls.output
    assert "unknown" in ls.stderr and "runpod" in ls.stderr
    assert 2.0 <= took < 12.0, f"volume ls --timeout 2 took {took:.1f} s"

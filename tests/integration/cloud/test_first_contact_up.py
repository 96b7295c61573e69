"""`up` runs first contact itself the first time a RunPod account meets an image's start form
(issue 25): on the sandbox a CPU pod checks the facts and is proven down before any GPU pod is
created, the sandbox refuses each fact in turn and `up` acts on it before renting, a second `up`
with the same form rents no probe, and `--no-first-contact` skips it with the consequence said."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger
from tailpod.pods import cloud as cloud_up
from tailpod.pods.first_contact import FirstContactRefused, ensure_first_contact
from tailpod.provision.runpod import first_contact as fc
from tailpod.provision.teardown import down_remote
from tailpod.sandbox import Sandbox

from .test_first_contact_start_form import _fake_pod_side, _pinned, _settings, world

__all__ = ["world"]  # the sandbox fixture, shared with the start-form tests

VLLM = ("vllm/vllm-openai", "v0.11.0")  # ENTRYPOINT vllm serve: the JSON form replaces it
SGLANG = ("lmsysorg/sglang", "v0.5.15")  # no ENTRYPOINT: a plain command line
FAST = {"TAILPOD_FIRST_CONTACT_BOOT_S": "20", "TAILPOD_FIRST_CONTACT_HOLD_S": "1",
        "TAILPOD_FIRST_CONTACT_GONE_S": "15", "TAILPOD_FIRST_CONTACT_POLL_S": "0.2"}


def _up(world: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch, image: tuple[str, str],
        said: list[str], **env: str):  # type: ignore[no-untyped-def]
    settings = _settings(world, home, TAILPOD_FIRST_CONTACT="auto",
                         TAILPOD_IMAGE=f"{image[0]}:{image[1]}", **env)
    # first contact's bounds come from the process environment, as the CLI's do
    for name, value in {**FAST, **env}.items():
        if name.startswith("TAILPOD_FIRST_CONTACT_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (_pinned(*image), None))
    # The preflight's other checks (network, HF, offers) have their own tests; first contact
    # runs in the same `preflight=True` step of up.
    monkeypatch.setattr(cloud_up, "run_preflight_or_refuse", lambda *_a: None)
    ledger = Ledger(settings.state_dir)
    record, _info = cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"),
                                      ledger, said.append, preflight=True)
    return settings, ledger, record


def _cpu_pods(world: Sandbox) -> list[dict[str, object]]:
    return [p for p in world.cloud.pods_public() if p["gpu_count"] == 0]


def _nothing_bills(world: Sandbox) -> None:
    assert world.billing_now() == []
    assert all(p["status"] == "terminated" for p in world.cloud.pods_public())


def test_up_checks_first_contact_once_before_the_gpu_pod(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pod_side(monkeypatch)
    said: list[str] = []
    settings, ledger, record = _up(world, tailpod_home, monkeypatch, VLLM, said)
    try:
        text = " || ".join(said)
        assert world.runpod_key not in text  # nor in the stored facts (a hash of it only)
        assert world.runpod_key not in (tailpod_home / fc.FACTS_FILE).read_text()
        assert "has no result for the json start form" in text
        assert "cost before" in text and "cost after" in text and "proven down" in text
        # the probe came first, and was gone before the GPU pod was asked for
        probe = _cpu_pods(world)
        assert len(probe) == 1 and probe[0]["status"] == "terminated"
        assert said.index(next(s for s in said if "cost after" in s)) < \
            said.index(next(s for s in said if s.startswith("renting on runpod")))
        gpu = [p for p in world.cloud.pods_public() if p["gpu_count"]]
        assert [p["id"] for p in gpu] == [record.pod_id]
        stamp = record.extra.provider_facts["first_contact"]
        assert stamp["verified"] and stamp["same_image"] and stamp["start_form"] == "json"
        assert stamp["start_command_ran"] is True and stamp["pod_key_self_kill"] is True
        stored = fc.facts_for(settings)
        assert [(f.image, f.start_form) for f in stored] == [("vllm/vllm-openai:v0.11.0",
                                                              "json")]
    finally:
        down_remote(settings, ledger, ledger.get(record.run_tag) or record)
    # A second up with the same start form rents no probe.
    said2: list[str] = []
    settings, ledger, again = _up(world, tailpod_home, monkeypatch, VLLM, said2)
    try:
        assert len(_cpu_pods(world)) == 1
        assert any(s.startswith("first contact: start command (json form): ran") for s in said2)
    finally:
        down_remote(settings, ledger, ledger.get(again.run_tag) or again)
    _nothing_bills(world)


def test_a_refused_json_form_refuses_up_before_any_gpu_rents(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world.cloud.runpod_json_start_form = False
    _fake_pod_side(monkeypatch)
    said: list[str] = []
    with pytest.raises(FirstContactRefused) as refused:
        _up(world, tailpod_home, monkeypatch, VLLM, said,
            TAILPOD_FIRST_CONTACT_BOOT_S="3")
    assert refused.value.exit_code == 2
    assert refused.value.message.startswith("first contact refuses this rent, no GPU was rented")
    assert "did not run tailpod's json start form with vllm/vllm-openai:v0.11.0" in \
        refused.value.message
    assert "without an ENTRYPOINT" in (refused.value.hint or "")
    assert [p["gpu_count"] for p in world.cloud.pods_public()] == [0]  # the probe only
    _nothing_bills(world)


def test_an_image_of_the_same_form_is_refused_from_the_stored_result(
        world: Sandbox, tailpod_home: Path) -> None:
    """A JSON form the account did not run refuses another ENTRYPOINT image without a new
    probe, and says which image ran (a plain-form image)."""
    settings = _settings(world, tailpod_home, TAILPOD_FIRST_CONTACT="auto",
                         TAILPOD_IMAGE="vllm/vllm-openai:v0.11.0")
    base = dict(account=fc.account_id(world.runpod_key), checked_at=1.0e9,
                pod_key_self_kill=True, meter_delay_s=1.0, meter_bound_s=2.0)
    fc.save(settings, fc.FirstContactFacts(image="some/entrypoint-image:1", start_form="json",
                                           start_command_ran=False, **base))  # type: ignore[arg-type]
    fc.save(settings, fc.FirstContactFacts(image="lmsysorg/sglang:v0.5.15", start_form="plain",
                                           start_command_ran=True, **base))  # type: ignore[arg-type]
    ran: list[object] = []
    with pytest.raises(FirstContactRefused) as refused:
        ensure_first_contact(settings, _pinned(*VLLM), lambda _l: None,
                             run=lambda *a, **k: ran.append(a))
    assert ran == [] and world.cloud.pods_public() == []
    assert "seen with some/entrypoint-image:1, the same form" in refused.value.message
    assert "lmsysorg/sglang:v0.5.15" in (refused.value.hint or "")
    # the plain-form image is not refused by it
    sglang = _settings(world, tailpod_home, TAILPOD_IMAGE="lmsysorg/sglang:v0.5.15")
    assert ensure_first_contact(sglang, _pinned(*SGLANG), lambda _l: None) == "plain"


def test_a_refused_pod_key_refuses_up_until_ttl_zero(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world.cloud.refuse_pod_key_on_rest = True
    _fake_pod_side(monkeypatch)
    with pytest.raises(FirstContactRefused) as refused:
        _up(world, tailpod_home, monkeypatch, SGLANG, [])
    assert "no self-kill" in refused.value.message and "403" in refused.value.message
    assert "--ttl-hours 0" in (refused.value.hint or "")
    assert [p["gpu_count"] for p in world.cloud.pods_public()] == [0]
    _nothing_bills(world)
    # accepted explicitly: --ttl-hours 0 rents, with no second probe
    said: list[str] = []
    settings, ledger, record = _up(world, tailpod_home, monkeypatch, SGLANG, said,
                                   TAILPOD_TTL_HOURS="0")
    try:
        assert len(_cpu_pods(world)) == 1 and record.pod_id
        assert record.extra.provider_facts["first_contact"]["pod_key_self_kill"] is False
    finally:
        down_remote(settings, ledger, ledger.get(record.run_tag) or record)
    _nothing_bills(world)


def test_no_first_contact_rents_no_probe_and_names_the_consequence(
        world: Sandbox, tailpod_home: Path) -> None:
    settings = _settings(world, tailpod_home, TAILPOD_FIRST_CONTACT="off")
    said: list[str] = []
    assert ensure_first_contact(settings, _pinned(*VLLM), said.append) is None
    assert world.cloud.pods_public() == []
    assert len(said) == 1 and said[0].startswith("warning: first contact skipped")
    assert "stay unverified" in said[0] and "without its self-kill" in said[0]
    assert "first_contact verified: false" in said[0]


def test_a_bad_first_contact_setting_is_refused_before_anything(tailpod_home: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    from tailpod.cli.main import app

    monkeypatch.setenv("TAILPOD_FIRST_CONTACT", "sometimes")
    result = CliRunner().invoke(app, ["up", "--provider", "runpod", "--model", "org/m",
                                      "--image", "vllm/vllm-openai:v0.11.0"])
    assert result.exit_code == 2, result.output
    assert "first contact must be one of auto, off, got 'sometimes'" in " ".join(
        result.output.split())
    assert not (tailpod_home / "ledger").exists()

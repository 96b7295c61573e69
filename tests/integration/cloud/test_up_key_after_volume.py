"""`up --volume` refused before the rent mints no tailnet key (#26, money ordering): the pod's
single-use auth key is the last thing minted before the create, so a volume that cannot serve
leaves no live ephemeral key in the tailnet. The emulated Tailscale API lists every key it made
(GET /api/v2/tailnet/-/keys); the pod's key itself is checked by
test_first_contact_start_form.py::test_each_pod_gets_its_own_single_use_auth_key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tailpod.config import Settings, load_settings
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger
from tailpod.pods import cloud as cloud_up
from tailpod.provision import volumes as vol
from tailpod.provision.providers import get_provider
from tailpod.sandbox import Sandbox, start_sandbox
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY, DEFAULT_AUTH_KEY_ID
from tests.helpers.api_timings import fast_timings

IMAGE = "vllm/vllm-openai@sha256:" + "ab" * 32


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Sandbox]:
    sb = start_sandbox(start_delay_s=0.05, workdir=tmp_path / "sandbox")
    try:
        yield sb
    finally:
        sb.close()


def _settings(sb: Sandbox, home: Path, gpus: str) -> Settings:
    from tailpod.cli.demo_world import demo_ssh_key

    return load_settings(env={
        **sb.env(), "TAILPOD_HOME": str(home), "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
        "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY, "TAILPOD_SSH_KEY": str(demo_ssh_key(home)),
        "TAILPOD_PROVIDER": "runpod", "TAILPOD_IMAGE": IMAGE, "TAILPOD_GPUS": gpus,
        "TAILPOD_MAX_PRICE": "1.0"}, dotenv_path=home / "absent.env")


def _keys(sb: Sandbox) -> list[str]:
    reply = httpx.get(sb.extra_urls["tailscale"].rstrip("/") + "/api/v2/tailnet/-/keys",
                      headers={"Authorization": f"Bearer {DEFAULT_API_TOKEN}"}, timeout=10.0)
    reply.raise_for_status()
    return sorted(k["id"] for k in reply.json()["keys"])


@pytest.mark.parametrize(("volume", "gpus", "refusal"), [
    ("nosuch", "NVIDIA A40", "no volume nosuch"),
    ("ro", "H200 SXM", "none of H200 SXM"),  # the volume's data center has none of the GPUs
])
def test_a_refused_volume_mints_no_key_and_rents_nothing(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch, volume: str,
        gpus: str, refusal: str) -> None:
    settings = _settings(world, tailpod_home, gpus)
    ledger = Ledger(settings.state_dir)
    vol.create_volume_safely(get_provider("runpod", settings, timings=fast_timings()), ledger,
                             "ro", 20, vol.Placement("EU-RO-1", None, ["NVIDIA A40"]))
    monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (IMAGE, None))
    assert _keys(world) == [DEFAULT_AUTH_KEY_ID]  # only the sandbox's configured key
    said: list[str] = []
    with pytest.raises(ConfigError, match=refusal):
        cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model=str(tailpod_home)),
                          ledger, said.append, preflight=False, volume=volume)
    assert _keys(world) == [DEFAULT_AUTH_KEY_ID]
    assert not any("minted" in line for line in said)
    assert [r["name"] for r in world.billing_now()] == ["tp-vol-ro"]  # no pod was rented
    assert ledger.all() == []

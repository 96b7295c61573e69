"""Limits the vendors state (issue 12 item 6): vast's onstart and env sizes are checked before
anything is sent and enforced by the emulator; a RunPod pod list that comes in pages is read to
its last page, and one that carries a page token tailpod cannot follow is never read as complete."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest

from tailpod.config import Settings
from tailpod.errors import ConfigError, ProviderError
from tailpod.provision.runpod.provider import RunPodProvider
from tailpod.provision.vastai.limits import ENV_ENTRY_MAX_CHARS, ONSTART_MAX_CHARS
from tailpod.sandbox import Sandbox
from tailpod.secrets import Secret
from tests.helpers.api_timings import fast_timings

from .conftest import Cloud


def rent(sandbox: Sandbox, body: dict[str, object]) -> httpx.Response:
    offer = next(iter(sandbox.cloud.vast_offers))
    return httpx.put(f"{sandbox.vast_url}/api/v0/asks/{offer}/", json=body, timeout=5,
                     headers={"Authorization": f"Bearer {sandbox.vast_key}"})


def test_vast_emulator_refuses_onstart_over_4048(sandbox: Sandbox) -> None:
    base = {"client_id": "me", "image": "img", "disk": 10, "label": "tp-x",
            "runtype": "ssh_direct"}
    too_long = rent(sandbox, {**base, "onstart": "x" * (ONSTART_MAX_CHARS + 1)})
    assert too_long.status_code == 400 and "4048" in too_long.json()["msg"]
    assert sandbox.meter()["billing_count"] == 0
    fits = rent(sandbox, {**base, "onstart": "x" * ONSTART_MAX_CHARS})
    assert fits.status_code == 200 and fits.json()["success"] is True


def test_vast_emulator_refuses_oversized_env_value(sandbox: Sandbox) -> None:
    body = {"client_id": "me", "image": "img", "disk": 10, "label": "tp-x",
            "env": {"BIG": "v" * ENV_ENTRY_MAX_CHARS}}
    answer = rent(sandbox, body)
    assert answer.status_code == 400 and "BIG" in answer.json()["msg"]
    assert "vvvv" not in answer.text  # a value (maybe a secret) is never echoed


def test_vast_client_checks_limits_before_sending(make_cloud) -> None:  # type: ignore[no-untyped-def]
    cloud: Cloud = make_cloud("vastai")
    spec = replace(cloud.spec(gpus=[cloud.gpu("second")]), start_command=["sh", "-c", "y" * 5000])
    with pytest.raises(ConfigError, match="onstart is .* at most 4048"):
        cloud.provider.create(spec)
    assert cloud.sandbox.meter()["billing_count"] == 0
    assert cloud.sandbox.cloud.pods == {}


def test_vast_client_names_the_env_limit(make_cloud) -> None:  # type: ignore[no-untyped-def]
    cloud: Cloud = make_cloud("vastai")
    spec = cloud.spec(gpus=[cloud.gpu("second")])
    spec.env["HUGE"] = Secret("s" * ENV_ENTRY_MAX_CHARS)
    with pytest.raises(ConfigError) as err:
        cloud.provider.create(spec)
    assert "HUGE" in str(err.value) and str(ENV_ENTRY_MAX_CHARS) in str(err.value)
    assert "ssss" not in str(err.value)
    assert cloud.sandbox.cloud.pods == {}


def test_tailpod_start_command_fits_vast_onstart() -> None:
    """The real start command (stage-0 guard + join) must fit, with room to spare."""
    import shlex
    import time

    from tailpod.pods import deadman_control as dm
    from tailpod.pods.start_command import start_command

    argv = dm.guarded_start_command(start_command("tp-20261201-150000-abcdef", ["tag:tailpod"]),
                                    "vastai", time.time() + 7200, 900, "https://console.vast.ai",
                                    layout=dm.DeadmanLayout(remote_dir="~/.tailpod"))
    assert len(shlex.join(argv)) <= ONSTART_MAX_CHARS


def test_runpod_list_in_pages_is_read_to_the_last_page(
    make_cloud: Callable[[str], Cloud],
) -> None:
    runpod = make_cloud("runpod")
    runpod.sandbox.cloud.runpod_list_page_size = 2
    tags = [f"tp-page-{i}" for i in range(5)]
    for tag in tags:
        runpod.provider.create(runpod.spec(run_tag=tag))
    assert sorted(p.run_tag or "" for p in runpod.provider.list_by_tag()) == tags
    # The emulator's first page alone holds two of the five: the client followed the token.
    first = httpx.get(f"{runpod.sandbox.runpod_url}/v2/pods", timeout=5,
                      headers={"Authorization": f"Bearer {runpod.sandbox.runpod_key}"}).json()
    assert len(first["pods"]) == 2 and first["nextPageToken"]


def runpod_answering(body: dict[str, object]) -> RunPodProvider:
    """A RunPod client whose every `GET /v2/pods` gets `body`."""
    settings = Settings(runpod_api_key=Secret("rp_test_key_0001"))  # type: ignore[call-arg]
    return RunPodProvider(settings, timings=fast_timings(),
                          transport=httpx.MockTransport(lambda _r: httpx.Response(200, json=body)))


def test_runpod_list_with_a_page_token_that_repeats_is_not_trusted() -> None:
    with pytest.raises(ProviderError, match="repeats a page token"):
        runpod_answering({"pods": [], "nextPageToken": "same"}).list_all()


def test_runpod_list_with_an_unknown_page_token_is_not_trusted() -> None:
    with pytest.raises(ProviderError, match="cursor.*page token tailpod cannot follow"):
        runpod_answering({"pods": [], "cursor": "b2Zmc2V0PTEwMA=="}).list_all()


def test_runpod_list_without_a_page_token_is_read() -> None:
    assert runpod_answering({"pods": []}).list_all() == []

"""Every request tailpod sends to RunPod v2 and vast.ai, and every answer the emulators give, checked
against the JSON Schemas derived from the vendors' published OpenAPI documents (this folder; each
file names its source repository, path and commit). The emulators must refuse what the real API
refuses."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tailpod.config import load_settings, ttl_deadline
from tailpod.ledger import Ledger, PodRecord, new_run_tag
from tailpod.provision.base import PodSpec
from tailpod.provision.create import create_pod_safely
from tailpod.provision.providers import get_provider
from tailpod.provision.teardown import teardown
from tailpod.sandbox import Sandbox
from tailpod.secrets import Secret
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .contract import Recorder, contract_for, contract_problems, contracts

VENDOR = {"runpod": "runpod", "vastai": "vast"}
GPU = {"runpod": "NVIDIA A40", "vastai": "RTX 4090"}


def test_every_contract_names_its_source() -> None:
    assert {c.vendor for c in contracts()} == {"runpod", "vast"}
    for c in contracts():
        source = c.doc["x-source"]
        assert source["repository"] in ("runpod/docs", "vast-ai/docs")
        assert len(source["commit"]) == 40 and source["path"].endswith((".json", ".yaml"))


@pytest.mark.parametrize("kind", ["runpod", "vastai"])
def test_lifecycle_traffic_matches_the_published_contracts(kind: str, sandbox: Sandbox,
                                                           tmp_path: Path) -> None:
    recorder = Recorder()
    settings = load_settings(env={**sandbox.env(), "TAILPOD_HOME": str(tmp_path / "home")},
                             dotenv_path=tmp_path / "absent.env")
    provider = get_provider(kind, settings, timings=fast_timings(), transport=recorder)
    ledger = Ledger(tmp_path / "home")
    tag = new_run_tag()
    spec = PodSpec(run_tag=tag, gpu_preference=[GPU[kind]], image="sandbox/image:latest",
                   start_command=["sh", "-c", "sleep 60"], disk_gb=20, ports=[22],
                   env={"HF_TOKEN": Secret("hf_contractTEST0123456789"), "TAILPOD_RUN_TAG": tag})
    spec.ttl_at = ttl_deadline(1.0, time.time())
    info = create_pod_safely(provider, spec, ledger, PodRecord(run_tag=tag, provider=kind),
                             policy=fast_policy())
    provider.get(info.pod_id)
    provider.get("0" if kind == "vastai" else "nosuchpod")  # a miss, answered by the spec's shape
    record = ledger.get(tag)
    assert record is not None
    assert teardown(provider, ledger, record, tmp_path / "run", policy=fast_policy()
                    ).proven

    problems, seen = contract_problems(VENDOR[kind], recorder.exchanges)
    assert not problems, "\n".join(problems)
    expected = {"runpod": {"catalog_gpus", "create_pod", "get_pod", "list_pods", "delete_pod"},
                "vastai": {"search_offers", "create_instance", "show_instance",
                           "list_instances", "destroy_instance"}}[kind]
    assert expected <= seen


def rp_create(sandbox: Sandbox, body: dict[str, object]) -> httpx.Response:
    return httpx.post(sandbox.runpod_url + "/v2/pods", json=body, timeout=5,
                      headers={"Authorization": f"Bearer {sandbox.runpod_key}"})


BASE_CREATE = {"name": "tp-contract", "image": "img", "gpu": {"id": "NVIDIA A40", "count": 1}}


@pytest.mark.parametrize("body", [
    {**BASE_CREATE, "gpuTypeId": "NVIDIA A40"},  # a GraphQL-era key
    {**BASE_CREATE, "dockerArgs": "sleep 1"},
    {**BASE_CREATE, "gpu": {"id": "NVIDIA A40", "count": 1, "type": "x"}},  # CreateGpuConfig
    {**BASE_CREATE, "mounts": {"persistent": {"size": 5, "path": "/w"}, "extra": 1}},
])
def test_runpod_emulator_refuses_unknown_create_keys_with_422(sandbox: Sandbox,
                                                              body: dict[str, object]) -> None:
    """`CreatePodRequest` is `unevaluatedProperties: false` (so is `CreateGpuConfig`; `Mounts` is
    `additionalProperties: false`); a body that breaks the contract is 422 by the status table of
    `paths./v2/pods.post.description` ("The body does not match the contract. `errors` lists
    each violation"). The one public 400 observation (runpodctl PR #314) is REST v1."""
    create = contract_for("runpod", "POST", "/v2/pods")
    assert create is not None and create.request_errors(body)  # the spec refuses it too
    answer = rp_create(sandbox, body)
    assert answer.status_code == 422, answer.text
    assert not create.response_errors(422, answer.json())
    assert any("not allowed" in e for e in answer.json()["errors"])
    assert sandbox.meter()["billing_count"] == 0


def test_runpod_emulator_accepts_what_the_spec_accepts(sandbox: Sandbox) -> None:
    create = contract_for("runpod", "POST", "/v2/pods")
    assert create is not None and not create.request_errors(BASE_CREATE)
    answer = rp_create(sandbox, BASE_CREATE)
    assert answer.status_code == 201, answer.text
    assert not create.response_errors(201, answer.json())


def test_runpod_emulator_errors_match_the_spec(sandbox: Sandbox) -> None:
    missing = httpx.get(sandbox.runpod_url + "/v2/pods/nope", timeout=5,
                        headers={"Authorization": f"Bearer {sandbox.runpod_key}"})
    get = contract_for("runpod", "GET", "/v2/pods/nope")
    assert get is not None and missing.status_code == 404
    assert not get.response_errors(404, missing.json())
    anon = httpx.get(sandbox.runpod_url + "/v2/pods", timeout=5)
    listing = contract_for("runpod", "GET", "/v2/pods")
    assert listing is not None and anon.status_code == 401
    assert not listing.response_errors(401, anon.json())


def test_tailpod_stops_at_a_422_for_an_unknown_key(sandbox: Sandbox, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown key is tailpod's bug, not a GPU without capacity: no walk down the list."""
    from tailpod.errors import ProviderError
    from tailpod.provision.runpod.provider import RunPodProvider

    settings = load_settings(env={**sandbox.env(), "TAILPOD_HOME": str(tmp_path / "home")},
                             dotenv_path=tmp_path / "absent.env")
    provider = get_provider("runpod", settings, timings=fast_timings())
    real = RunPodProvider._create_body

    def with_stray_key(self, spec, gpu_id):  # type: ignore[no-untyped-def]
        return {**real(self, spec, gpu_id), "dockerArgs": "sleep 1"}

    monkeypatch.setattr(RunPodProvider, "_create_body", with_stray_key)
    spec = PodSpec(run_tag=new_run_tag(), gpu_preference=["NVIDIA A40", "RTX 4090"],
                   image="img", start_command=["sleep", "1"])
    with pytest.raises(ProviderError, match="malformed .HTTP 422.*dockerArgs"):
        provider.create(spec)
    assert sandbox.meter()["billing_count"] == 0

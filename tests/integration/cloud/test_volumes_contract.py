"""Every volume request tailpod sends and every answer the RunPod emulator gives, checked against
the JSON Schemas derived from runpod/docs api-reference-v2/openapi.json @ a900806e
(tests/integration/contracts/runpod/*network_volume*.json, catalog_datacenters.json)."""

from __future__ import annotations

import time
from pathlib import Path

from tailpod.config import load_settings, ttl_deadline
from tailpod.ledger import Ledger, PodRecord, new_run_tag
from tailpod.provision import volumes as vol
from tailpod.provision.base import PodSpec
from tailpod.provision.create import create_pod_safely
from tailpod.provision.providers import get_provider
from tailpod.provision.teardown import teardown
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy
from tests.integration.contracts.contract import Recorder, contract_problems


def test_volume_traffic_matches_the_published_contracts(sandbox: Sandbox, tmp_path: Path) -> None:
    recorder = Recorder()
    home = tmp_path / "home"
    settings = load_settings(env={**sandbox.env(), "TAILPOD_HOME": str(home)},
                             dotenv_path=tmp_path / "absent.env")
    provider = get_provider("runpod", settings, timings=fast_timings(), transport=recorder)
    ledger = Ledger(home)
    place = vol.choose_data_center(provider, data_center=None,  # type: ignore[arg-type]
                                   gpu_preference=["NVIDIA A40"], volume_type="STANDARD")
    record = vol.create_volume_safely(provider, ledger, "contract", 10, place)
    tag = new_run_tag()
    spec = PodSpec(run_tag=tag, gpu_preference=place.gpus, image="img",
                   start_command=["sleep", "30"], volume_id=record.volume_id,
                   data_center_ids=[place.data_center])
    spec.ttl_at = ttl_deadline(1.0, time.time())
    create_pod_safely(provider, spec, ledger, PodRecord(run_tag=tag, provider="runpod"),
                      policy=fast_policy())
    pod = ledger.get(tag)
    assert pod is not None
    assert teardown(provider, ledger, pod, tmp_path / "run", policy=fast_policy()).proven
    provider.volume_get("nosuchvolume")  # type: ignore[attr-defined]
    vol.delete_volume_proven(provider, ledger, "contract")

    problems, seen = contract_problems("runpod", recorder.exchanges)
    assert not problems, "\n".join(problems)
    assert {"catalog_datacenters", "create_network_volume", "list_network_volumes",
            "get_network_volume", "delete_network_volume", "create_pod"} <= seen

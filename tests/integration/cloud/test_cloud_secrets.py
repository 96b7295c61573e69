"""Secrets (API keys, tokens passed to the pod) never reach output, logs, ledger, proofs or errors."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from tailpod.errors import TailpodError
from tailpod.provision.apiclient import JsonApi
from tailpod.provision.create import create_pod_safely
from tailpod.provision.reconcile import reconcile
from tailpod.provision.teardown import UnprovenTeardown, teardown
from tailpod.secrets import Secret
from tests.helpers.api_timings import fast_timings

from .conftest import HF_SECRET, Cloud


def test_secrets_stay_out_of_ledger_proof_errors_and_logs(
    cloud: Cloud, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    api_key = cloud.sandbox.runpod_key if cloud.kind == "runpod" else cloud.sandbox.vast_key
    spec = cloud.spec()
    cloud.fault("capacity", gpu=cloud.gpu("sandbox_name_first"))
    info = create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec),
                             policy=cloud.policy)
    # the pod really received the token (the provider API even echoes env back)...
    pod = cloud.sandbox.cloud.pods[f"{cloud.sandbox_name}:{info.pod_id}"]
    assert pod.env["HF_TOKEN"] == HF_SECRET
    # ...but tailpod's own records never hold it
    assert HF_SECRET not in repr(info) and api_key not in repr(info)
    report = reconcile({cloud.provider.name: cloud.provider}, cloud.ledger)
    texts = [json.dumps(report.to_json(), default=str)]

    cloud.fault("terminate_fail", status=500)
    with pytest.raises(UnprovenTeardown) as err:
        teardown(cloud.provider, cloud.ledger, cloud.ledger.get(spec.run_tag),  # type: ignore[arg-type]
                 cloud.run_dir(spec.run_tag), policy=cloud.policy)
    texts += [str(err.value), err.value.hint or "", repr(err.value.evidence)]
    cloud.sandbox.clear_faults()
    teardown(cloud.provider, cloud.ledger, cloud.ledger.get(spec.run_tag),  # type: ignore[arg-type]
             cloud.run_dir(spec.run_tag), policy=cloud.policy)

    texts.append(cloud.ledger.path.read_text())
    texts.append((cloud.run_dir(spec.run_tag) / "billing-proof.json").read_text())
    texts.append(caplog.text)
    captured = capsys.readouterr()
    texts += [captured.out, captured.err]
    for text in texts:
        assert HF_SECRET not in text
        assert api_key not in text
    assert cloud.billing() == []


def test_auth_errors_never_quote_the_key(cloud: Cloud) -> None:
    env_key = "RUNPOD_API_KEY" if cloud.kind == "runpod" else "VAST_API_KEY"
    bad = "sk-live-THISMUSTNOTLEAK-0042"
    provider = cloud.new_provider(**{env_key: bad})
    echo = cloud.fault("echo_key")  # the emulator's error body quotes the key it refused
    with pytest.raises(TailpodError) as err:
        provider.list_by_tag(None)
    assert echo.fired >= 1
    assert bad not in str(err.value) and bad not in repr(err.value)
    assert bad not in (err.value.hint or "")


def test_error_bodies_that_echo_a_key_are_redacted() -> None:
    key = Secret("echoed-secret-key-777")

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer echoed-secret-key-777"
        return httpx.Response(400, json={"detail": "bad key echoed-secret-key-777 here"})

    api = JsonApi("Test", "http://example.invalid", key, timings=fast_timings(),
                  auth_env="TEST_KEY", transport=httpx.MockTransport(handler))
    with pytest.raises(TailpodError) as err:
        api.call("GET", "/x", "testing")
    assert "echoed-secret-key-777" not in str(err.value)
    assert "***" in str(err.value)

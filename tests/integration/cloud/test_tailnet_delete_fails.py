"""A Tailscale 500 on the device delete while the pod is proven gone (issue 38 item 8; adversary
#9 tailnet wording): `down` still exits 3 (a step of the teardown failed, the device is left),
but never says "STILL BILLING" or "billing is NOT proven stopped" for a pod the provider shows
gone; it says that the device delete failed and how to retry."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.provision.base import ProofCheck
from tailpod.provision.create import create_pod_safely
from tailpod.provision.tailnet.devices import PROOF_NAME
from tailpod.provision.teardown import UnprovenTeardown, teardown

from .conftest import Cloud

FAILED = ProofCheck(PROOF_NAME, False, "could not check the tailnet for tailpod-x: Tailscale "
                    "API: deleting device failed (HTTP 500)")


def test_a_failed_device_delete_is_not_called_billing(cloud: Cloud) -> None:
    spec = cloud.spec()
    create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec), policy=cloud.policy)
    record = cloud.ledger.get(spec.run_tag)
    assert record is not None
    with pytest.raises(UnprovenTeardown) as err:
        teardown(cloud.provider, cloud.ledger, record, cloud.run_dir(spec.run_tag),
                 policy=cloud.policy, extra_proofs=lambda: [FAILED])
    assert cloud.billing() == []  # the pod really is gone
    assert err.value.exit_code == 3
    text = str(err.value)
    assert "NOT proven" not in text and "STILL BILLING" not in text, text
    assert "billing proven stopped" in text and PROOF_NAME in text and "HTTP 500" in text, text
    assert f"tailpod down {spec.run_tag}" in text
    assert err.value.evidence.still_billing == []


def test_down_says_the_device_delete_failed_without_still_billing(
        cloud: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.provision import teardown as teardown_mod

    for key, value in {**cloud.sandbox.env(), "TAILPOD_PROVIDER": cloud.kind,
                       "TAILPOD_HOME": str(cloud.home),
                       "TAILPOD_RESULTS_DIR": str(cloud.home / "results")}.items():
        monkeypatch.setenv(key, value)
    spec = cloud.spec()
    create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec), policy=cloud.policy)
    monkeypatch.setattr(teardown_mod, "_tailnet_proof", lambda _s, _r: lambda: [FAILED])
    down = CliRunner().invoke(app, ["down", spec.run_tag, "--timeout", "60"],
                              env={"COLUMNS": "250"})
    assert down.exit_code == 3, down.output
    flat = " ".join(down.output.split())
    assert "STILL BILLING" not in flat and "NOT proven" not in flat, flat
    assert "billing proven stopped" in flat and "HTTP 500" in flat, flat
    assert cloud.billing() == []

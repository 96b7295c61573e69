"""`status --all` with a vast.ai pod in the ledger and VAST_API_KEY not loaded (a shell without
the sandbox's env) said "unknown: could not ask VAST_API_KEY is not set (…)": the provider it
could not ask went unnamed and the sentence read wrong. Each error names its provider, as a
failed listing does ("could not ask runpod: HTTP 503")."""

from __future__ import annotations

from pathlib import Path

from tailpod.config import Settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.reconcile import status_remote


def test_a_missing_key_is_named_with_its_provider(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")  # no key at all
    ledger = Ledger(settings.state_dir)
    ledger.put(PodRecord(run_tag="tp-v", provider="vastai", status="running", pod_id="31"))
    report = status_remote(settings, ledger, timings="fast")
    (error,) = report.errors
    assert error.startswith("vastai: ") and "VAST_API_KEY" in error

"""At 80 columns `status` and `check-requirements` keep every tag, price, flag and identifier
whole (a table when it fits, else a block per item), and status explains its flags."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tailpod.cli.common import table_or_blocks
from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import PodSpec
from tailpod.provision.providers import get_provider

TRACKED = "tp-20261202-narrow-tracked-7f3a"
ORPHAN = "tp-20261202-narrow-orphan-9c1d"
GHOST = "tp-20261202-narrow-ghost-4b2e"


def _words(text: str) -> set[str]:
    return set(re.split(r"[\s│┃|]+", text))


def test_status_at_80_columns_keeps_tags_spend_and_flags_whole(
        cloud_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VAST_API_KEY")
    settings = load_settings()
    provider = get_provider("runpod", settings)
    ledger = Ledger(settings.state_dir)
    tracked = provider.create(PodSpec(run_tag=TRACKED, gpu_preference=["A40"], image="img",
                                      start_command=["sleep", "30"]))
    orphan = provider.create(PodSpec(run_tag=ORPHAN, gpu_preference=["A40"], image="img",
                                     start_command=["sleep", "30"]))
    try:
        ledger.put(PodRecord(run_tag=TRACKED, provider="runpod", status="running",
                             pod_id=tracked.pod_id, price_per_hr=0.4,
                             created_at=time.time() - 600))
        ledger.put(PodRecord(run_tag=GHOST, provider="runpod", status="running",
                             pod_id="ghostpod000001", price_per_hr=0.5))
        result = CliRunner().invoke(app, ["status", "--no-beat"], env={"COLUMNS": "80"})
        out = result.output
        assert "…" not in out, out
        assert all(len(line) <= 80 for line in out.splitlines()), out
        words = _words(out)
        for tag in (TRACKED, ORPHAN, GHOST):
            assert tag in words or any(w.endswith(tag) for w in words), (tag, out)
        assert re.search(r"flags\s+ghost\b", out) and re.search(r"flags\s+orphan\b", out), out
        # the provider's pod ids and the spend, whole
        assert tracked.pod_id in out and orphan.pod_id in out
        assert re.search(r"\$\d+\.\d{4}", out)
        # the legend says what the flags mean (its words: cli/pods.py FLAG_MEANINGS)
        assert re.search(r"^\s*ghost: \S", out, re.M), out
        assert re.search(r"^\s*orphan: \S", out, re.M), out
    finally:
        for pod in (tracked, orphan):
            provider.terminate(pod.pod_id)


def test_check_requirements_at_80_columns_breaks_no_identifier(tailpod_home: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    for key in ("RUNPOD_API_KEY", "TAILSCALE_API_KEY", "TAILSCALE_AUTH_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TAILPOD_RUNPOD_URL", "http://127.0.0.1:9")
    args = ["check-requirements", "--provider", "runpod", "--model", str(tailpod_home / "m")]
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    out = result.output
    assert "…" not in out
    assert all(len(line) <= 80 for line in out.splitlines())
    words = _words(out)
    identifiers = {w.strip(".,;:()'\"`") for c in doc["checks"] for w in
                   (c["detail"] + " " + c["fix"]).split()}
    identifiers = {w for w in identifiers if re.fullmatch(r"[A-Z][A-Z0-9_]{5,}", w)}
    assert "TAILSCALE_API_KEY" in identifiers  # the case the issue saw cut in two
    for ident in identifiers:
        assert any(ident in w for w in words), (ident, out)


def test_table_when_it_fits_blocks_when_not() -> None:
    rows = [["tp-a-very-long-run-tag-0001", "runpod", "$0.4000", "ghost"]]
    cols = ["run tag", "provider", "spent", "flags"]
    wide = Console(width=120, record=True)
    wide.print(table_or_blocks(wide, "pods", cols, rows))
    assert "┃ run tag" in wide.export_text() or "run tag" in wide.export_text().splitlines()[1]
    narrow = Console(width=40, record=True)
    narrow.print(table_or_blocks(narrow, "pods", cols, rows))
    text = narrow.export_text()
    assert "pods: tp-a-very-long-run-tag-0001" in text
    assert re.search(r"^spent\s+\$0\.4000$", text, re.M), text
    assert "…" not in text

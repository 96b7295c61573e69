"""Where a sweep runs: the engine is (re)started there and the probe measures it over 127.0.0.1.

`LocalSweepHost` drives the local provider. The probe always runs as its own process (`probe.py`,
stdlib only), exactly as it does on a rented pod, so the local numbers come from the same measurer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tailpod.bootstrap.engines.base import EngineConfig
from tailpod.config import Settings
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.probes.plan import Arm, Cell, SweepPlan
from tailpod.probes.sweep import ArmStart, GateResult

PROBE_FILE = Path(__file__).with_name("probe.py")
PROMPTS_DIR = Path(__file__).with_name("prompts")
GATE_MAX_TOKENS = 48


def probe_run_args(
    base_url: str, arm: Arm, cell: Cell, plan: SweepPlan, run_id: str, out: str, cache: str
) -> list[str]:
    requests = plan.requests_per_cell or max(4, cell.concurrency)
    return [
        "run",
        "--base-url",
        base_url,
        "--model",
        arm.config.served_name,
        "--arm",
        arm.label,
        "--run-id",
        run_id,
        "--concurrency",
        str(cell.concurrency),
        "--reps",
        "1",
        "--requests-per-cell",
        str(requests),
        "--max-tokens",
        str(plan.max_tokens),
        "--prompt-classes",
        cell.prompt_class,
        "--cache",
        cache,
        "--engine",
        arm.config.engine if arm.config.engine in ("vllm", "sglang") else "auto",
        "--out",
        out,
    ]


def renumber(rows: list[dict[str, Any]], cell: Cell) -> list[dict[str, Any]]:
    """The probe ran one rep (numbered 0); give its rows the sweep's rep and cell id."""
    for row in rows:
        row["rep"] = cell.rep
        warm = str(row.get("cell", "")).endswith("|warm")
        row["cell"] = cell.cell_id + ("|warm" if warm else "")
    return rows


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            rows.append(json.loads(line))
    return rows


class LocalSweepHost:
    measured_from = "pod"  # the probe runs on the machine that serves, against 127.0.0.1

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        record: PodRecord,
        progress: Callable[[float, str], None] | None = None,
        cache: str = "cold",
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.record = record
        self.progress = progress
        self.cache = cache

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.record.engine.get('port', self.settings.port)}"

    def _probe(self, args: list[str], timeout: float = 3600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, str(PROBE_FILE), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode not in (0, 1):
            tail = "\n    ".join(proc.stderr.strip().splitlines()[-8:])
            raise TailpodError(f"the probe failed (exit {proc.returncode}):\n    {tail}")
        return proc

    def restart(self, arm: Arm) -> ArmStart:
        from tailpod.bootstrap import onpod
        from tailpod.provision.local.lifecycle import relaunch_local

        current = self.ledger.get(self.record.run_tag)
        assert current is not None
        label = arm.config.spec.label()
        started = current.extra.get("arms", {}).get(label)
        already = (
            current.status == "running"
            and EngineConfig.from_json(current.engine) == arm.config
            and started is not None
            and onpod.healthy("127.0.0.1", int(arm.config.port))
        )
        if not already:  # the engine `up` started is reused when it already serves this arm
            relaunch_local(self.settings, current, arm.config, self.ledger, self.progress)
        updated = self.ledger.get(self.record.run_tag)
        assert updated is not None
        self.record = updated
        started = updated.extra["arms"][arm.config.spec.label()]
        return ArmStart(
            startup=started["startup"], argv=started["argv"], startup_s=started["startup_s"]
        )

    def run_cells(
        self, arm: Arm, cells: list[Cell], plan: SweepPlan, run_id: str
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for cell in cells:
            with tempfile.TemporaryDirectory(prefix="tailpod-probe-") as tmp:
                out = Path(tmp) / "rows.jsonl"
                self._probe(
                    probe_run_args(self.base_url, arm, cell, plan, run_id, str(out), self.cache)
                )
                rows += renumber(read_jsonl(out), cell)
        return rows

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="tailpod-gate-") as tmp:
            out = Path(tmp) / "reference.json"
            self._probe(
                [
                    "gate",
                    "--candidate",
                    self.base_url,
                    "--save-reference",
                    str(out),
                    "--model",
                    arm.config.served_name,
                    "--max-tokens",
                    str(GATE_MAX_TOKENS),
                ]
            )
            return json.loads(out.read_text())

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        with tempfile.TemporaryDirectory(prefix="tailpod-gate-") as tmp:
            ref_file = Path(tmp) / "reference.json"
            ref_file.write_text(json.dumps(reference))
            out = Path(tmp) / "gate.json"
            self._probe(
                [
                    "gate",
                    "--reference-file",
                    str(ref_file),
                    "--candidate",
                    self.base_url,
                    "--model",
                    arm.config.served_name,
                    "--max-tokens",
                    str(GATE_MAX_TOKENS),
                    "--out",
                    str(out),
                ]
            )
            result = json.loads(out.read_text())
        return GateResult(
            status=result["status"],
            method=result.get("method"),
            prompts=int(result.get("prompts", 0)),
            first_mismatch=result.get("first_mismatch"),
            detail=result.get("token_source"),
        )

"""Where a sweep runs: the engine is (re)started there and the probe measures it over 127.0.0.1.

`LocalSweepHost` drives the local provider. The probe always runs as its own process (`probe.py`,
stdlib only), exactly as it does on a rented pod, so the local numbers come from the same measurer.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import uuid
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
BARE_FILE = Path(__file__).with_name("bare.py")
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


def parse_jsonl(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            rows.append(json.loads(line))
    return rows


class ProbeSweepHost:
    """Runs `probe.py` where the engine runs; subclasses say how to run it and move its files."""

    measured_from = "pod"

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

    def _arm_started(self, label: str) -> ArmStart:
        """The ledger's record of the arm's latest start (its startup facts and argv)."""
        updated = self.ledger.get(self.record.run_tag)
        assert updated is not None
        self.record = updated
        started = updated.extra["arms"][label]
        return ArmStart(
            startup=started["startup"],
            argv=started["argv"],
            startup_s=started["startup_s"] or 0.0,
            checkpoints=started.get("checkpoints") or {},
        )

    @property
    def base_url(self) -> str:
        raise NotImplementedError

    def _probe(self, args: list[str], timeout: float = 3600) -> None:
        raise NotImplementedError

    def _path(self, name: str) -> str:
        raise NotImplementedError

    def _read(self, path: str) -> str:
        raise NotImplementedError

    def _write(self, path: str, text: str) -> None:
        raise NotImplementedError

    def run_cells(
        self, arm: Arm, cells: list[Cell], plan: SweepPlan, run_id: str
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for cell in cells:
            out = self._path(f"rows-{uuid.uuid4().hex}.jsonl")
            self._probe(probe_run_args(self.base_url, arm, cell, plan, run_id, out, self.cache))
            rows += renumber(parse_jsonl(self._read(out)), cell)
        return rows

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        out = self._path(f"gate-reference-{uuid.uuid4().hex}.json")
        self._probe(
            ["gate", "--candidate", self.base_url, "--save-reference", out,
             "--model", arm.config.served_name, "--max-tokens", str(GATE_MAX_TOKENS)]
        )  # fmt: skip
        reference: dict[str, Any] = json.loads(self._read(out))
        return reference

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        ref_file = self._path(f"gate-reference-{uuid.uuid4().hex}.json")
        out = self._path(f"gate-{uuid.uuid4().hex}.json")
        self._write(ref_file, json.dumps(reference))
        self._probe(
            ["gate", "--reference-file", ref_file, "--candidate", self.base_url,
             "--model", arm.config.served_name, "--max-tokens", str(GATE_MAX_TOKENS),
             "--out", out]
        )  # fmt: skip
        result = json.loads(self._read(out))
        return GateResult(
            status=result["status"],
            method=result.get("method"),
            prompts=int(result.get("prompts", 0)),
            first_mismatch=result.get("first_mismatch"),
            detail=result.get("token_source"),
        )


class LocalSweepHost(ProbeSweepHost):
    """The local provider: the engine is a child of this machine; so is the probe."""

    measured_from = "pod"  # the probe runs on the machine that serves, against 127.0.0.1

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        record: PodRecord,
        progress: Callable[[float, str], None] | None = None,
        cache: str = "cold",
    ) -> None:
        super().__init__(settings, ledger, record, progress, cache)
        self._tmp = tempfile.TemporaryDirectory(prefix="tailpod-probe-")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.record.engine.get('port', self.settings.port)}"

    def _path(self, name: str) -> str:
        return str(Path(self._tmp.name) / name)

    def _read(self, path: str) -> str:
        return Path(path).read_text(encoding="utf-8")

    def _write(self, path: str, text: str) -> None:
        Path(path).write_text(text, encoding="utf-8")

    def _probe(self, args: list[str], timeout: float = 3600) -> None:
        proc = subprocess.run(
            [sys.executable, str(PROBE_FILE), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode not in (0, 1):
            tail = "\n    ".join(proc.stderr.strip().splitlines()[-8:])
            raise TailpodError(f"the probe failed (exit {proc.returncode}):\n    {tail}")

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
        return self._arm_started(label)

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        """The arm's bare decode for the serve tax: bare.py with the engine's Python, at the arm's
        serve argv, after the served engine is stopped (the next restart starts it again)."""
        import os

        from tailpod.bootstrap import onpod
        from tailpod.bootstrap.engines.registry import get_adapter
        from tailpod.provision.local.lifecycle import (
            engine_python,
            local_engine_env,
            work_around_mtp_trap,
        )
        from tailpod.provision.local.provider import LocalProvider

        if arm.config.engine != "vllm":
            return {
                "status": "not_measured",
                "reason": f"no bare tool wired for {arm.config.engine}",
            }
        state = LocalProvider(self.settings.home).engine_state(self.record.run_tag)
        if state is not None and onpod.is_running(state):
            onpod.stop(state)
        # The checkpoint the served arm loads: a trapped one through its patched overlay.
        cfg, _ = work_around_mtp_trap(self.settings, arm.config, self.record.run_tag)
        python = engine_python(self.settings)
        argv_file, out = self._path(f"bare-argv-{uuid.uuid4().hex}.json"), self._path("bare.jsonl")
        self._write(argv_file, json.dumps(get_adapter("vllm").launch_plan(cfg, python).argv))
        env = {**os.environ, **local_engine_env(self.settings, arm.label)}
        args = [
            python, str(BARE_FILE), "--serve-argv-file", argv_file, "--arm", arm.label,
            "--concurrency", ",".join(map(str, plan.concurrency)), "--reps", str(plan.reps),
            "--max-tokens", str(plan.max_tokens), "--prompt-classes", ",".join(plan.prompt_classes),
            "--out", out,
        ]  # fmt: skip
        if plan.requests_per_cell:
            args += ["--requests-per-cell", str(plan.requests_per_cell)]
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=7200)
        if proc.returncode != 0:
            return {"status": "failed", "error": proc.stderr.strip().splitlines()[-8:]}
        rows = parse_jsonl(self._read(out))
        return {"status": "measured", "tool": rows[0]["tool"] if rows else None, "rows": rows}


class RemoteSweepHost(ProbeSweepHost):
    """A cloud pod over SSH: the probe is copied there and measures 127.0.0.1 on the pod.

    With `from_here`, the probe runs on this machine against the pod's tailnet endpoint instead;
    every row is then stamped off-pod / DO NOT QUOTE AGGREGATE by the probe itself.
    """

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        record: PodRecord,
        progress: Callable[[float, str], None] | None = None,
        cache: str = "cold",
        from_here: bool = False,
    ) -> None:
        from tailpod.provision.cloud_up import PodShell
        from tailpod.provision.ssh.client import SshTarget, open_ssh

        super().__init__(settings, ledger, record, progress, cache)
        self.from_here = from_here
        self.engine_stopped = False  # bare_decode stopped the served engine: restart relaunches
        self.measured_from = "off-pod" if from_here else "pod"
        self.session = open_ssh(settings, SshTarget.from_record(record.ssh), wait_s=60)
        self.shell = PodShell(self.session)
        self.workdir = f"{self.shell.state_dir}/probe"
        self.session.upload(PROBE_FILE, f"{self.workdir}/probe.py", mode=0o700)
        if PROMPTS_DIR.is_dir():
            self.session.upload(PROMPTS_DIR, f"{self.workdir}/prompts")
        self._local = LocalSweepHost(settings, ledger, record, progress, cache)

    def close(self) -> None:
        self.session.close()

    @property
    def port(self) -> int:
        return int(self.record.engine.get("port", self.settings.port))

    @property
    def base_url(self) -> str:
        if self.from_here:
            return str(self.record.endpoint)
        return f"http://127.0.0.1:{self.port}"

    def _path(self, name: str) -> str:
        return self._local._path(name) if self.from_here else f"{self.workdir}/{name}"

    def _read(self, path: str) -> str:
        return self._local._read(path) if self.from_here else self.shell.read_text(path)

    def _write(self, path: str, text: str) -> None:
        if self.from_here:
            self._local._write(path, text)
            return
        with self.session.sftp().open(path, "wb") as fh:
            fh.write(text.encode("utf-8"))

    def _probe(self, args: list[str], timeout: float = 3600) -> None:
        self.shell.heartbeat()  # a sweep is tailpod at work: keep the dead-man switch quiet
        if self.from_here:
            self._local._probe(args, timeout)
            return
        command = " ".join(shlex.quote(a) for a in ["python3", f"{self.workdir}/probe.py", *args])
        result = self.session.run(command, timeout_s=timeout)
        if result.exit_status not in (0, 1):
            tail = "\n    ".join(result.tail[-8:])
            raise TailpodError(
                f"the probe failed on the pod (exit {result.exit_status}):\n    {tail}"
            )

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        """bare.py on the pod with the pod's engine Python and its pod.env, after the served
        engine is stopped (the next restart starts it again)."""
        from tailpod.bootstrap.checkpoint import hub_overlay_patch
        from tailpod.bootstrap.engines.registry import get_adapter
        from tailpod.provision.cloud_up import pod_python

        if arm.config.engine != "vllm" or self.from_here:
            why = (
                "measured from here" if self.from_here else f"no bare tool for {arm.config.engine}"
            )
            return {"status": "not_measured", "reason": why}
        try:
            trapped = hub_overlay_patch(arm.config.model, self.settings) is not None
        except TailpodError:
            trapped = False
        if trapped:  # its overlay is built by the served start, which comes after
            return {
                "status": "not_measured",
                "reason": "a patched-overlay checkpoint: bare decode not wired through it yet",
            }
        self.shell.stop_engine()
        self.engine_stopped = True
        bare = f"{self.workdir}/bare.py"
        self.session.upload(BARE_FILE, bare, mode=0o700)
        python = pod_python(self.settings)
        argv_file, out = f"{self.workdir}/bare-argv.json", f"{self.workdir}/bare.jsonl"
        self._write(argv_file, json.dumps(get_adapter("vllm").launch_plan(arm.config, python).argv))
        args = [
            python, bare, "--serve-argv-file", argv_file, "--arm", arm.label,
            "--concurrency", ",".join(map(str, plan.concurrency)), "--reps", str(plan.reps),
            "--max-tokens", str(plan.max_tokens), "--prompt-classes", ",".join(plan.prompt_classes),
            "--out", out, "--env-file", self.shell.path("pod.env"),
        ]  # fmt: skip
        if plan.requests_per_cell:
            args += ["--requests-per-cell", str(plan.requests_per_cell)]
        self.shell.heartbeat()
        result = self.session.run(" ".join(shlex.quote(a) for a in args), timeout_s=7200)
        if result.exit_status != 0:
            return {"status": "failed", "error": result.tail[-8:]}
        rows = parse_jsonl(self._read(out))
        return {"status": "measured", "tool": rows[0]["tool"] if rows else None, "rows": rows}

    def restart(self, arm: Arm) -> ArmStart:
        from tailpod.provision.cloud_up import relaunch_cloud

        current = self.ledger.get(self.record.run_tag)
        assert current is not None
        label = arm.config.spec.label()
        started = current.extra.get("arms", {}).get(label)
        same = EngineConfig.from_json(current.engine) == arm.config and started is not None
        if self.engine_stopped or not same:
            progress = self.progress

            def say(line: str) -> None:
                if progress is not None:
                    progress(0.0, line)

            relaunch_cloud(self.settings, current, arm.config, self.ledger, say)
            self.engine_stopped = False
        return self._arm_started(label)

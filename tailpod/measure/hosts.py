"""Where a sweep runs: a thin adapter between the laptop's `run_sweep` and the pod agent.

Every measurement goes one way: `run_sweep` decides the cells, `PodAgent.probe_run` sends them
(with their rep index and cell id) to the agent's `probe run` beside the engine, which measures
127.0.0.1 and returns the rows in its envelope. `RemoteSweepHost` drives a cloud pod over ONE SSH
session (the relaunch between arms too); `LocalSweepHost` runs the same agent as a child process
for `--provider local`, so the local numbers come from the same measurer.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tailpod.agent.probes.basics import PROBE_ENGINES
from tailpod.agent_client.driver import GATE_MAX_TOKENS, ArmStart, PodAgent, SubprocessTransport
from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.plan import Arm, Cell, SweepPlan
from tailpod.measure.sweep import GateResult

BARE_FILE = Path(__file__).with_name("bare.py")


def probe_options(
    base_url: str, arm: Arm, plan: SweepPlan, run_id: str, concurrency: int
) -> dict[str, Any]:
    """`probe run`'s options for cells of one arm at one concurrency (docs/agent.md)."""
    return {
        "base_url": base_url,
        "model": arm.config.served_name,
        "run_id": run_id,
        "requests_per_cell": plan.requests_per_cell or max(4, concurrency),
        "max_tokens": plan.max_tokens,
        "engine": arm.config.engine if arm.config.engine in PROBE_ENGINES else "auto",
        **({"slo": plan.slo, "slo_percentile": plan.slo_percentile} if plan.slo else {}),
        **({"workers": plan.load_workers} if plan.load_workers != 1 else {}),
        **({"unique_schema": True} if plan.unique_schema else {}),
    }


def probe_cells(
    arm: Arm, cells: list[Cell], cache: str, plan: SweepPlan | None = None,
    trace_path: str | None = None,
) -> list[dict[str, Any]]:
    """The cells as the agent measures them: the sweep's rep index and cell id written in.
    `cache="both"` measures each cell cold, then warm (the agent marks the warm one's id `|warm`).
    An open-loop cell carries the plan's `arrival` (its concurrency is then a cap; 0 = none)."""
    caches = ["cold", "warm"] if cache == "both" else [cache]
    out = []
    for cell in cells:
        arrival = plan.arrival_for(cell, trace_path) if plan is not None else None
        for one in caches:
            row: dict[str, Any] = {
                "arm": arm.label, "rep": cell.rep, "prompt_class": cell.prompt_class,
                "cache": one, "cell": cell.cell_id,
                "concurrency": (cell.concurrency or None) if arrival else cell.concurrency,
            }
            if arrival:
                row["arrival"] = arrival
            if cell.soak and plan is not None and plan.soak_s is not None:
                row["soak_s"] = plan.soak_s
            out.append(row)
    return out


def parse_jsonl(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            rows.append(json.loads(line))
    return rows


class AgentSweepHost:
    """The sweep's side of one pod: measurements go to `measurer` (the pod agent beside the
    engine, or this machine's for --from-here); subclasses say how the engine is restarted."""

    measured_from = "pod"

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        record: PodRecord,
        measurer: PodAgent,
        progress: Callable[[float, str], None] | None = None,
        cache: str = "cold",
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.record = record
        self.measurer = measurer
        self.progress = progress
        self.cache = cache

    @property
    def port(self) -> int:
        return int(self.record.engine.get("port", self.settings.port))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def keep_alive(self) -> None:
        """Before each measurement: a cloud pod's dead-man switch hears tailpod is at work."""

    def _recorded_start(self, label: str) -> ArmStart | None:
        """The start of the arm `up` left serving (another process made that call, so the
        ledger is where its facts are); None when the ledger holds no start of this arm."""
        current = self.ledger.get(self.record.run_tag)
        if current is None:
            return None
        self.record = current
        started = current.extra.arms.get(label)
        if started is None:
            return None
        return ArmStart(
            startup=started["startup"],
            argv=started["argv"],
            startup_s=started.get("startup_s") or 0.0,
            checkpoints=started.get("checkpoints") or {},
        )

    # The session a relaunch goes through (a pod reached over SSH keeps one for the sweep);
    # None: the pod kind needs none (its engine is a child of this machine).
    pod_session: PodAgent | None = None
    engine_stopped = False  # bare_decode stopped the served engine: the next restart relaunches

    def restart(self, arm: Arm) -> ArmStart:
        """Serve `arm`: the engine `up` started is reused when it already serves this arm (its
        start, recorded in the ledger by the process that made it, is returned), else the pod
        kind relaunches the engine (pods/kinds.py), through this host's session if it has one."""
        from tailpod.pods.arm_switch import switch_arm
        from tailpod.pods.kinds import kind_for

        kind = kind_for(self.record.provider)
        current = self.ledger.get(self.record.run_tag)
        assert current is not None
        if (not self.engine_stopped and not current.extra.no_engine
                and EngineConfig.from_json(current.engine) == arm.config
                and kind.engine_healthy(self.settings, current) is not False):
            # (a kind that cannot tell from here, a pod's 127.0.0.1, says None: reused)
            recorded = self._recorded_start(arm.config.spec.label())
            if recorded is not None:
                return recorded
        self.keep_alive()
        started = switch_arm(self.settings, current, arm.config, self.ledger,
                             self.progress or (lambda _f, _line: None), self.pod_session)
        self.engine_stopped = False
        return started

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return {"status": "not_measured", "reason": "this host has no bare decode"}

    def run_cells(
        self, arm: Arm, cells: list[Cell], plan: SweepPlan, run_id: str
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        trace_path = None
        if plan.trace and any(cell.trace for cell in cells):
            # the trace travels beside the agent once (content-addressed name), then by path
            trace_path = self.measurer.transport.ensure_file(
                plan.trace["name"], Path(plan.trace["local_path"]).read_bytes()
            )
        for concurrency in sorted({cell.concurrency for cell in cells}):  # one call per level
            same = [cell for cell in cells if cell.concurrency == concurrency]
            self.keep_alive()
            rows += self.measurer.probe_run(
                probe_options(self.base_url, arm, plan, run_id, concurrency),
                probe_cells(arm, same, self.cache, plan, trace_path),
            )
        return rows

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        self.keep_alive()
        result = self.measurer.gate({
            "candidate": self.base_url, "save": True,
            "model": arm.config.served_name, "max_tokens": GATE_MAX_TOKENS,
        })  # fmt: skip
        reference: dict[str, Any] = result["reference"]
        return reference

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        self.keep_alive()
        result = self.measurer.gate({
            "candidate": self.base_url, "reference": reference,
            "model": arm.config.served_name, "max_tokens": GATE_MAX_TOKENS,
        })  # fmt: skip
        return GateResult(
            status=result["status"],
            method=result.get("method"),
            prompts=int(result.get("prompts", 0)),
            first_mismatch=result.get("first_mismatch"),
            detail=result.get("token_source"),
        )

    def close(self) -> None:
        self.measurer.close()


def local_agent(settings: Settings) -> PodAgent:
    """The agent as a child of this machine (`--provider local`, and `--from-here`)."""
    return PodAgent(SubprocessTransport(settings.home / "agent"))


class LocalSweepHost(AgentSweepHost):
    """The local provider: the engine is a child of this machine; so is the agent."""

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        record: PodRecord,
        progress: Callable[[float, str], None] | None = None,
        cache: str = "cold",
    ) -> None:
        super().__init__(settings, ledger, record, local_agent(settings), progress, cache)
        self._tmp = tempfile.TemporaryDirectory(prefix="tailpod-bare-")

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        """The arm's bare decode for the serve tax: bare.py with the engine's Python, at the arm's
        serve argv, after the served engine is stopped (the next restart starts it again)."""
        from tailpod.agent.bootstrap import engine
        from tailpod.engines.adapters import get_adapter
        from tailpod.pods.local import (
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
        if state is not None and engine.is_running(state):
            engine.stop(state)
        self.engine_stopped = True
        # The checkpoint the served arm loads: a trapped one through its patched overlay.
        cfg, _ = work_around_mtp_trap(self.settings, arm.config, self.record.run_tag)
        python = engine_python(self.settings)
        work = Path(self._tmp.name)
        argv_file, out = work / f"bare-argv-{uuid.uuid4().hex}.json", work / "bare.jsonl"
        argv_file.write_text(json.dumps(get_adapter("vllm").launch_plan(cfg, python).argv))
        env = {**os.environ, **local_engine_env(self.settings, arm.label)}
        args = [python, str(BARE_FILE), "--agent", self.measurer.ensure_agent(),
                "--serve-argv-file", str(argv_file), "--out", str(out),
                *bare_args(arm, plan)]  # fmt: skip
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=7200)
        if proc.returncode != 0:
            return {"status": "failed", "error": proc.stderr.strip().splitlines()[-8:]}
        return bare_measured(out.read_text(encoding="utf-8"))


def bare_measured(rows_text: str) -> dict[str, Any]:
    """bare_decode's answer from the rows bare.py wrote: the tool it ran and the rows."""
    rows = parse_jsonl(rows_text)
    return {"status": "measured", "tool": rows[0]["tool"] if rows else None, "rows": rows}


def bare_args(arm: Arm, plan: SweepPlan) -> list[str]:
    """bare.py's arguments for this arm of the plan (the probe's prompts, same cells)."""
    args = [
        "--arm", arm.label,
        "--concurrency", ",".join(map(str, plan.concurrency)), "--reps", str(plan.reps),
        "--max-tokens", str(plan.max_tokens), "--prompt-classes", ",".join(plan.prompt_classes),
    ]  # fmt: skip
    if plan.requests_per_cell:
        args += ["--requests-per-cell", str(plan.requests_per_cell)]
    return args


class RemoteSweepHost(AgentSweepHost):
    """A cloud pod through its agent over ONE SSH session, kept for the whole sweep: probes,
    heartbeats and the relaunch between arms all go through it, and the agent is uploaded only
    if the pod does not hold it already.

    With `from_here`, the measurements run on this machine (its own agent) against the pod's
    tailnet endpoint instead; every row is then stamped off-pod / DO NOT QUOTE AGGREGATE.
    """

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        record: PodRecord,
        progress: Callable[[float, str], None] | None = None,
        cache: str = "cold",
        from_here: bool = False,
        pod: PodAgent | None = None,
    ) -> None:

        if pod is None:
            pod = pod_session_for(settings, record, progress)
            if pod is None:
                raise TailpodError(f"{record.run_tag} ({record.provider}) is not reached over SSH")
        self.pod = pod
        self.pod_session = self.pod  # the relaunch between arms goes over this one session too
        measurer = local_agent(settings) if from_here else self.pod
        super().__init__(settings, ledger, record, measurer, progress, cache)
        self.from_here = from_here
        self.measured_from = "off-pod" if from_here else "pod"

    @property
    def base_url(self) -> str:
        if self.from_here:
            return str(self.record.endpoint)
        return super().base_url

    def keep_alive(self) -> None:
        self.pod.deadman_heartbeat()  # a sweep is tailpod at work: keep the dead-man switch quiet

    def close(self) -> None:
        self.pod.close()
        if self.measurer is not self.pod:
            self.measurer.close()

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        """bare.py on the pod with the pod's engine Python and its pod.env, after the served
        engine is stopped (the next restart starts it again). bare.py imports vLLM, so it is
        not part of the stdlib agent (docs/agent.md): it is copied beside it, once per pod."""
        from tailpod.engines.adapters import get_adapter
        from tailpod.engines.checkpoint import hub_overlay_patch
        from tailpod.pods.cloud import pod_python

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
        self.pod.engine_stop()
        self.engine_stopped = True
        transport = self.pod.transport
        bare = transport.ensure_file(
            f"bare-{_sha16(BARE_FILE.read_bytes())}.py", BARE_FILE.read_bytes()
        )
        python = pod_python(self.settings)
        serve_argv = json.dumps(get_adapter("vllm").launch_plan(arm.config, python).argv)
        argv_file = transport.ensure_file(
            f"bare-argv-{_sha16(serve_argv.encode())}.json", serve_argv.encode()
        )
        out = f"{self.pod.state_dir}/bare-{uuid.uuid4().hex}.jsonl"
        args = [python, bare, "--agent", self.pod.ensure_agent(),
                "--serve-argv-file", argv_file, "--out", out,
                "--env-file", f"{self.pod.state_dir}/pod.env", *bare_args(arm, plan)]  # fmt: skip
        self.keep_alive()
        # The engine logs to stdout too: only the rows file reaches stdout, bare.py's own
        # output goes to stderr (its last lines are kept for a failure).
        command = " ".join(shlex.quote(a) for a in args) + f" 1>&2 && cat {shlex.quote(out)}"
        done = transport.execute(["sh", "-c", command], b"", None, 7200)
        if done.exit_status != 0:
            return {"status": "failed", "error": done.stderr_tail[-8:]}
        return bare_measured(done.stdout)


def sweep_host(
    settings: Settings,
    ledger: Ledger,
    record: PodRecord,
    progress: Callable[[float, str], None] | None = None,
    cache: str = "cold",
    from_here: bool = False,
) -> AgentSweepHost:
    """Where the sweep for `record` runs: beside its engine. The pod's kind is asked for the
    session it keeps to the pod (pods/kinds.py `pod_session`): through it when it hands one over,
    else (an engine that is a child of this machine) with the agent as a child process here."""
    pod = pod_session_for(settings, record, progress)
    if pod is None:
        return LocalSweepHost(settings, ledger, record, progress, cache)
    return RemoteSweepHost(settings, ledger, record, progress, cache, from_here=from_here,
                           pod=pod)


def pod_session_for(settings: Settings, record: PodRecord,
                    progress: Callable[[float, str], None] | None) -> PodAgent | None:
    """The session the pod's kind keeps to it (pods/kinds.py pod_session, waiting up to 60 s),
    its waiting said through `progress`; None when the kind's engine is a child of this machine."""
    from tailpod.pods.kinds import kind_for

    say = (lambda line: progress(0.0, line)) if progress is not None else None
    return kind_for(record.provider).pod_session(settings, record, 60, say)


def _sha16(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()[:16]

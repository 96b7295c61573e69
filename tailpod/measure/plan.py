"""The sweep plan: which engine configurations (arms) to measure, in which order, and what is done.

Runs on the laptop side (it never travels to a pod; only the pod agent does). The order is the
protocol: one engine restart per distinct configuration, reps interleaved across concurrency levels;
or, with `interleave_arms`, every arm inside every rep with the arm order rotated between reps, so
slow drift (thermals, a noisy neighbour) lands on every arm alike.
"""

from __future__ import annotations

import hashlib
import json
import math
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tailpod.agent_client.driver import PROBE_RUN_TIMEOUT_S
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.errors import ConfigError

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
ARRIVAL_PROCESSES = ("poisson", "gamma", "constant")
# A cell's time limit: one cell is one `probe run` call of the pod agent, stopped after this.
CELL_LIMIT_S = PROBE_RUN_TIMEOUT_S
# a trace is read whole, here and again by the agent on the pod: past this it is refused
TRACE_MAX_BYTES = 64 * 1024 * 1024
# the agent builds each trace prompt as text on the pod: one past 10M tokens (beyond the longest
# context an open checkpoint is published with) is refused here even when the pod's context
# length is not known (check_trace_context needs `up --context-length`)
TRACE_MAX_PROMPT_TOKENS = 10_000_000
# a trace is one cell, and the agent writes and holds a row per request: past this many it is
# refused (the Mooncake conversation trace holds 12,031 requests in an hour)
TRACE_MAX_REQUESTS = 100_000


def rate_text(rate: float) -> str:
    """A request rate as cell ids and tables write it: 1, 2.5, inf."""
    return "inf" if math.isinf(rate) else f"{rate:g}"


@dataclass(frozen=True)
class Arm:
    label: str
    config: EngineConfig

    @property
    def spec_k(self) -> int:
        return self.config.spec.k

    @property
    def is_deployment(self) -> bool:
        """A deployment measured as an arm (`benchmark --deploy`, measure/deploy.py): compared,
        never a K candidate of the best-K extension."""
        return self.label.startswith(DEPLOY_PREFIX)


DEPLOY_PREFIX = "deploy-"  # the label of a deployment's arm (measure/deploy.py deploy_arm)


@dataclass(frozen=True)
class Cell:
    arm: str
    concurrency: int
    rep: int
    prompt_class: str
    # Open loop: requests per second (inf = all at once); concurrency is then the cap on
    # requests in flight, 0 for none. None = the closed loop of `concurrency` workers.
    rate: float | None = None
    # Trace replay (`--trace`): the cell replays the plan's trace at its own times.
    trace: bool = False
    # The arm's soak cell (`--soak`): a closed loop for the plan's soak_s, not a request count.
    soak: bool = False

    @property
    def cell_id(self) -> str:
        if self.soak:
            return f"{self.arm}|soak|c{self.concurrency}|r{self.rep}|{self.prompt_class}"
        if self.trace:
            return f"{self.arm}|trace|r{self.rep}|{self.prompt_class}"
        if self.rate is not None:
            cap = f"|c{self.concurrency}" if self.concurrency else ""
            return f"{self.arm}|rate{rate_text(self.rate)}{cap}|r{self.rep}|{self.prompt_class}"
        return f"{self.arm}|c{self.concurrency}|r{self.rep}|{self.prompt_class}"


@dataclass(frozen=True)
class Restart:
    arm: str


Step = Cell | Restart


@dataclass
class SweepPlan:
    arms: list[Arm]
    concurrency: list[int] = field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    prompt_classes: list[str] = field(default_factory=lambda: ["prose"])
    reps: int = 5
    max_tokens: int = 256
    requests_per_cell: int | None = None  # None: as many as the concurrency, at least 4
    interleave_arms: bool = False
    extend_k: bool = True  # run K one step past the best, so the optimum is shown to stop
    max_k: int = 8
    # Before each arm's served start, measure the engine's offline decode at the same settings
    # (probes/bare.py): one more engine start per arm.
    serve_tax: bool = False
    # Open loop (`--request-rate`): one cell per rate instead of per concurrency level, each a
    # schedule drawn from `arrival_seed + rep` (docs/agent.md, "Open loop").
    request_rates: list[float] = field(default_factory=list)
    arrival: str = "poisson"
    burstiness: float = 1.0
    arrival_seed: int = 0
    slo: dict[str, float] | None = None
    slo_percentile: float = 90.0
    # Trace replay (`--trace`): {"name": its file name on the pod (content-addressed),
    # "format": "tailpod" | "mooncake" | "session" | "aiperf-multi-turn", "speed": float,
    # "requests": int (the trace's count; a session trace's turns, with "sessions")};
    # one cell per arm, rep and class, each the whole trace at its own arrival times.
    trace: dict[str, Any] | None = None
    # The rate ladder stops paying once the server cannot keep up: an arm's finite rates above
    # its lowest saturated one (sweep.py saturated_rate: a queue that grows) are skipped. Not during --find-max-rate,
    # whose bisection places its own rates.
    saturation_stop: bool = True
    # `--load-workers`: processes generating each cell's load on the pod (the agent's
    # options.workers, tailpod/agent/probes/procs.py); 1 = the probe's one process.
    load_workers: int = 1
    # `--find-max-rate`: the rates probed so far per arm (the search adds to them between
    # sweeps); an arm not named here measures `request_rates`.
    arm_rates: dict[str, list[float]] | None = None
    # `--soak MINUTES`: after its sweep cells, each arm runs one soak cell of this many seconds
    # (soak_cell); None = no soak.
    soak_s: float | None = None
    # `--unique-schema`: structured and tools requests each carry a schema text never sent
    # before, and each such cell times a new schema's first request (the agent's unique_schema)
    unique_schema: bool = False

    def soak_cell(self, arm: str) -> Cell:
        """The arm's soak cell: a closed loop at the plan's lowest concurrency (where a
        speculative arm is meant to pay, and one slow request cannot hide behind others) over
        its first prompt class, for soak_s (docs/results.md, "Soak: acceptance over time")."""
        return Cell(arm, min(self.concurrency), 0, self.prompt_classes[0], soak=True)

    def arrival_for(self, cell: Cell, trace_path: str | None = None) -> dict[str, Any] | None:
        """The agent's `arrival` for an open-loop cell; None for a closed-loop one. A trace
        cell needs the trace's path where the agent runs (`trace_path`)."""
        if cell.trace:
            assert self.trace is not None and trace_path is not None
            return {"process": "trace", "trace": {"path": trace_path,
                                                  "format": self.trace["format"],
                                                  "speed": self.trace["speed"]}}
        if cell.rate is None:
            return None
        return {"process": self.arrival, "rate": "inf" if math.isinf(cell.rate) else cell.rate,
                "burstiness": self.burstiness, "seed": self.arrival_seed + cell.rep,
                "requests": self.open_loop_requests(cell.rate)}

    def open_loop_requests(self, rate: float) -> int:
        """Requests per open-loop cell: as asked, else about 10 s of the rate (8 to 200)."""
        if self.requests_per_cell:
            return self.requests_per_cell
        return 16 if math.isinf(rate) else max(8, min(200, round(rate * 10)))

    def arm(self, label: str) -> Arm:
        for arm in self.arms:
            if arm.label == label:
                return arm
        raise KeyError(label)

    def to_json(self) -> dict[str, Any]:
        return {
            "arms": [a.label for a in self.arms],
            "arm_configs": {a.label: a.config.to_json() for a in self.arms},
            "concurrency": self.concurrency,
            "prompt_classes": self.prompt_classes,
            "reps": self.reps,
            "max_tokens": self.max_tokens,
            "requests_per_cell": self.requests_per_cell,
            "interleave_arms": self.interleave_arms,
            "extend_k": self.extend_k,
            "max_k": self.max_k,
            "serve_tax": self.serve_tax,
            **({"request_rates": [rate_text(r) for r in self.request_rates],
                "arrival": self.arrival, "burstiness": self.burstiness,
                "arrival_seed": self.arrival_seed} if self.request_rates else {}),
            **({"slo": self.slo, "slo_percentile": self.slo_percentile} if self.slo else {}),
            **({"trace": dict(self.trace)} if self.trace else {}),
            **({"load_workers": self.load_workers} if self.load_workers != 1 else {}),
            **({"saturation_stop": False} if self.request_rates and not self.saturation_stop
               else {}),
            **({"arm_rates": {a: [rate_text(r) for r in rs] for a, rs in self.arm_rates.items()}}
               if self.arm_rates else {}),
            **({"soak_s": self.soak_s} if self.soak_s is not None else {}),
            **({"unique_schema": True} if self.unique_schema else {}),
        }


def _trace_bytes(path: Path) -> bytes:
    """The trace file's bytes, read only from a regular file no larger than TRACE_MAX_BYTES (a
    FIFO would block the read forever, a link to /dev/zero would fill memory)."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"--trace {path}: not a regular file")
        if info.st_size > TRACE_MAX_BYTES:
            raise ConfigError(f"--trace {path}: {info.st_size:,} bytes, past the trace size "
                              f"limit of {TRACE_MAX_BYTES:,} bytes", hint="cut the trace")
        with path.open("rb") as fh:
            data = fh.read(TRACE_MAX_BYTES + 1)  # the file may have grown since the stat
    except OSError as exc:
        raise ConfigError(f"--trace {path}: {exc.strerror or exc}") from None
    if len(data) > TRACE_MAX_BYTES:
        raise ConfigError(f"--trace {path}: past the trace size limit of {TRACE_MAX_BYTES:,} "
                          "bytes", hint="cut the trace")
    return data


def trace_spec(path: Path, fmt: str, speed: float) -> dict[str, Any]:
    """`--trace FILE`, checked here with the agent's own reader (so a file the agent would refuse
    is refused before any pod wait): the plan's `trace` entry. Bad file: ConfigError (exit 2)."""
    # lazy: kept off what `tailpod --help` imports (docs/architecture.md)
    from tailpod.agent.probes.arrival import SESSION_FORMATS, TRACE_FORMATS, parse_trace_lines
    from tailpod.agent.probes.basics import ProbeError

    if fmt not in TRACE_FORMATS:
        raise ConfigError(f"--trace-format must be one of {', '.join(TRACE_FORMATS)}")
    if not math.isfinite(speed) or speed <= 0:
        raise ConfigError("--trace-speed must be > 0 (2 = twice as fast as logged)")
    data = _trace_bytes(path)
    if fmt in SESSION_FORMATS:
        return _session_trace_spec(path, data, fmt, speed)
    try:
        entries = parse_trace_lines(data.decode("utf-8").splitlines(), fmt, str(path))
    except UnicodeDecodeError:
        raise ConfigError(f"--trace {path}: not UTF-8 text") from None
    except ProbeError as exc:
        raise ConfigError(f"--trace {exc}", hint=_format_hint(data, fmt)) from None
    digest = hashlib.sha256(data).hexdigest()[:16]
    times = sorted(e[0] for e in entries)
    span = (times[-1] - times[0]) / speed
    gap = max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0) / speed
    if not span <= CELL_LIMIT_S:  # inf and nan too (timestamps of ±1e308)
        raise ConfigError(f"--trace {path}: its requests span {span:.3g} s (largest gap "
                          f"{gap:.3g} s) at --trace-speed {speed:g}, past a cell's limit of "
                          f"{CELL_LIMIT_S:.0f} s", hint="cut the trace, or raise --trace-speed")
    _countable(path, len(entries))
    return {"name": f"trace-{digest}.jsonl", "local_path": str(path), "format": fmt,
            "speed": float(speed), "requests": len(entries), "span_s": span,
            "max_prompt_tokens": _servable(path, max(e[1] for e in entries))}


def _countable(path: Path, requests: int) -> None:
    """A trace of more than TRACE_MAX_REQUESTS requests (turns, in a session trace): exit 2."""
    if requests > TRACE_MAX_REQUESTS:
        raise ConfigError(f"--trace {path}: {requests:,} requests, past a trace's limit of "
                          f"{TRACE_MAX_REQUESTS:,} (one cell)", hint="cut the trace")


def _servable(path: Path, tokens: int) -> int:
    """`tokens`, the trace's longest prompt, when an engine could take it (exit 2 otherwise)."""
    if tokens > TRACE_MAX_PROMPT_TOKENS:
        raise ConfigError(f"--trace {path}: a prompt of {tokens:,} tokens, past the longest "
                          f"context any engine serves ({TRACE_MAX_PROMPT_TOKENS:,} tokens)",
                          hint="cut the trace's prompt lengths")
    return tokens


def _format_hint(data: bytes, fmt: str) -> str:
    """The hint for a request log the reader refused: where its first line holds `turns`, it is
    a session trace, and the hint names the session format its turns are written in (AIPerf's
    turns carry `text`; tailpod's `user` or `input_tokens`: docs/probe.md, "Sessions")."""
    plain = f"--trace-format (this read it as {fmt})"
    first = next((line for line in data.decode("utf-8", "replace").splitlines() if line.strip()),
                 "")
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):  # the line the reader refused may be nested too deep
        return plain
    turns = obj.get("turns") if isinstance(obj, dict) else None
    if not isinstance(turns, list):
        return plain
    aiperf = any(isinstance(t, dict) and "text" in t for t in turns)
    return (f"--trace-format {'aiperf-multi-turn' if aiperf else 'session'} (each line holds "
            f"turns: a session trace; this read it as {fmt}, one request a line)")


def _session_trace_spec(path: Path, data: bytes, fmt: str, speed: float) -> dict[str, Any]:
    """`--trace FILE --trace-format session|aiperf-multi-turn`, read with the agent's own reader:
    its sessions and turns, the least time the replay takes (starts and waits; the answers come
    on top) and an estimate of its longest context. Bad file: ConfigError (exit 2)."""
    # lazy: kept off what `tailpod --help` imports (docs/architecture.md)
    from tailpod.agent.probes.basics import ProbeError
    from tailpod.agent.probes.session_replay import (
        longest_context_tokens,
        parse_session_lines,
        session_span_s,
    )

    try:
        sessions = parse_session_lines(data.decode("utf-8").splitlines(), fmt, str(path))
    except UnicodeDecodeError:
        raise ConfigError(f"--trace {path}: not UTF-8 text") from None
    except ProbeError as exc:
        raise ConfigError(f"--trace {exc}", hint=f"--trace-format (this read it as {fmt})") \
            from None
    span = session_span_s(sessions, speed)
    if not span <= CELL_LIMIT_S:
        raise ConfigError(f"--trace {path}: its session starts and waits alone take {span:.3g} s "
                          f"at --trace-speed {speed:g}, past a cell's limit of "
                          f"{CELL_LIMIT_S:.0f} s", hint="cut the trace, or raise --trace-speed")
    _countable(path, sum(len(s.turns) for s in sessions))
    return {"name": f"trace-{hashlib.sha256(data).hexdigest()[:16]}.jsonl",
            "local_path": str(path), "format": fmt, "speed": float(speed),
            "requests": sum(len(s.turns) for s in sessions), "sessions": len(sessions),
            "span_s": span,
            "max_prompt_tokens": _servable(path, longest_context_tokens(sessions, 0))}


def check_trace_context(trace: dict[str, Any] | None, context_length: int | None) -> None:
    """A trace prompt the pod's engine cannot take (longer than its context length, `up
    --context-length`) is refused before the sweep waits on the pod: every cell would fail."""
    if not trace or not context_length:
        return
    longest = int(trace.get("max_prompt_tokens") or 0)
    if longest > context_length:
        raise ConfigError(f"--trace {trace['local_path']}: a prompt of {longest} tokens is longer "
                          f"than the pod's context length ({context_length}, up "
                          f"--context-length)")


def check_open_loop_spans(plan: SweepPlan, limit_s: float = CELL_LIMIT_S) -> None:
    """Every open-loop cell's schedule, drawn exactly as the agent draws it (its seed, its
    requests), must send its last request within a cell's time limit; a rate of 1e-9 req/s
    would otherwise wait decades while the pod bills. The computed span is named."""
    # lazy: kept off what `tailpod --help` imports (docs/architecture.md)
    from tailpod.agent.probes.arrival import parse_arrival
    from tailpod.agent.probes.arrival import schedule as arrival_offsets

    for rate in plan.request_rates:
        if math.isinf(rate):
            continue
        for rep in range(plan.reps):
            cell = Cell(arm="", concurrency=0, rep=rep, prompt_class="", rate=rate)
            offsets = arrival_offsets(parse_arrival(plan.arrival_for(cell)))
            if not offsets[-1] <= limit_s:
                raise ConfigError(
                    f"--request-rate {rate:g}: a cell's {len(offsets)} requests are scheduled "
                    f"over {offsets[-1]:.3g} s (rep {rep}), past a cell's limit of "
                    f"{limit_s:.0f} s", hint="raise the rate or lower --requests-per-cell")


def max_rate_step(lo: float, hi: float, passed: dict[float, bool],
                  tol: float) -> tuple[float | None, dict[str, Any] | None]:
    """One step of the bisection for the highest rate that meets the SLO, between `lo` and `hi`:
    (the next rate to probe, None) or (None, the answer). `passed` maps each probed rate to
    whether it met the SLO (median attainment over its reps >= the percentile). The bracket is
    the highest passing rate below the lowest failing one; it is halved (arithmetic midpoint)
    until hi/lo - 1 <= tol. The answer: {"max_rate": the bracket's lower end or None,
    "bracket": [low, high] or None, "status": "found" | "below_low" | "at_least_high"}."""
    for bound in (lo, hi):
        if bound not in passed:
            return bound, None
    if not passed[lo]:
        return None, {"max_rate": None, "bracket": [None, lo], "status": "below_low"}
    failing = [r for r, ok in passed.items() if not ok]
    if not failing:
        return None, {"max_rate": hi, "bracket": [hi, None], "status": "at_least_high"}
    top = min(failing)
    low = max(r for r, ok in passed.items() if ok and r < top)
    if top / low - 1.0 <= tol:
        return None, {"max_rate": low, "bracket": [low, top], "status": "found"}
    return (low + top) / 2.0, None


def spec_arms(base: EngineConfig, ks: list[int], method: str, draft_model: str | None) -> list[Arm]:
    """One arm per SPEC_K value; K = 0 is plain decode and always comes first."""
    arms = []
    for k in sorted(set(ks)):
        spec = SpecArm(
            k=k, method=None if k == 0 else method, draft_model=draft_model if k else None
        )
        cfg = replace(base, spec=spec)
        arms.append(Arm(label=spec.label(), config=cfg))
    return arms


def schedule(plan: SweepPlan) -> list[Step]:
    """The ordered steps of a sweep (restarts and cells)."""
    steps: list[Step] = []
    if plan.interleave_arms:
        for rep in range(plan.reps):
            shift = rep % len(plan.arms)
            for arm in plan.arms[shift:] + plan.arms[:shift]:
                steps.append(Restart(arm.label))
                steps += _rep_cells(plan, arm.label, rep)
                if plan.soak_s is not None and rep == plan.reps - 1:
                    steps.append(plan.soak_cell(arm.label))
        return steps
    for arm in plan.arms:
        steps.append(Restart(arm.label))
        for rep in range(plan.reps):
            steps += _rep_cells(plan, arm.label, rep)
        if plan.soak_s is not None:
            steps.append(plan.soak_cell(arm.label))
    return steps


def _rep_cells(plan: SweepPlan, arm: str, rep: int) -> list[Step]:
    # Within one rep the concurrency order alternates direction, so no level always runs first
    # after a restart (when caches are coldest).
    if plan.trace:
        return [Cell(arm, 0, rep, cls, trace=True) for cls in plan.prompt_classes]
    if plan.request_rates:
        mine = (plan.arm_rates or {}).get(arm, plan.request_rates)
        rates = mine if rep % 2 == 0 else list(reversed(mine))
        return [Cell(arm, 0, rep, cls, rate) for rate in rates for cls in plan.prompt_classes]
    levels = plan.concurrency if rep % 2 == 0 else list(reversed(plan.concurrency))
    return [Cell(arm, c, rep, cls) for c in levels for cls in plan.prompt_classes]


def pending(plan: SweepPlan, finished: set[str]) -> list[Step]:
    """The schedule minus finished cells, and minus restarts that no longer precede any cell."""
    steps = [s for s in schedule(plan) if not (isinstance(s, Cell) and s.cell_id in finished)]
    kept: list[Step] = []
    for i, step in enumerate(steps):
        if isinstance(step, Restart):
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            if not isinstance(nxt, Cell):
                continue
        kept.append(step)
    return kept


def finished_cells(rows_path: Path) -> set[str]:
    """Cells whose summary row was written: the unit a resumed sweep skips."""
    done: set[str] = set()
    if not rows_path.exists():
        return done
    for line in rows_path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash: that cell is simply run again
        if row.get("kind") == "cell" and row.get("cell"):
            done.add(row["cell"])
    return done


def best_k_needs_extension(
    throughput_by_k: dict[int, float], max_k: int, measured_ks: set[int] | None = None
) -> int | None:
    """The next K to measure if the best K is the largest measured; None once it is shown to stop.

    `throughput_by_k` maps K (0 = plain) to a single-stream figure (median output tok/s at the
    lowest concurrency) for the arms whose numbers count. `measured_ks` are all K the sweep ran, void arms
    included: a void K above the best one stops the extension too (it cannot be the optimum).
    Plain is a baseline, not a candidate: a sweep whose only K is 0 needs no extension.
    """
    spec = {k: v for k, v in throughput_by_k.items() if k > 0}
    if not spec:
        return None
    best = max(spec, key=lambda k: (spec[k], -k))
    largest = max({k for k in (measured_ks or set()) if k > 0} | set(spec))
    if best < largest or largest >= max_k:
        return None
    return largest + 1

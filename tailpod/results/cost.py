"""Money: pod vs serverless on a real request log, and buy vs rent for an owned box.

Request log (JSON Lines, one request per line; docs/results.md "Request log"):
  {"t_start": <epoch s>, "t_end": <epoch s>, "completion_tokens": <int>, "prompt_tokens": <int>}
`e2e_s` or `duration_s` may stand in for `t_end`; `ts`/`timestamp` for `t_start`. Lines whose
`kind` is set and is not "request" are skipped, so a run's rows.jsonl is itself a valid log.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailpod.agent.probes.metrics import percentile
from tailpod.errors import ConfigError, TailpodError
from tailpod.results.stats import usd_per_mtok

HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class LoggedRequest:
    t_start: float
    t_end: float
    completion_tokens: int | None = None
    prompt_tokens: int | None = None

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start


def _first(obj: dict[str, Any], *keys: str) -> Any:
    return next((obj[k] for k in keys if obj.get(k) is not None), None)


def parse_request_log(lines: Iterable[str], source: str = "request log") -> list[LoggedRequest]:
    out = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise TailpodError(f"{source}:{lineno}: not valid JSON") from None
        if not isinstance(obj, dict) or obj.get("kind", "request") != "request":
            continue
        start = _first(obj, "t_start", "ts", "timestamp")
        if start is None:
            raise TailpodError(f"{source}:{lineno}: no t_start")
        end = obj.get("t_end")
        if end is None:
            dur = _first(obj, "e2e_s", "duration_s")
            if dur is None:
                continue  # a request that never finished has no busy interval to count
            end = float(start) + float(dur)
        if float(end) < float(start):
            raise TailpodError(f"{source}:{lineno}: t_end before t_start")
        toks = obj.get("completion_tokens")
        ptoks = obj.get("prompt_tokens")
        out.append(
            LoggedRequest(
                float(start),
                float(end),
                int(toks) if toks is not None else None,
                int(ptoks) if ptoks is not None else None,
            )
        )
    out.sort(key=lambda r: r.t_start)
    return out


def load_request_log(path: str | os.PathLike[str]) -> list[LoggedRequest]:
    path = Path(path)
    if path.is_dir():
        path = path / "rows.jsonl"
    if not path.is_file():
        raise TailpodError(f"request log {path} not found")
    with path.open() as fh:
        reqs = parse_request_log(fh, str(path))
    if not reqs:
        raise TailpodError(f"{path}: no finished requests in the log")
    return reqs


def recorded_pod_price(log: Path) -> tuple[float | None, str]:
    """For `cost --log RUN` without --pod-usd-hr: the $/hr the run recorded for its pod (run.json
    `pod.price_per_hr`) and where it came from; (None, why not) for a plain request log or a run
    that recorded no price."""
    from tailpod.results.io import RUN_FILE, load_run

    if not (Path(log) / RUN_FILE).is_file():
        return None, f"{log} is a request log, not a run directory"
    meta = load_run(log).meta
    price = meta.pod.price_per_hr
    if price is None:
        return None, f"run {meta.run_id} records no pod price"
    return price, f"{RUN_FILE} of {meta.run_id}"


def busy_intervals(reqs: Sequence[LoggedRequest]) -> list[tuple[float, float]]:
    """Union of the requests' [start, end] intervals: when at least one request was in flight."""
    merged: list[list[float]] = []
    for r in sorted(reqs, key=lambda r: r.t_start):
        if merged and r.t_start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], r.t_end)
        else:
            merged.append([r.t_start, r.t_end])
    return [(a, b) for a, b in merged]


def _stats(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "min": None, "p50": None, "mean": None, "p90": None, "max": None}
    vals = sorted(values)
    p90 = percentile(vals, 90)
    return {
        "n": len(vals),
        "min": vals[0],
        "p50": statistics.median(vals),
        "mean": statistics.fmean(vals),
        "p90": p90,
        "max": vals[-1],
    }


def duty_cycle(reqs: Sequence[LoggedRequest]) -> dict[str, Any]:
    """Span, busy time, duty cycle and the idle gaps between busy periods."""
    if not reqs:
        raise TailpodError("empty request log")
    busy = busy_intervals(reqs)
    span = busy[-1][1] - busy[0][0]
    busy_s = sum(b - a for a, b in busy)
    gaps = [b[0] - a[1] for a, b in zip(busy, busy[1:], strict=False)]
    tokens = [r.completion_tokens for r in reqs if r.completion_tokens is not None]
    out_tokens = sum(tokens) if tokens else None
    return {
        "requests": len(reqs),
        "span_s": span,
        "busy_s": busy_s,
        "duty": busy_s / span if span > 0 else 1.0,
        "gaps": gaps,
        "gap_stats": _stats(gaps),
        "output_tokens": out_tokens,
        "mean_in_flight": sum(r.duration_s for r in reqs) / busy_s if busy_s > 0 else None,
        # the concurrency the log really ran at: request-seconds over the whole span
        "mean_in_flight_wall": sum(r.duration_s for r in reqs) / span if span > 0 else None,
        "tok_s_wall": out_tokens / span if out_tokens and span > 0 else None,
        "tok_s_while_busy": out_tokens / busy_s if out_tokens and busy_s > 0 else None,
    }


def serverless_billing(
    busy_s: float, gaps: Sequence[float], cold_start_s: float, idle_timeout_s: float | None
) -> dict[str, Any]:
    """Seconds a serverless worker bills for this traffic.

    With an idle timeout T: a gap ≤ T keeps the worker warm (billed in full); a longer gap bills
    T, then a cold start. Without T we assume the policy most favourable to serverless: stay warm
    exactly when the gap is shorter than a cold start (bill min(gap, cold start)). The first
    request always pays one cold start; with T the last request is followed by T of idle.
    """
    billed = busy_s + cold_start_s
    cold_starts = 1
    warm = 0
    threshold = cold_start_s if idle_timeout_s is None else idle_timeout_s
    for g in gaps:
        if idle_timeout_s is None:
            if g < cold_start_s:
                billed += g
                warm += 1
            else:
                billed += cold_start_s
                cold_starts += 1
        elif g <= idle_timeout_s:
            billed += g
            warm += 1
        else:
            billed += idle_timeout_s + cold_start_s
            cold_starts += 1
    if idle_timeout_s is not None:
        billed += idle_timeout_s
    return {
        "billed_s": billed,
        "cold_starts": cold_starts,
        "gaps_kept_warm": warm,
        "gaps_scaled_to_zero": len(gaps) - warm,
        "warm_threshold_s": threshold,
        "policy": "idle timeout"
        if idle_timeout_s is not None
        else "best case (no idle timeout given)",
    }


def _usd(v: float) -> str:
    return f"${v:,.2f}" if v >= 1 else f"${v:.4f}"


def cost_verdict(
    reqs: Sequence[LoggedRequest],
    pod_usd_hr: float,
    serverless_usd_hr: float,
    cold_start_s: float,
    idle_timeout_s: float | None = None,
) -> dict[str, Any]:
    """Pod (billed for the whole span) vs serverless (billed while busy, plus what its scaling
    policy really bills), with the naive duty-cycle answer and the reason they differ."""
    for name, v in (("--pod-usd-hr", pod_usd_hr), ("--serverless-usd-hr", serverless_usd_hr)):
        if v is None or v <= 0:
            raise ConfigError(f"{name} must be > 0")
    if cold_start_s < 0 or (idle_timeout_s is not None and idle_timeout_s < 0):
        raise ConfigError("cold start and idle timeout must be ≥ 0 seconds")
    d = duty_cycle(reqs)
    break_even = min(1.0, pod_usd_hr / serverless_usd_hr)
    pod_cost = pod_usd_hr * d["span_s"] / 3600
    naive_cost = serverless_usd_hr * d["busy_s"] / 3600
    naive = "serverless" if d["duty"] < break_even else "pod"
    bill = serverless_billing(d["busy_s"], d["gaps"], cold_start_s, idle_timeout_s)
    real_cost = serverless_usd_hr * bill["billed_s"] / 3600
    effective_duty = bill["billed_s"] / d["span_s"] if d["span_s"] > 0 else 1.0
    verdict = "serverless" if real_cost < pod_cost else "pod"
    gaps = d["gaps"]
    # A gap shorter than the cold start cannot profitably scale to zero; one within the idle
    # timeout does not even try. Either way the worker bills through it.
    limit = max(cold_start_s, idle_timeout_s or 0.0)
    short = sum(
        1 for g in gaps if g < limit or (idle_timeout_s is not None and g <= idle_timeout_s)
    )
    limit_name = f"cold start ({cold_start_s:g} s)" + (
        f" / idle timeout ({idle_timeout_s:g} s)" if idle_timeout_s is not None else ""
    )
    mean_gap = d["gap_stats"]["mean"]
    gap_txt = f"mean gap {mean_gap:.1f} s" if mean_gap is not None else "no gaps"
    costs = f"serverless {_usd(real_cost)} vs pod {_usd(pod_cost)} over {d['span_s'] / 3600:.2f} h"
    if verdict == "pod" and naive == "serverless":
        reason = (
            f"duty-cycle arithmetic says serverless ({d['duty']:.1%} busy < {break_even:.1%} "
            f"break-even), but {short} of {len(gaps)} gaps are shorter than the {limit_name}; "
            f"{gap_txt}: nothing scales to zero, so serverless bills {effective_duty:.1%} of the "
            f"span at the higher rate ({costs})"
        )
    elif verdict == "pod":
        reason = (
            f"busy {d['duty']:.1%} of the span, at or above the {break_even:.1%} break-even: "
            f"the pod is cheaper ({costs})"
        )
    else:
        reason = (
            f"busy {d['duty']:.1%} < {break_even:.1%} break-even and {bill['gaps_scaled_to_zero']} "
            f"of {len(gaps)} gaps are long enough to scale to zero ({gap_txt}); with "
            f"{bill['cold_starts']} cold starts billed, {costs}"
        )
    return {
        "duty": d,
        "break_even_duty": break_even,
        "pod_usd_hr": pod_usd_hr,
        "serverless_usd_hr": serverless_usd_hr,
        "cold_start_s": cold_start_s,
        "idle_timeout_s": idle_timeout_s,
        "pod_cost_usd": pod_cost,
        "serverless_naive_cost_usd": naive_cost,
        "serverless_cost_usd": real_cost,
        "serverless_billing": bill,
        "effective_serverless_duty": effective_duty,
        "naive_verdict": naive,
        "verdict": verdict,
        "reason": reason,
        "gaps_shorter_than_cold_start_or_idle_timeout": short,
        "cold_start_latency_added_s": bill["cold_starts"] * cold_start_s,
    }


def concurrency_projection(
    duty: dict[str, Any],
    curve: dict[int, float],
    pod_usd_hr: float,
    serverless_usd_hr: float | None = None,
) -> dict[str, Any]:
    """The same log's output tokens sent at client concurrency c, using a measured throughput
    curve {c: aggregate tok/s}: busy hours needed, and what a pod rented only for them costs."""
    tokens = duty.get("output_tokens")
    if not tokens or not curve:
        return {
            "status": "unknown",
            "rows": [],
            "reason": "needs completion_tokens in the log and a throughput curve (--run)",
        }
    current = pod_usd_hr * duty["span_s"] / 3600
    rows = []
    for c in sorted(curve):
        tput = curve[c]
        if not tput or tput <= 0:
            continue
        busy = tokens / tput
        pod = pod_usd_hr * busy / 3600
        rows.append(
            {
                "concurrency": c,
                "tok_s": tput,
                "busy_s": busy,
                "pod_cost_usd": pod,
                "usd_per_1m": usd_per_mtok(pod_usd_hr, tput),
                "saving_vs_current_usd": current - pod,
                "serverless_cost_usd": serverless_usd_hr * busy / 3600
                if serverless_usd_hr
                else None,
            }
        )
    return {
        "status": "ok",
        "current_pod_cost_usd": current,
        "mean_in_flight": duty.get("mean_in_flight"),
        "tok_s_while_busy": duty.get("tok_s_while_busy"),
        "rows": rows,
        "assumes": "requests can be batched at that concurrency and the pod is released when done",
    }


def traffic_advice(duty: dict[str, Any], knee: dict[str, Any] | None, curve: dict[int, float],
                   pod_usd_hr: float, arm: str | None = None) -> dict[str, Any]:
    """The concurrency the log really ran at (mean requests in flight over its span: the sum of
    the request durations over the span) against the card's knee from a measured run, and what
    pushing the client to the knee would save at the same hourly rate: the log's output tokens at
    the knee's throughput need tokens / tok_s seconds of pod, against the whole span now.

    `knee` is analysis.find_knee's answer for `arm` (its `concurrency` and `throughput`); with no
    knee in the measured range the highest concurrency measured stands in, and the saving is a
    lower bound ("at least")."""
    ran = duty.get("mean_in_flight_wall")
    out: dict[str, Any] = {
        "arm": arm, "mean_in_flight": ran, "mean_in_flight_busy": duty.get("mean_in_flight"),
        "tok_s_wall": duty.get("tok_s_wall"), "pod_usd_hr": pod_usd_hr,
        "current_pod_cost_usd": pod_usd_hr * duty["span_s"] / 3600,
        "knee_status": (knee or {}).get("status"),
    }  # fmt: skip
    measured = {c: t for c, t in curve.items() if t and t > 0}
    if knee and knee.get("status") == "knee" and knee.get("concurrency"):
        target, tput, bound = int(knee["concurrency"]), knee.get("throughput"), False
        tput = tput or measured.get(target)
    elif measured:
        target = max(measured)
        tput, bound = measured[target], True
    else:
        return {**out, "status": "unknown",
                "summary": "no throughput curve to hold the log against (--run)"}
    out.update(knee_concurrency=target, knee_tok_s=tput, lower_bound=bound,
               headroom=(target / ran) if ran else None)
    tokens = duty.get("output_tokens")
    where = (f"the card's knee ({arm}) is c={target}" if not bound else
             f"the card ({arm}) shows no knee up to c={target}, its highest measured")
    ran_txt = (f"the log ran at {ran:.2f} requests in flight on average over its span"
               + (f" ({duty['mean_in_flight']:.2f} while busy)" if duty.get("mean_in_flight")
                  else "")
               + (f", {duty['tok_s_wall']:.1f} output tok/s over the wall clock"
                  if duty.get("tok_s_wall") else ""))
    if not tokens or not tput:
        return {**out, "status": "no_tokens",
                "summary": f"{ran_txt}; {where}; the saving needs completion_tokens in the log"}
    knee_s = tokens / tput
    knee_cost = pod_usd_hr * knee_s / 3600
    saving = out["current_pod_cost_usd"] - knee_cost
    frac = saving / out["current_pod_cost_usd"] if out["current_pod_cost_usd"] > 0 else None
    out.update(knee_busy_s=knee_s, knee_pod_cost_usd=knee_cost, saving_usd=saving,
               saving_fraction=frac)
    if ran is not None and ran >= target:
        out["status"] = "at_knee"
        past = "the card's knee" if not bound else "the highest concurrency measured"
        out["summary"] = (f"{ran_txt}: at or past {past} (c={target}, {arm}); "
                          "pushing the client harder buys latency, not tokens")
        return out
    if saving <= 0:
        # the log already made its tokens in no more pod time than the knee would: a "saving"
        # below zero is a cost, never printed as a saving
        out["status"] = "no_saving"
        out["summary"] = (
            f"{ran_txt}; {where} at {tput:,.1f} tok/s: the same {tokens:,} output tokens there "
            f"take {knee_s / 3600:.3f} h of pod, no less than the log's span: no saving from "
            "pushing the client harder")
        return out
    out["status"] = "ok"
    out["summary"] = (
        f"{ran_txt}; {where} at {tput:,.1f} tok/s: the same {tokens:,} output tokens there take "
        f"{knee_s / 3600:.3f} h of pod, {_usd(knee_cost)} instead of "
        f"{_usd(out['current_pod_cost_usd'])} at ${pod_usd_hr:g}/h, saving "
        f"{'at least ' if bound else ''}{_usd(saving)}"
        + (f" ({frac:.0%})" if frac is not None else "")
        + " if the pod is released when done")
    return out


def with_traffic_advice(res: dict[str, Any], advice: dict[str, Any]) -> dict[str, Any]:
    """The cost verdict with the traffic advice in its reason (and under `traffic`)."""
    return {**res, "traffic": advice, "reason": f"{res['reason']}. Traffic: {advice['summary']}"}


def arm_curve(an: dict[str, Any], arm: str | None) -> tuple[dict[int, float], str]:
    """`cost --run`: the measured curve {concurrency: median output tok/s} of `arm` in a run's
    analysis (default: plain, else the first usable arm), and the arm chosen; a ConfigError
    (exit 2) naming the usable arms when `arm` is void or not in the run."""
    usable = [a["label"] for a in an["arms"] if not a["void"]]
    chosen = arm or ("plain" if "plain" in usable else (usable[0] if usable else None))
    if chosen is None or chosen not in usable:
        raise ConfigError(
            f"arm {chosen!r} is not a usable (non-void) arm of {an['run_id']}",
            hint=f"choose one of {usable}",
        )
    curve = {c["concurrency"]: c["output_tok_s"]["median"]
             for c in an["cells"] if c["arm"] == chosen and c["output_tok_s"]}
    return curve, chosen


def best_measured_cell(an: dict[str, Any], arm: str | None,
                       concurrency: int | None) -> dict[str, Any]:
    """`cost --own --run`: the cell of the highest median output tok/s among the run's non-void
    arms, only `arm`'s and only at `concurrency` when given; a ConfigError when none is left."""
    void = {a["label"] for a in an["arms"] if a["void"]}
    usable = [c for c in an["cells"]
              if c["output_tok_s"] and c["arm"] not in void
              and (arm is None or c["arm"] == arm)
              and (concurrency is None or c["concurrency"] == concurrency)]
    if not usable:
        raise ConfigError("no usable cell in --run for that --arm/--concurrency")
    best: dict[str, Any] = max(usable, key=lambda c: c["output_tok_s"]["median"])
    return best


def own_box_cost(
    purchase_usd: float,
    resale_fraction: float,
    years: float,
    power_w: float,
    usd_per_kwh: float,
    utilization: float,
    tok_s: float,
    idle_power_w: float = 0.0,
    rent_usd_hr: float | None = None,
    tok_s_source: str = "given",
) -> dict[str, Any]:
    """USD per 1M output tokens of an owned box, every assumption listed next to what it yields.

    Depreciation accrues around the clock; power is drawn at power_w while busy (utilization)
    and idle_power_w otherwise; tokens are produced only while busy.
    """
    checks = [
        (purchase_usd >= 0, "purchase price must be ≥ 0"),
        (0 <= resale_fraction <= 1, "resale fraction must be between 0 and 1"),
        (years > 0, "years must be > 0"),
        (power_w >= 0 and idle_power_w >= 0, "power draw must be ≥ 0"),
        (usd_per_kwh >= 0, "$/kWh must be ≥ 0"),
        (0 < utilization <= 1, "utilization must be in (0, 1]"),
        (tok_s > 0, "tok/s must be > 0"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ConfigError(msg)
    capex_hr = purchase_usd * (1 - resale_fraction) / (years * HOURS_PER_YEAR)
    busy_power_hr = power_w / 1000 * usd_per_kwh
    idle_power_hr = idle_power_w / 1000 * usd_per_kwh
    power_hr = utilization * busy_power_hr + (1 - utilization) * idle_power_hr
    mtok_per_hr = tok_s * 3600 * utilization / 1e6
    capex_mtok = capex_hr / mtok_per_hr
    power_mtok = power_hr / mtok_per_hr
    out: dict[str, Any] = {
        "assumptions": [
            {"name": "purchase price", "value": purchase_usd, "unit": "USD"},
            {
                "name": "resale after the period",
                "value": resale_fraction,
                "unit": "fraction of price",
            },
            {"name": "period", "value": years, "unit": "years"},
            {"name": "power while busy", "value": power_w, "unit": "W"},
            {"name": "power while idle", "value": idle_power_w, "unit": "W"},
            {"name": "electricity", "value": usd_per_kwh, "unit": "USD/kWh"},
            {"name": "utilization", "value": utilization, "unit": "fraction of hours busy"},
            {"name": "throughput while busy", "value": tok_s, "unit": f"tok/s ({tok_s_source})"},
        ],
        "capex_usd_hr": capex_hr,
        "power_usd_hr": power_hr,
        "usd_per_mtok_capex": capex_mtok,
        "usd_per_mtok_power": power_mtok,
        "usd_per_mtok": capex_mtok + power_mtok,
        "rent_usd_hr": rent_usd_hr,
        "rent_usd_per_mtok": None,
        "break_even_utilization": None,
        "verdict": None,
    }
    if rent_usd_hr is not None and rent_usd_hr > 0:
        rent_mtok = usd_per_mtok(rent_usd_hr, tok_s)
        out["rent_usd_per_mtok"] = rent_mtok
        margin = rent_usd_hr - (busy_power_hr - idle_power_hr)
        fixed = capex_hr + idle_power_hr
        be = fixed / margin if margin > 0 else math.inf
        out["break_even_utilization"] = be if be <= 1 else None
        own = out["usd_per_mtok"]
        if own < rent_mtok:
            out["verdict"] = (
                f"buy: ${own:.3f}/Mtok owned vs ${rent_mtok:.3f}/Mtok rented at "
                f"{utilization:.0%} utilization"
            )
        else:
            out["verdict"] = (
                f"rent: ${rent_mtok:.3f}/Mtok rented vs ${own:.3f}/Mtok owned at "
                f"{utilization:.0%} utilization"
            )
        out["verdict"] += (
            f"; owning wins above {be:.0%} utilization"
            if be <= 1
            else "; owning never wins at this rent"
        )
    return out

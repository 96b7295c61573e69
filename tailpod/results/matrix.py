"""The card matrix: which card, at which concurrency, serves this checkpoint cheapest per token.

Pure functions over what the per-card runs already produced: a card is
`provider:GPU[xN][:spot|:on-demand]`, each
card's sweep is an ordinary run directory analysed by `analysis.analyze`, and the matrix report puts
those analyses side by side: tok/s, $/hr and $/Mtok per card and arm at each concurrency, the
cheapest card per concurrency band, and each card's crossover and knee. A card that failed is named
with its reason; a void arm is never a winner; a stamp on any card's numbers stamps the matrix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailpod.errors import ConfigError

MATRIX_FILE = "matrix.json"
MATRIX_REPORT = "matrix.md"
MATRIX_PLOT = "matrix-cost.png"

_CARD = re.compile(r"^\s*(?P<provider>[A-Za-z.]+)\s*:\s*(?P<rest>.+?)\s*$")
# The GPU count is a suffix `xN` (or `×N`) after the name, which may be quoted: "RTX 4090"x2.
_COUNT = re.compile(r"^(?P<gpu>.+?)\s*[x×](?P<count>\d+)$")


# A card's purchase marker, after its last colon: `vastai:RTX 4090:spot`, `runpod:NVIDIA A40:on-demand`.
SPOT_MARK = "spot"
ON_DEMAND_MARK = "on-demand"
_MARKS = {"spot": True, "on-demand": False, "ondemand": False}


@dataclass(frozen=True)
class Card:
    """One pod shape of the matrix: N GPUs of one type at one provider, and how it is bought:
    `spot` True (a `:spot` card), False (`:on-demand`) or None (unmarked: spot only under
    `matrix --spot`, which rents every card spot)."""

    provider: str  # canonical: runpod | vastai
    gpu: str
    count: int = 1
    spot: bool | None = None

    @property
    def label(self) -> str:
        mark = "" if self.spot is None else f":{SPOT_MARK if self.spot else ON_DEMAND_MARK}"
        return f"{self.provider}:{self.gpu}" + (f"x{self.count}" if self.count > 1 else "") \
            + mark

    @property
    def slug(self) -> str:
        """A directory name for the card's results."""
        return re.sub(r"[^a-z0-9]+", "-", self.label.lower()).strip("-")

    def key(self) -> tuple[str, str, int]:
        """The pod shape (provider, GPU, count), whatever the purchase."""
        return (self.provider, " ".join(self.gpu.lower().split()), self.count)

    def is_spot(self, every_card_spot: bool) -> bool:
        """Whether this card is rented as a spot pod: its marker, else `matrix --spot`."""
        return every_card_spot if self.spot is None else self.spot

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"provider": self.provider, "gpu": self.gpu, "count": self.count,
                               "label": self.label}
        if self.spot is not None:
            out["spot"] = self.spot
        return out


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1].strip()
    return text


def _purchase_mark(text: str, rest: str) -> tuple[str, bool | None]:
    """`rest` without its purchase marker (after its last colon, outside quotes), and the
    marker's meaning; a marker that is not `spot` or `on-demand` is refused (GPU names carry no
    colon, so a colon always starts a marker)."""
    if ":" not in rest or any(q in rest.rpartition(":")[2] for q in "'\""):
        return rest, None
    shape, _colon, mark = rest.rpartition(":")
    word = mark.strip().lower()
    if word not in _MARKS:
        raise ConfigError(f"card {text!r}: the purchase {mark.strip()!r} is not "
                          f"{SPOT_MARK} or {ON_DEMAND_MARK}",
                          hint='mark a spot card e.g. "vastai:RTX 4090:spot"; an unmarked card is '
                               "on-demand (spot under --spot)")
    shape, again = _purchase_mark(text, shape.strip())  # `A:B:spot`: `B` is refused above
    if again is not None:
        raise ConfigError(f"card {text!r} has more than one purchase marker")
    return shape, _MARKS[word]


def parse_card(text: str) -> Card:
    """`provider:GPU[xN][:spot|:on-demand]`, e.g. `runpod:NVIDIA H100 80GB HBM3`,
    `vastai:"RTX 4090"x2` or `vastai:RTX 4090:spot`."""
    from tailpod.provision.providers import CLOUD_PROVIDERS, canonical_name

    found = _CARD.match(text or "")
    if not found:
        raise ConfigError(f"card {text!r} is not provider:GPU[xN]",
                          hint='e.g. --card "runpod:NVIDIA H100 80GB HBM3" --card "vastai:RTX 4090x2"')
    provider = canonical_name(found.group("provider"))
    if provider not in CLOUD_PROVIDERS:
        raise ConfigError(f"card {text!r}: {provider} rents nothing; a card is on "
                          + " or ".join(CLOUD_PROVIDERS))
    rest, spot = _purchase_mark(text, found.group("rest"))
    count = 1
    counted = _COUNT.match(rest)
    if counted:  # a quoted name keeps an `xN` inside its quotes: "...x2" ends with the quote
        rest, count = counted.group("gpu"), int(counted.group("count"))
    gpu = _unquote(rest)
    if not gpu:
        raise ConfigError(f"card {text!r} names no GPU")
    if count < 1:
        raise ConfigError(f"card {text!r}: the GPU count must be at least 1")
    return Card(provider, gpu, count, spot)


def check_purchases(cards: Sequence[Card], every_card_spot: bool) -> None:
    """`--spot` rents every card spot, so a card marked `:on-demand` beside it is refused rather
    than guessed; and the same pod shape bought the same way twice is a duplicate (the same GPU
    as a spot and an on-demand card is a fair comparison, so it is not)."""
    seen: dict[tuple[tuple[str, str, int], bool], str] = {}
    for card in cards:
        if every_card_spot and card.spot is False:
            raise ConfigError(f"card {card.label!r} is marked on-demand, but --spot rents every "
                              "card spot; nothing was rented",
                              hint="drop --spot and mark the spot cards instead, e.g. "
                                   '"vastai:RTX 4090:spot"')
        key = (card.key(), card.is_spot(every_card_spot))
        if key in seen:
            raise ConfigError(f"duplicate card {card.label!r} (same as {seen[key]!r})",
                              hint="each card is rented and measured once; remove the repeat")
        seen[key] = card.label


def parse_cards(texts: Iterable[str], every_card_spot: bool = False) -> list[Card]:
    """The cards in order; a duplicate (same provider, GPU, count and purchase) or an
    `:on-demand` card under `--spot` (`every_card_spot`) is refused."""
    cards = [parse_card(text) for text in texts]
    if not cards:
        raise ConfigError("no cards given", hint='pass --card "provider:GPU[xN]", at least one')
    check_purchases(cards, every_card_spot)
    return cards


# -- the report -------------------------------------------------------------------------------


def _card_cells(label: str, analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per (arm, concurrency) of a card: tok/s, $/hr, $/Mtok, void."""
    tok_s = {(c["arm"], c["concurrency"]): (c.get("output_tok_s") or {}).get("median")
             for c in analysis.get("cells", [])}
    out = []
    for cost in analysis.get("cost", []):
        key = (cost["arm"], cost["concurrency"])
        out.append({
            "card": label,
            "arm": cost["arm"],
            "concurrency": cost["concurrency"],
            "tok_s": tok_s.get(key),
            "price_per_hr": cost.get("price_per_hr"),
            "usd_per_mtok": cost.get("usd_per_1m") if cost.get("status") == "ok" else None,
            "void": cost.get("status") == "void",
            "why_no_cost": cost.get("reason"),
        })
    return out


def _bands(cheapest: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive concurrency levels won by the same card, as bands."""
    bands: list[dict[str, Any]] = []
    for entry in cheapest:
        if bands and bands[-1]["card"] == entry["card"]:
            bands[-1]["to"] = entry["concurrency"]
        else:
            bands.append({"from": entry["concurrency"], "to": entry["concurrency"],
                          "card": entry["card"]})
    return bands


def _served_revisions(analysis: dict[str, Any], run: dict[str, Any] | None) -> list[str]:
    revisions = set()
    for arm in (run or {}).get("arms", []):
        for ckpt in (arm.get("checkpoints") or {}).values():
            if isinstance(ckpt, dict) and ckpt.get("revision"):
                revisions.add(str(ckpt["revision"]))
    return sorted(revisions)


def _hardware_stamp(label: str, analysis: dict[str, Any]) -> str | None:
    """The matrix-wide line for a card whose numbers are not the claimed card's, from the run's
    hardware check (results/hardware.py): an emulated provider, or a GPU mismatch."""
    hardware = analysis.get("hardware") or {}
    verdict = hardware.get("verdict")
    if verdict == "emulated":
        reported = hardware.get("reported") or {}
        ran_on = ", ".join(str(g) for g in reported.get("gpus") or []) or reported.get("cpu") \
            or "an unrecorded machine"
        return (f"EMULATED PROVIDERS: the engines ran on {ran_on}, not on the claimed cards; "
                "the cost figures are illustrative")
    if verdict == "mismatch":
        return f"GPU MISMATCH on {label}: {hardware.get('stamp')}"
    return None


# `matrix --objective`: what each names in decide's terms. `goodput` ranks cards by $/Mtok of the
# tokens that met the SLO (issue 28: "matrix --objective goodput ranks cards by $/Mtok at the
# SLO"), i.e. decide's cost objective with an SLO; a matrix compares cards at their own prices.
MATRIX_OBJECTIVES = {"cost": "cost", "goodput": "cost", "throughput": "throughput"}


def card_decision(outcomes: Sequence[dict[str, Any]], objective: str = "cost",
                  slo: dict[str, float] | None = None) -> dict[str, Any] | None:
    """The best card per load band under `objective` (`cost` by default: the cheapest card;
    `goodput`: the cheapest per token that met `slo`, MATRIX_OBJECTIVES), by `decide`'s own
    rule (results/decide.py: the best median, ties inside the rep spread to the simpler arm,
    then the cheaper card) over the card run directories; None when no card run can be read.
    Pooled bands only (every prompt class together)."""
    from tailpod.errors import TailpodError
    from tailpod.results import decide
    from tailpod.results.analysis import analyze
    from tailpod.results.io import load_run

    runs, analyses, card_of = [], [], {}
    for outcome in outcomes:
        run_dir = outcome.get("run_dir")
        if not run_dir or not (Path(run_dir) / "run.json").exists():
            continue
        try:
            run = load_run(run_dir)
        except (TailpodError, ValueError, OSError):
            continue  # build_matrix says so from the outcome's own error
        runs.append(run)
        analyses.append(outcome.get("analysis") or {})
        card_of[run.meta.run_id] = outcome["card"]
    if not runs:
        return None
    if objective == "goodput" and not slo:
        raise ValueError("the goodput objective needs an SLO")
    dec = decide.compute(runs, MATRIX_OBJECTIVES[objective], slo,
                         analyses=analyses if all(analyses) else [analyze(r) for r in runs])
    arms = dec["arms"]

    def card(key: str) -> str:
        return card_of.get(arms[key]["run_id"], arms[key]["run_id"])

    bands = []
    for band in dec["bands"]:
        if band["prompt_class"] != decide.POOLED:
            continue
        if band["arm"] is None:  # no card met the SLO at this load (decide.NO_ARM_MEETS_SLO)
            bands.append({"axis": band["axis"], "load": band["load"], "card": band["verdict"],
                          "arm": "-", "median": None, "tied": [], "tie_resolved": False,
                          "best_median_card": None})
            continue
        bands.append({
            "axis": band["axis"], "load": band["load"], "card": card(band["arm"]),
            "arm": arms[band["arm"]]["arm"], "median": band["median"],
            "tied": sorted({card(k) for k in band["tied"]} - {card(band["arm"])}),
            "tie_resolved": band["tie_resolved"],
            "best_median_card": card(band["best_median_arm"]),
        })  # fmt: skip
    unit = dec["unit"] + (" of tokens within the SLO" if objective == "goodput" else "")
    return {"objective": objective, "unit": unit, "lower_is_better": dec["lower_is_better"],
            "slo": dec["slo"], "bands": bands, "warnings": dec["warnings"]}


def build_matrix(outcomes: Sequence[dict[str, Any]], *,
                 stamp: str | None = None, objective: str = "cost",
                 slo: dict[str, float] | None = None) -> dict[str, Any]:
    """The matrix from per-card outcomes.

    Each outcome: `card` (label), `status` (done | failed | stopped | skipped | pending), `error`,
    `spend_usd`, `proof`, and for a measured card `analysis` (analysis.analyze) and `run`
    (run.json). A stamp on any card (off-pod; an emulated provider or a GPU mismatch from the
    hardware check) stamps the whole matrix; `stamp` adds one of the caller's."""
    cells: list[dict[str, Any]] = []
    cards: list[dict[str, Any]] = []
    stamps = {stamp} if stamp else set()
    crossover: dict[str, Any] = {}
    knee: dict[str, Any] = {}
    revisions: dict[str, list[str]] = {}
    digests: dict[str, str | None] = {}
    for outcome in outcomes:
        label = outcome["card"]
        analysis = outcome.get("analysis")
        entry = {k: outcome.get(k) for k in ("card", "status", "error", "spend_usd", "proof",
                                             "run_tag", "run_dir")}
        entry.update(preemptions=list(outcome.get("preemptions") or []),
                     cells_by_pod=dict(outcome.get("cells_by_pod") or {}),
                     spot=bool(outcome.get("spot")), bid=outcome.get("bid"),
                     on_demand_per_hr=outcome.get("on_demand_per_hr"))
        entry["purchase"] = purchase_text(entry)
        if analysis:
            entry.update(gpu=analysis.get("gpu"), gpu_count=analysis.get("gpu_count"),
                         price_per_hr=analysis.get("price_per_hr"))
            cells += _card_cells(label, analysis)
            hardware = analysis.get("hardware") or {}
            entry.update(hardware=hardware.get("verdict"), card_stamp=hardware.get("stamp"))
            for found in (analysis.get("stamp"), _hardware_stamp(label, analysis)):
                if found:
                    stamps.add(str(found))
            crossover[label] = [c for c in analysis.get("crossover", [])]
            knee[label] = [k for k in analysis.get("knee", [])]
            revisions[label] = _served_revisions(analysis, outcome.get("run"))
            digests[label] = analysis.get("image_digest")
        cards.append(entry)
    concurrency = sorted({c["concurrency"] for c in cells})
    tables: list[dict[str, Any]] = []
    cheapest: list[dict[str, Any]] = []
    for conc in concurrency:
        rows = [c for c in cells if c["concurrency"] == conc]
        priced = sorted((c for c in rows if c["usd_per_mtok"] is not None and not c["void"]),
                        key=lambda c: c["usd_per_mtok"])
        unpriced = [c for c in rows if c not in priced]
        ranking: list[str] = []
        for c in priced:
            if c["card"] not in ranking:
                ranking.append(c["card"])
        tables.append({"concurrency": conc, "rows": priced + unpriced, "ranking": ranking})
        if priced:
            best = priced[0]
            cheapest.append({"concurrency": conc, "card": best["card"], "arm": best["arm"],
                             "usd_per_mtok": best["usd_per_mtok"]})
    distinct_revisions = {tuple(v) for v in revisions.values() if v}
    distinct_digests = {d for d in digests.values() if d}
    warnings = []
    if len(distinct_revisions) > 1:
        warnings.append("the cards served different checkpoint revisions: "
                        + "; ".join(f"{k}: {', '.join(v)}" for k, v in revisions.items()))
    if len(distinct_digests) > 1:
        warnings.append("the cards ran different image digests: "
                        + "; ".join(f"{k}: {v}" for k, v in digests.items()))
    return {
        "cards": cards,
        "concurrency": concurrency,
        "tables": tables,
        "cheapest": cheapest,
        "bands": _bands(cheapest),
        "crossover": crossover,
        "knee": knee,
        "failed": [c for c in cards if c["status"] != "done"],
        "stamp": " · ".join(sorted(stamps)) or None,
        "warnings": warnings,
        "decision": card_decision(outcomes, objective, slo),
        "spot_vs_on_demand": spot_versus_on_demand(cards, tables),
    }


def purchase_text(card: dict[str, Any]) -> str:
    """How a card is bought, as the plan before renting, the report and `cost --matrix` say it:
    `on-demand`, or `spot at a bid of $B/h` (`spot at each offer's minimum bid` without --bid),
    with the card's on-demand price where it was recorded."""
    if not card.get("spot"):
        return "on-demand"
    bid = card.get("bid")
    text = "spot at " + (f"a bid of ${float(bid):g}/h" if bid is not None
                         else "each offer's minimum bid") + " (+ storage)"
    on_demand = card.get("on_demand_per_hr")
    return text + (f"; on-demand ${float(on_demand):.2f}/h" if on_demand is not None else "")


def purchase_lines(cards: Sequence[dict[str, Any]]) -> list[str]:
    """One line per card: its purchase and its $/h (what it was priced and budgeted at)."""
    return [f"- {c['card']}: {c.get('purchase') or purchase_text(c)}"
            + (f", priced ${float(c['price_per_hr']):.2f}/h" if c.get("price_per_hr") is not None
               else "") for c in cards]


NO_PREEMPTION_ASSUMED = "no preemption measured: spot $/Mtok assumes none"


def preemption_overhead(card: dict[str, Any]) -> tuple[float | None, str | None]:
    """The factor a spot card's $/Mtok is multiplied by for its preemptions, and the assumption
    behind it when none was measured. The lost pods' dollars (matrix_run's preemption record:
    their whole spend, an upper bound on the loss) are added to what the kept measurements cost:
    spend / (spend - lost). None (void) when a preemption was measured but the card's spend is
    not known or not above the loss."""
    lost = card.get("preemptions") or []
    if not lost:
        return 1.0, NO_PREEMPTION_ASSUMED
    lost_usd = sum(float(p.get("pod_usd") or 0) for p in lost)
    spend = card.get("spend_usd")
    if spend is None or float(spend) <= lost_usd:
        return None, (f"{len(lost)} preemption(s) measured, but the card's spend is not known "
                      "beyond them: spot $/Mtok void")
    return float(spend) / (float(spend) - lost_usd), None


def spot_versus_on_demand(cards: Sequence[dict[str, Any]], tables: Sequence[dict[str, Any]]
                          ) -> list[dict[str, Any]]:
    """Per spot card (one whose on-demand price was recorded) and concurrency, its cheapest arm
    that is not void: $/Mtok on spot with the preemption overhead (preemption_overhead) against
    the same tokens at the card's on-demand price, and which is cheaper."""
    out = []
    for card in cards:
        on_demand = card.get("on_demand_per_hr")
        if not card.get("spot") or on_demand is None:
            continue
        factor, assumption = preemption_overhead(card)
        for table in tables:
            own = [r for r in table["rows"] if r["card"] == card["card"]
                   and r["usd_per_mtok"] is not None and not r["void"] and r["price_per_hr"]]
            if not own:
                continue
            best = min(own, key=lambda r: r["usd_per_mtok"])
            spot = best["usd_per_mtok"] * factor if factor is not None else None
            # the same tokens per second billed at the on-demand rate
            demand = best["usd_per_mtok"] * float(on_demand) / float(best["price_per_hr"])
            cheaper = None if spot is None else "spot" if spot < demand else "on-demand"
            out.append({"card": card["card"], "concurrency": table["concurrency"],
                        "arm": best["arm"], "spot_usd_per_mtok": spot,
                        "on_demand_usd_per_mtok": demand, "overhead_factor": factor,
                        "cheaper": cheaper,
                        "saving": None if spot is None or not demand else 1 - spot / demand,
                        "preemptions": len(card.get("preemptions") or []),
                        "lost_usd": sum(float(p.get("pod_usd") or 0)
                                        for p in card.get("preemptions") or []),
                        "spend_usd": card.get("spend_usd"), "assumption": assumption})
    return out


def _usd(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"${value:,.{digits}f}"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}"


_CROSSOVER_WORDS = {
    "none_in_range": "ahead of plain at every c measured",
    "below_range": "plain level or ahead from the lowest c",
}


def _crossover_text(items: Sequence[dict[str, Any]]) -> str:
    """Where plain overtakes each speculative arm (analysis.find_crossover's statuses)."""
    parts = []
    for item in items:
        where = item.get("concurrency")
        status = str(item.get("status"))
        if status == "crossover" and where is not None:
            parts.append(f"{item['arm']}: plain overtakes it at c≈{where:.3g}")
        else:
            parts.append(f"{item['arm']}: {_CROSSOVER_WORDS.get(status, status)}")
    return "; ".join(parts) or "no speculative arm"


def _knee_text(items: Sequence[dict[str, Any]]) -> str:
    parts = []
    for item in items:
        if item.get("void"):
            continue
        where = item.get("concurrency")
        parts.append(f"{item['arm']}: c={where}" if item.get("status") == "knee" and where
                     else f"{item['arm']}: {item.get('status')}")
    return "; ".join(parts) or "—"


def _decision_lines(dec: dict[str, Any] | None) -> list[str]:
    """The best card per load band under the objective (decide's rule), one line per band."""
    if not dec or not dec.get("bands"):
        return []
    what = "Cheapest card" if dec["objective"] in ("cost", "goodput") else "Best card"
    lines = [f"## {what} per load band under the {dec['objective']} objective", "",
             "By `tailpod decide`'s rule over the card runs: the best median over reps "
             f"({'lowest' if dec['lower_is_better'] else 'highest'} {dec['unit']}); a card whose "
             "rep range overlaps the best's is tied, and the tie goes to the simpler arm "
             "(plain before speculative, smaller K), then the cheaper card.", "",
             f"| load | card | arm | {dec['unit']} | tied with |", "|---|---|---|---|---|"]
    for band in dec["bands"]:
        load = band["load"]
        where = (f"c={load:g}" if band["axis"] == "concurrency"
                 else f"rate={load if isinstance(load, str) else f'{load:g}'}/s")
        value = ("-" if band["median"] is None else f"{band['median']:,.3f}"
                 if dec["lower_is_better"] else f"{band['median']:,.1f}")
        tied = ", ".join(band["tied"]) or "—"
        if band["tie_resolved"]:
            tied += f" (best median: {band['best_median_card']}, inside the spread)"
        lines.append(f"| {where} | **{band['card']}** | {band['arm']} | {value} | {tied} |")
    for warning in dec.get("warnings") or []:
        lines.append(f"\n> {warning}")
    return [*lines, ""]


def _preemption_lines(cards: list[dict[str, Any]]) -> list[str]:
    """Spot cards whose pod lost its bid: how often, what the lost pods cost, and which pod
    measured which cells (a cell cut by a preemption was dropped and measured again)."""
    hit = [c for c in cards if c.get("preemptions")]
    if not hit:
        return []
    from tailpod.results.sections.preemptions import lost_pods_line

    lines = ["## Preemptions (spot)", ""]
    for card in hit:
        lines.append(f"- {card['card']}: "
                     + lost_pods_line(card["preemptions"], card.get("cells_by_pod") or {}))
    return [*lines, ""]


def spot_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Spot against on-demand per card and concurrency, with what the spot figure assumes."""
    if not rows:
        return []
    lines = ["## Spot versus on-demand", "",
             "The card's cheapest arm that is not void; spot $/Mtok includes the measured "
             "preemptions (the lost pods' dollars added to the spot cost), on-demand is the same "
             "tokens at the offer's on-demand price.", ""]
    notes: dict[str, str] = {}
    for row in rows:
        if row["assumption"]:
            notes[row["card"]] = row["assumption"]
        elif row["preemptions"]:
            notes[row["card"]] = (f"{row['preemptions']} preemption(s) measured: "
                                  f"{_usd(row['lost_usd'], 2)} of {_usd(row['spend_usd'], 2)} "
                                  f"lost, spot cost x{row['overhead_factor']:.2f}")
    lines += [f"- {card}: {note}" for card, note in notes.items()]
    lines += ["", "| card | load | arm | spot $/Mtok | on-demand $/Mtok | cheaper |",
              "|---|---|---|---|---|---|"]
    for row in rows:
        spot = "VOID" if row["spot_usd_per_mtok"] is None else _usd(row["spot_usd_per_mtok"], 3)
        if row["cheaper"] is None:
            verdict = "—"
        elif row["cheaper"] == "spot":
            verdict = f"spot, {row['saving']:.1%} cheaper"
        else:
            verdict = f"on-demand (spot {-row['saving']:.1%} dearer)"
        lines.append(f"| {row['card']} | c={row['concurrency']} | {row['arm']} | {spot} | "
                     f"{_usd(row['on_demand_usd_per_mtok'], 3)} | {verdict} |")
    return [*lines, ""]


def render_matrix_markdown(matrix: dict[str, Any], title: str = "Card matrix") -> str:
    stamp = matrix.get("stamp")
    lines = [f"# {title}", ""]
    if stamp:
        lines += [f"**{stamp}**", ""]
    for warning in matrix.get("warnings", []):
        lines += [f"> warning: {warning}", ""]
    lines += ["## Cards", "",
              "| card | status | GPU | hardware check | purchase | $/hr | spent | billing proof |",
              "|---|---|---|---|---|---|---|---|"]
    for card in matrix["cards"]:
        status = card["status"] + (f": {card['error']}" if card.get("error") else "")
        gpu = f"{card.get('gpu_count') or '?'}x {card['gpu']}" if card.get("gpu") else "—"
        lines.append(f"| {card['card']} | {status} | {gpu} | {card.get('hardware') or '—'} | "
                     f"{card.get('purchase') or purchase_text(card)} | "
                     f"{_usd(card.get('price_per_hr'), 2)} | {_usd(card.get('spend_usd'))} | "
                     f"{card.get('proof') or '—'} |")
    lines.append("")
    if matrix["bands"]:
        lines += ["## Cheapest card per concurrency band", ""]
        for band in matrix["bands"]:
            span = f"c={band['from']}" if band["from"] == band["to"] \
                else f"c={band['from']}–{band['to']}"
            lines.append(f"- {span}: **{band['card']}**")
        lines.append("")
    lines += _decision_lines(matrix.get("decision"))
    for table in matrix["tables"]:
        lines += [f"## Concurrency {table['concurrency']}", "",
                  "ranked by $/Mtok (lowest first): " + (" < ".join(table["ranking"]) or "—"), "",
                  "| card | arm | output tok/s | $/hr | $/Mtok |", "|---|---|---|---|---|"]
        for row in table["rows"]:
            cost = _usd(row["usd_per_mtok"], 3) if row["usd_per_mtok"] is not None \
                else ("VOID" if row["void"] else f"— ({row.get('why_no_cost') or 'unknown'})")
            arm = f"~~{row['arm']}~~" if row["void"] else row["arm"]
            lines.append(f"| {row['card']} | {arm} | {_num(row['tok_s'])} | "
                         f"{_usd(row['price_per_hr'], 2)} | {cost} |")
        lines.append("")
    if matrix["crossover"]:
        lines += ["## Crossover and knee per card", "", "| card | crossover | knee |",
                  "|---|---|---|"]
        for card, items in matrix["crossover"].items():
            lines.append(f"| {card} | {_crossover_text(items)} | "
                         f"{_knee_text(matrix['knee'].get(card, []))} |")
        lines.append("")
    lines += _preemption_lines(matrix["cards"])
    lines += spot_lines(matrix.get("spot_vs_on_demand") or [])
    if matrix["failed"]:
        lines += ["## Cards without full results", ""]
        for card in matrix["failed"]:
            lines.append(f"- {card['card']}: {card['status']}"
                         + (f": {card['error']}" if card.get("error") else ""))
        lines.append("")
    return "\n".join(lines)


def plot_matrix_cost(matrix: dict[str, Any], path: Path) -> Path:
    """$/Mtok against concurrency, one line per card: the card's cheapest arm that is not void
    at each concurrency (the arm is named at each point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tailpod.results.plots import _log2_x, dollar_axis

    fig, ax = plt.subplots(figsize=(9, 6))
    drawn = False
    for i, card in enumerate(c["card"] for c in matrix["cards"]):
        points = []
        for table in matrix["tables"]:
            own = [r for r in table["rows"] if r["card"] == card and r["usd_per_mtok"] is not None
                   and not r["void"]]
            if own:
                best = min(own, key=lambda r: r["usd_per_mtok"])
                points.append((table["concurrency"], best["usd_per_mtok"], best["arm"]))
        if not points:
            continue
        drawn = True
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=f"C{i % 10}",
                label=card)
        for x, y, arm in points:
            ax.annotate(arm, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                        color=f"C{i % 10}")
    if drawn:
        _log2_x(ax, matrix["concurrency"])
        ax.set_yscale("log")
        dollar_axis(ax)
        ax.set_ylabel("USD per 1M output tokens (log scale)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no card produced a priced measurement", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_title("Cost per 1M output tokens vs concurrency, per card (lower is better)",
                 fontsize=10)
    stamp = matrix.get("stamp")
    if stamp:
        fig.text(0.5, 0.5, stamp, rotation=25, fontsize=18, color="red", alpha=0.22,
                 ha="center", va="center", weight="bold", wrap=True)
        fig.text(0.99, 0.005, stamp, fontsize=8, color="red", ha="right", va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

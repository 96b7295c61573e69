"""What a report section is: a module under results/sections/ that defines `SECTION`, a `Section`
that computes its part of the analysis from the run's rows and renders that part as markdown (and,
optionally, puts several runs' parts side by side for `tailpod compare`).

analysis.analyze(), report.render_run_markdown() and compare.compare_analyses() loop over the
registered sections (results/sections/__init__.py), so adding a section is adding one module there.
Three ranks place a section, because the three outputs order differently and every one of them is
kept as it was before sections were modules:

- `rank`: when it is computed, which is also where its key sits in `tailpod report --json` and
  where its warnings fall in the report's Warnings list. A section may read the value of any
  section of a lower rank from `Context.done`.
- `report_rank`: where its markdown sits in report.md (None: not in the run report).
- `compare_rank`: where its part sits in the comparison, JSON and markdown (None: not compared).

A section whose `in_analysis` is False is the report's only: its value is not part of the analysis
(`tailpod report --json`, the comparison) but computed for report.md alone, from the analysis
sections before it and, where it has one, its own file beside run.json (the Decision section's
decision.json, the KL section's kl.json). Such a section ranks after every analysis section.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tailpod.results.io import STAMP, Run
from tailpod.results.markdown import voids
from tailpod.results.samples import (
    AnalysisSettings,
    CellSummary,
    Sample,
    build_samples,
    effective_cache,
    summarize,
)
from tailpod.results.schema import ArmRecord

T = TypeVar("T")

# report.md's frame writes the plots and the raw-data line here: a section whose report_rank is
# above this follows them (the Decision and KL sections, which came after them before they were
# sections, and still do).
AFTER_PLOTS = 1000


@dataclass
class Context:
    """What every section's compute() reads: the run, its arms and voids, and the per-cell
    summaries; `warnings` collects the report's Warnings in rank order, `done` holds the values
    of the sections already computed (by key)."""

    run: Run
    settings: AnalysisSettings
    arms: list[ArmRecord]
    void: dict[str, str]
    samples: list[Sample]
    cells: list[CellSummary]
    cell_at: dict[tuple[str, int], CellSummary]
    concurrencies: list[int]
    warnings: list[str] = field(default_factory=list)
    done: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, run: Run, settings: AnalysisSettings) -> Context:
        arms = _arm_info(run)
        samples = build_samples(run, settings.prompt_class, settings.cache)
        cells = summarize(samples)
        return cls(
            run=run,
            settings=settings,
            arms=arms,
            void=_void_reasons(run, arms),
            samples=samples,
            cells=cells,
            cell_at={(c["arm"], c["concurrency"]): c for c in cells},
            concurrencies=sorted({c["concurrency"] for c in cells}),
            warnings=_frame_warnings(run, settings),
        )

    def baseline_for(self, arm: ArmRecord) -> ArmRecord | None:
        """The plain arm a spec arm is measured against: same checkpoint first, non-void first,
        the one labelled `plain` first."""
        plain = [a for a in self.arms if a.k == 0]
        same = [a for a in plain if a.checkpoint == arm.checkpoint] or plain
        same.sort(key=lambda a: (a.label in self.void, a.label != "plain"))
        return same[0] if same else None


def _arm_info(run: Run) -> list[ArmRecord]:
    arms = list(run.meta.arms)
    known = {a.label for a in arms}
    for label in dict.fromkeys(c.arm for c in run.cells):
        if label not in known:
            arms.append(ArmRecord(label=label))
            known.add(label)
    return arms


def _void_reasons(run: Run, arms: Sequence[ArmRecord]) -> dict[str, str]:
    reasons = {a.label: a.void_text() for a in arms if a.is_void}
    for cell in run.cells:
        # a cell void with its own reason (a dead lane, measure/deploy.py) is void alone: its
        # figures print as void (results/samples.py), the arm's other cells stand
        if (cell.void or "void" in cell.flags) and cell.arm not in reasons \
                and not cell.void_reason:
            reasons[cell.arm] = "cell marked void by the sweep"
    return reasons


def _frame_warnings(run: Run, st: AnalysisSettings) -> list[str]:
    """The warnings about the run as a whole, before any section's."""
    warnings = list(run.load_warnings)
    if st.cache is not None and effective_cache(run, st.cache) is None and run.cells:
        warnings.append(f"no {st.cache}-cache cells: throughput pools every cache state")
    if st.cache is not None and any(c.cache != st.cache for c in run.cells):
        warnings.append(f"throughput tables use {st.cache}-cache cells only")
    if run.off_pod:
        warnings.append(f"measured off-pod: {STAMP}")
    if run.migrated_from is not None:
        warnings.append(f"read from schema v{run.migrated_from} (migrated in memory)")
    return warnings


@dataclass(frozen=True)
class RenderContext:
    """What a section's render() may read besides its own value: the whole analysis (arms,
    concurrencies, price, hardware), the off-pod stamp and the void arms."""

    analysis: Mapping[str, Any]
    stamp: str | None
    void: dict[str, str]

    @property
    def concurrency_head(self) -> list[str]:
        return ["arm"] + [f"c={c}" for c in self.analysis["concurrency"]]


@dataclass(frozen=True)
class CompareContext:
    """Several analyses, and the (arm, concurrency) keys any of them measured, plain first."""

    analyses: Sequence[Mapping[str, Any]]
    keys: list[tuple[str, int]]
    voids: list[dict[str, str]]

    @classmethod
    def of(cls, analyses: Sequence[Mapping[str, Any]]) -> CompareContext:
        keys: list[tuple[str, int]] = []
        for an in analyses:
            for c in an["cells"]:
                if (c["arm"], c["concurrency"]) not in keys:
                    keys.append((c["arm"], c["concurrency"]))
        keys.sort(key=lambda k: (k[0] != "plain", k[0], k[1]))
        return cls(analyses=analyses, keys=keys, voids=[voids(an) for an in analyses])

    @property
    def arm_labels(self) -> list[str]:
        return list(dict.fromkeys(k[0] for k in self.keys))


@dataclass(frozen=True)
class CompareRenderContext:
    stamp: str | None
    ids: list[str]  # run ids, the first is the baseline of every ratio

    @property
    def ratio_heads(self) -> list[str]:
        return [f"{i} / {self.ids[0]}" for i in self.ids[1:]]


@dataclass(frozen=True)
class Section(Generic[T]):
    """One report section. `compute` returns the section's typed value (stored in the analysis
    under `key`); `render` turns it into report.md lines; `compare` returns this section's keys
    of the comparison and `render_compare` their markdown."""

    key: str
    rank: int
    compute: Callable[[Context], T]
    report_rank: int | None = None
    render: Callable[[T, RenderContext], list[str]] | None = None
    compare_rank: int | None = None
    compare: Callable[[CompareContext], dict[str, Any]] | None = None
    render_compare: Callable[[Mapping[str, Any], CompareRenderContext], list[str]] | None = None
    omit_none: bool = False  # leave the key out of the analysis when compute returns None
    in_analysis: bool = True  # False: computed for report.md only (see the module's docstring)

"""Spot preemptions of one run: how many pods lost their bid mid-sweep, the minutes and dollars
those pods ran, and which pod measured which cells. `benchmark --resume-on-preemption` keeps each
preemption in run.json `preemptions` (measure/matrix_run.py preemption_entry); every row of a
spot pod names the pod it was measured on (`pod`), so a run that went on on a new pod, or was
resumed there with `--run-id`, says which cells came from where. A cell cut by a preemption never
wrote its summary: its rows were dropped and it was measured again, so it is counted once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from tailpod.results.schema import CellRow
from tailpod.results.section import Context, RenderContext, Section


class Preemptions(TypedDict):
    count: int
    pod_minutes: float  # the lost pods' whole time, create to preemption (an upper bound)
    pod_usd: float  # and their whole spend
    lost: list[dict[str, Any]]  # run.json `preemptions`, in order
    cells_by_pod: dict[str, int]  # finished cells per pod run tag, in the order first measured


def cells_by_pod(cells: Iterable[CellRow]) -> dict[str, int]:
    """How many finished cells each pod measured (rows without a pod stamp are not counted)."""
    counts: dict[str, int] = {}
    for cell in cells:
        if isinstance(cell.pod, dict) and cell.pod.get("run_tag"):
            tag = str(cell.pod["run_tag"])
            counts[tag] = counts.get(tag, 0) + 1
    return counts


def lost_pods_line(lost: Sequence[Mapping[str, Any]], by_pod: Mapping[str, int]) -> str:
    """'N preemption(s); the lost pods ran M min for $X …; cells by pod: tag n, …': the words the
    run's report and the matrix report (results/matrix.py) both use."""
    minutes = sum(float(p.get("pod_minutes") or 0) for p in lost)
    usd = sum(float(p.get("pod_usd") or 0) for p in lost)
    pods = ", ".join(f"{tag} {n}" for tag, n in by_pod.items())
    return (f"{len(lost)} preemption(s); the lost pods ran {minutes:.1f} min for ${usd:.4f} "
            f"(their finished cells kept, the cut cell measured again); cells by pod: "
            f"{pods or '—'}")


def compute(ctx: Context) -> Preemptions | None:
    lost = [dict(p) for p in ctx.run.meta.preemptions or []]
    by_pod = cells_by_pod(ctx.run.cells)
    if not lost and len(by_pod) < 2:
        return None
    return Preemptions(count=len(lost),
                       pod_minutes=round(sum(float(p.get("pod_minutes") or 0) for p in lost), 2),
                       pod_usd=round(sum(float(p.get("pod_usd") or 0) for p in lost), 6),
                       lost=lost, cells_by_pod=by_pod)


def render(value: Preemptions | None, rc: RenderContext) -> list[str]:
    if not value:
        return []
    lines = ["## Preemptions (spot)", "", f"- {lost_pods_line(value['lost'], value['cells_by_pod'])}"]
    lines += [f"- {p.get('pod')} lost its bid after {float(p.get('pod_minutes') or 0):.1f} min "
              f"(${float(p.get('pod_usd') or 0):.4f})" for p in value["lost"]]
    return [*lines, ""]


SECTION = Section(key="preemptions", rank=170, compute=compute, report_rank=150, render=render,
                  omit_none=True)

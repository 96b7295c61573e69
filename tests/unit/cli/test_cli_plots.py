"""Plots: the red stamp never lies over a title, titles fit the figure (short model names),
dollar axes read in plain decimals, and a 1-rep run says it has no spread."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from tailpod.results.analysis import analyze
from tailpod.results.plots import (
    plot_acceptance,
    plot_cost,
    plot_speedup,
    plot_throughput,
    short_model,
    usd,
)
from tailpod.results.report import render_run_markdown
from tailpod.results.schema import PodDescription
from tests.helpers.run_builder import build_run

LONG_MODEL = ("/home/someone/.cache/huggingface/hub/models--nvidia--Llama-3.3-70B-Instruct-FP8/"
              "snapshots/0123456789abcdef0123456789abcdef01234567")


def _analysis(reps: int = 1) -> dict[str, Any]:
    run = build_run({"plain": {1: [10.0] * reps, 2: [18.0] * reps},
                     "mtp-k2": {1: [29.6] * reps, 2: [30.0] * reps}},
                    model=LONG_MODEL, acceptance={"mtp-k2": (100, 200, 150)}, price=1.64)
    run.meta.pod = PodDescription(gpu="NVIDIA A100 80GB PCIe", gpu_count=1, price_per_hr=1.64,
                                  emulated=True, machine={"cpu": "AMD EPYC 7B13", "gpus": []})
    return analyze(run)


@pytest.fixture()
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Every figure a plot function saves, kept for inspection after it is written."""
    kept: list[Figure] = []
    original = Figure.savefig

    def savefig(self: Figure, *args: Any, **kwargs: Any) -> None:
        kept.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return kept


def _render(fig: Figure) -> Any:
    """Draw the (closed) figure again, as savefig did, and return the renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _titles(fig: Figure) -> list[Any]:
    out = [ax.title for ax in fig.axes if ax.title.get_text()]
    if getattr(fig, "_suptitle", None) is not None:
        out.append(fig._suptitle)
    return out


def _red_texts(fig: Figure) -> list[Any]:
    return [t for t in fig.texts if t.get_color() == "red" and t.get_rotation() == 0
            and t.get_position()[1] > 0.5]


@pytest.mark.parametrize("plot", [plot_speedup, plot_acceptance, plot_throughput, plot_cost])
def test_the_stamp_is_never_over_a_title_and_titles_fit(plot: Any, figures: list[Figure],
                                                         tmp_path: Path) -> None:
    an = _analysis()
    assert an["hardware"]["stamp"]  # the emulated provider's stamp is drawn across the top
    plot(an, tmp_path / "p.png")
    fig = figures[-1]
    renderer = _render(fig)
    width = fig.bbox.width
    stamps = [t.get_window_extent(renderer) for t in _red_texts(fig)]
    assert stamps
    for title in _titles(fig):
        box = title.get_window_extent(renderer)
        for stamp in stamps:
            assert not box.overlaps(stamp), (title.get_text(), box, stamp)
        assert box.x0 >= 0 and box.x1 <= width, (title.get_text(), box.x0, box.x1, width)
        assert LONG_MODEL not in title.get_text()
    assert any("nvidia/Llama-3.3-70B-Instruct-FP8" in t.get_text() for t in _titles(fig))


def test_dollar_axes_are_plain_decimals(figures: list[Figure], tmp_path: Path) -> None:
    plot_cost(_analysis(), tmp_path / "cost.png")
    fig = figures[-1]
    _render(fig)
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    ticks = [*ax.yaxis.get_major_ticks(), *ax.yaxis.get_minor_ticks()]
    labels = [t.label1.get_text() for t in ticks
              if t.label1.get_text() and low <= t.get_loc() <= high]
    assert len(labels) >= 2, labels  # what the reader sees: labelled ticks inside the axis
    for label in labels:
        assert re.fullmatch(r"\$\d[\d,]*(\.\d+)?", label), labels


def test_usd_formats() -> None:
    assert [usd(v) for v in (0.001, 0.0025, 0.01, 1.2, 15.0)] == [
        "$0.001", "$0.0025", "$0.01", "$1.20", "$15.00"]


def test_short_model_names() -> None:
    assert short_model(LONG_MODEL) == "nvidia/Llama-3.3-70B-Instruct-FP8"
    assert short_model("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert short_model("/data/ckpt/tiny-fp8/") == "tiny-fp8"


def test_one_rep_says_no_spread_in_plots_and_tables(figures: list[Figure],
                                                    tmp_path: Path) -> None:
    an = _analysis(reps=1)
    plot_speedup(an, tmp_path / "s.png")
    labels = [ax.get_ylabel() for ax in figures[-1].axes]
    assert all("no spread (1 rep)" in label for label in labels if label), labels
    md = render_run_markdown(an)
    speedup = md.split("## Speedup over plain", 1)[1].split("## Crossover", 1)[0]
    assert "2.96× (no spread: 1 rep)" in speedup, speedup
    assert "[2.96–2.96]" not in md
    many = _analysis(reps=3)
    plot_speedup(many, tmp_path / "s3.png")
    assert all("widest range over reps" in ax.get_ylabel() for ax in figures[-1].axes
               if ax.get_ylabel())

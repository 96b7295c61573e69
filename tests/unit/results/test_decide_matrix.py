"""The matrix report's cheapest card per load band under the objective, by decide's rule over the
card run directories (results/matrix.py card_decision). Expected costs computed by hand:
USD/Mtok = price / 3600 / tok_s * 1e6 per rep, the median over reps."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tailpod.results.analysis import analyze
from tailpod.results.io import load_run, write_run
from tailpod.results.matrix import build_matrix, render_matrix_markdown
from tests.helpers.run_builder import build_run

H100 = {"plain": {1: [1000, 1000], 2: [1900, 2300], 4: [3000, 3000]}}
A10 = {"plain": {1: [600, 600], 2: [950, 1050], 4: [1000, 1000]}}


def _outcomes(tmp_path: Path) -> list[dict[str, Any]]:
    out = []
    for card, series, price in (("runpod:H100", H100, 2.0), ("vast:A10", A10, 1.0)):
        run_id = card.split(":")[1].lower()
        run_dir = write_run(build_run(series, run_id=run_id, price=price), tmp_path / run_id)
        out.append({"card": card, "status": "done", "run_dir": str(run_dir),
                    "analysis": analyze(load_run(run_dir))})
    return out


def _usd(price: float, tok_s: float) -> float:
    return price / 3600 / tok_s * 1e6


def test_cheapest_card_per_band_follows_decides_rule(tmp_path: Path) -> None:
    dec = build_matrix(_outcomes(tmp_path))["decision"]
    assert dec["objective"] == "cost" and dec["unit"] == "USD/Mtok"
    by_load = {b["load"]: b for b in dec["bands"]}
    # c=1: H100 0.5556 vs A10 0.4630 -> A10.  c=4: H100 0.1852 vs A10 0.2778 -> H100.
    assert by_load[1]["card"] == "vast:A10" and abs(by_load[1]["median"] - _usd(1, 600)) < 1e-9
    assert by_load[4]["card"] == "runpod:H100"
    assert abs(by_load[4]["median"] - _usd(2, 3000)) < 1e-9
    # c=2: H100's median (0.2415+0.2924)/2 = 0.2670 beats A10's (0.2646+0.2924)/2 = 0.2785, but
    # the rep ranges overlap, so the tie goes to the cheaper card.
    two = by_load[2]
    h100_median = (_usd(2, 1900) + _usd(2, 2300)) / 2
    a10_median = (_usd(1, 950) + _usd(1, 1050)) / 2
    assert h100_median < a10_median
    assert two["card"] == "vast:A10" and two["tie_resolved"] is True
    assert two["best_median_card"] == "runpod:H100" and two["tied"] == ["runpod:H100"]
    assert abs(two["median"] - a10_median) < 1e-9


def test_throughput_objective_names_the_fastest_card(tmp_path: Path) -> None:
    dec = build_matrix(_outcomes(tmp_path), objective="throughput")["decision"]
    assert {b["load"]: b["card"] for b in dec["bands"]} == {
        1: "runpod:H100", 2: "runpod:H100", 4: "runpod:H100"}


def test_matrix_report_renders_the_section(tmp_path: Path) -> None:
    text = render_matrix_markdown(build_matrix(_outcomes(tmp_path)))
    assert "## Cheapest card per load band under the cost objective" in text
    section = text.split("## Cheapest card per load band under the cost objective")[1]
    assert f"| c=1 | **vast:A10** | plain | {_usd(1, 600):,.3f} | — |" in section
    assert "| c=2 | **vast:A10** | plain |" in section and "best median: runpod:H100" in section
    assert f"| c=4 | **runpod:H100** | plain | {_usd(2, 3000):,.3f} | — |" in section


def test_no_readable_card_run_means_no_section(tmp_path: Path) -> None:
    outcomes = [{"card": "runpod:H100", "status": "failed", "run_dir": str(tmp_path / "none")}]
    matrix = build_matrix(outcomes)
    assert matrix["decision"] is None
    assert "per load band under" not in render_matrix_markdown(matrix)


def test_goodput_objective_ranks_by_usd_per_slo_token(tmp_path: Path) -> None:
    # The same cards, each cell measured against ttft_ms=500: every H100 token met it, only a
    # third of the A10's did. $/Mtok of those tokens, c=1: H100 2/3600/1000e-6 = 0.5556,
    # A10 1/3600/(600/3)e-6 = 1.3889 -> H100, where the plain cost objective picks the A10.
    slo = {"ttft_ms": 500.0}
    outcomes = []
    for card, series, price, share in (("runpod:H100", H100, 2.0, 1.0),
                                       ("vast:A10", A10, 1.0, 1 / 3)):
        run = build_run(series, run_id=card.split(":")[1].lower(), price=price)
        run.cells = [c.model_copy(update={"slo": slo, "goodput_tok_s": c.output_tok_s * share})
                     for c in run.cells]
        run_dir = write_run(run, tmp_path / run.meta.run_id)
        outcomes.append({"card": card, "status": "done", "run_dir": str(run_dir),
                         "analysis": analyze(load_run(run_dir))})
    dec = build_matrix(outcomes, objective="goodput", slo=slo)["decision"]
    assert dec["objective"] == "goodput" and dec["lower_is_better"] is True
    assert dec["unit"] == "USD/Mtok of tokens within the SLO"
    by_load = {b["load"]: b for b in dec["bands"]}
    assert by_load[1]["card"] == "runpod:H100"
    assert abs(by_load[1]["median"] - _usd(2, 1000)) < 1e-9
    assert by_load[4]["card"] == "runpod:H100"  # 0.1852 vs A10 1/3600/(1000/3)e-6 = 0.8333
    text = render_matrix_markdown(build_matrix(outcomes, objective="goodput", slo=slo))
    assert "## Cheapest card per load band under the goodput objective" in text


def test_matrix_goodput_objective_needs_an_slo_before_anything(tmp_path: Path,
                                                               monkeypatch: Any) -> None:
    from typer.testing import CliRunner

    from tailpod.cli.main import app

    home = tmp_path / "home"
    monkeypatch.setenv("TAILPOD_HOME", str(home))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    for args, says in ((["--objective", "goodput"], "--objective goodput needs --slo"),
                       (["--objective", "speed"], "--objective must be one of")):
        result = CliRunner().invoke(app, ["matrix", "--budget", "5", "--card", "runpod:H100",
                                          *args])
        assert result.exit_code == 2 and says in " ".join(result.output.split()), result.output
    assert not home.exists() or not any(home.rglob("ledger.json"))

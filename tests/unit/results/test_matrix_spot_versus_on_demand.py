"""Is spot worth it for this run: the matrix compares each spot card's $/Mtok, with the measured
preemption overhead added (or a stated assumption of none), against the same card on demand, per
concurrency. Expected values are worked by hand in the comments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tailpod.results.analysis import analyze
from tailpod.results.io import Run
from tailpod.results.matrix import build_matrix, render_matrix_markdown


def _spot_card(make_run: Callable[..., Run], *, spend: float | None,
               preemptions: list[dict[str, Any]]) -> dict[str, Any]:
    # spot at $1/h; plain 1000 tok/s at c=1 and 2000 tok/s at c=4
    analysis = analyze(make_run({"plain": {1: [1000.0], 4: [2000.0]}}, run_id="spot",
                                price=1.0))
    return {"card": "vastai:RTX 4090", "status": "done", "error": None, "spend_usd": spend,
            "proof": "/r/p.json", "analysis": analysis, "run": None, "spot": True,
            "on_demand_per_hr": 2.0, "preemptions": preemptions}


def test_measured_preemption_is_added_to_spot_and_compared_to_on_demand(
        make_run: Callable[..., Run]) -> None:
    # the card spent $3.00 in all, $0.60 of it on the lost pod: spot pays 3.00 / 2.40 = 1.25x
    # what the kept measurements needed. c=1: spot $1/h / (1000 tok/s * 3600 s) * 1e6
    # = $0.277778/Mtok, x1.25 = $0.347222; on demand $2/h: $0.555556. c=4 is half of each.
    card = _spot_card(make_run, spend=3.0, preemptions=[
        {"pod": "tp-a", "pod_minutes": 36.0, "pod_usd": 0.6}])
    rows = build_matrix([card])["spot_vs_on_demand"]
    assert [r["concurrency"] for r in rows] == [1, 4]
    c1, c4 = rows
    assert c1["card"] == "vastai:RTX 4090" and c1["arm"] == "plain"
    assert c1["overhead_factor"] == pytest.approx(1.25)
    assert c1["spot_usd_per_mtok"] == pytest.approx(0.347222, abs=1e-6)
    assert c1["on_demand_usd_per_mtok"] == pytest.approx(0.555556, abs=1e-6)
    assert c1["cheaper"] == "spot"
    assert c1["saving"] == pytest.approx(0.375)  # 1 - 0.347222 / 0.555556
    assert c4["spot_usd_per_mtok"] == pytest.approx(0.173611, abs=1e-6)
    assert c4["on_demand_usd_per_mtok"] == pytest.approx(0.277778, abs=1e-6)
    assert c1["assumption"] is None
    text = render_matrix_markdown(build_matrix([card]))
    assert "## Spot versus on-demand" in text
    assert "| vastai:RTX 4090 | c=1 | plain | $0.347 | $0.556 | spot, 37.5% cheaper |" in text
    assert "1 preemption(s) measured: $0.60 of $3.00 lost, spot cost x1.25" in text


def test_a_dear_preemption_makes_on_demand_the_cheaper_choice(
        make_run: Callable[..., Run]) -> None:
    # spent $3.00, $1.80 lost: x(3.00 / 1.20) = 2.5; c=1 spot 0.277778 * 2.5 = 0.694444 > 0.555556
    card = _spot_card(make_run, spend=3.0, preemptions=[{"pod_usd": 1.2}, {"pod_usd": 0.6}])
    c1 = build_matrix([card])["spot_vs_on_demand"][0]
    assert c1["spot_usd_per_mtok"] == pytest.approx(0.694444, abs=1e-6)
    assert c1["cheaper"] == "on-demand"
    assert c1["saving"] == pytest.approx(-0.25)  # 1 - 0.694444 / 0.555556
    assert "| c=1 | plain | $0.694 | $0.556 | on-demand (spot 25.0% dearer) |" in \
        render_matrix_markdown(build_matrix([card]))


def test_no_preemption_measured_is_a_stated_assumption(make_run: Callable[..., Run]) -> None:
    card = _spot_card(make_run, spend=1.0, preemptions=[])
    c1 = build_matrix([card])["spot_vs_on_demand"][0]
    assert c1["spot_usd_per_mtok"] == pytest.approx(0.277778, abs=1e-6)
    assert c1["assumption"] == "no preemption measured: spot $/Mtok assumes none"
    assert "no preemption measured: spot $/Mtok assumes none" in render_matrix_markdown(
        build_matrix([card]))


def test_a_preemption_without_a_known_spend_voids_the_spot_figure(
        make_run: Callable[..., Run]) -> None:
    card = _spot_card(make_run, spend=None, preemptions=[{"pod_usd": 0.6}])
    c1 = build_matrix([card])["spot_vs_on_demand"][0]
    assert c1["spot_usd_per_mtok"] is None and c1["cheaper"] is None
    assert c1["on_demand_usd_per_mtok"] == pytest.approx(0.555556, abs=1e-6)
    assert "VOID" in render_matrix_markdown(build_matrix([card]))


def test_an_on_demand_card_has_no_comparison(make_run: Callable[..., Run]) -> None:
    card = _spot_card(make_run, spend=1.0, preemptions=[])
    card.pop("spot"), card.pop("on_demand_per_hr")
    matrix = build_matrix([card])
    assert matrix["spot_vs_on_demand"] == []
    assert "Spot versus on-demand" not in render_matrix_markdown(matrix)


def test_cost_matrix_prints_the_comparison_and_refuses_a_matrix_without_spot(
        make_run: Callable[..., Run], tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from tailpod.cli.main import app

    spot = tmp_path / "spot"
    spot.mkdir()
    card = _spot_card(make_run, spend=3.0, preemptions=[{"pod_usd": 0.6}])
    matrix = build_matrix([card])
    (spot / "matrix-report.json").write_text(json.dumps(matrix, default=str))
    res = CliRunner().invoke(app, ["cost", "--matrix", str(spot), "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["spot_vs_on_demand"]
    assert [round(r["spot_usd_per_mtok"], 6) for r in rows] == [0.347222, 0.173611]
    text = CliRunner().invoke(app, ["cost", "--matrix", str(spot)], env={"COLUMNS": "200"})
    assert text.exit_code == 0 and "spot, 37.5% cheaper" in text.output

    plain = tmp_path / "plain"
    plain.mkdir()
    card.pop("spot")
    (plain / "matrix-report.json").write_text(json.dumps(build_matrix([card]), default=str))
    res = CliRunner().invoke(app, ["cost", "--matrix", str(plain)])
    assert res.exit_code == 2 and "no spot card" in res.output
    res = CliRunner().invoke(app, ["cost", "--matrix", str(tmp_path)])
    assert res.exit_code == 2 and "no readable matrix-report.json" in res.output

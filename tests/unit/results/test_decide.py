"""`tailpod decide` (results/decide.py) on constructed sweeps whose answers were worked out by hand:
bands, ties, the crossover it rests on, the admission limit and the deployment."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.decide import render, schedule_support
from tailpod.results.schema import CellRow

# plain climbs with c; the K=2 arm is ahead up to c=4 and behind from c=8; K=4 is never better
# than K=2 outside K=2's rep range at c=1 (181 median vs 180, ranges [179,183] and [178,182]).
SWEEP: dict[str, dict[int, list[float]]] = {
    "plain": {1: [100, 102, 98], 2: [190, 195, 185], 4: [360, 370, 350], 8: [640, 650, 630],
              16: [900, 910, 890]},
    "mtp-k2": {1: [180, 182, 178], 2: [330, 335, 325], 4: [450, 460, 440], 8: [560, 570, 550],
               16: [600, 610, 590]},
    "mtp-k4": {1: [181, 183, 179], 2: [300, 305, 295], 4: [400, 405, 395], 8: [500, 505, 495],
               16: [520, 525, 515]},
}  # fmt: skip


def compute(runs: list[Any], **kw: Any) -> dict[str, Any]:
    """decide.compute with each run's own analysis, as the CLI gives it."""
    return decide.compute(runs, analyses=[analyze(r) for r in runs], **kw)


def _winners(dec: dict[str, Any], pc: str = "*") -> dict[float, str]:
    return {b["load"]: b["arm"] for b in dec["bands"]
            if b["prompt_class"] == pc and b["axis"] == "concurrency"}


def test_known_crossover_gives_two_lanes_at_the_floored_crossover(make_run: Any) -> None:
    dec = compute([make_run(SWEEP)])
    assert _winners(dec) == {1: "mtp-k2", 2: "mtp-k2", 4: "mtp-k2", 8: "plain", 16: "plain"}
    c1 = next(b for b in dec["bands"] if b["load"] == 1 and b["prompt_class"] == "*")
    # K=4 has the higher median at c=1 but its range overlaps K=2's: the smaller K wins the tie
    assert c1["best_median_arm"] == "mtp-k4" and c1["tie_resolved"] and c1["tied"] == ["mtp-k4"]
    # crossover by hand: speedup 450/360 = 1.25 at c=4, 560/640 = 0.875 at c=8;
    # t = 0.25 / 0.375 = 2/3 in log2(c): c = 2 ** (2 + 2/3) = 6.35 -> limit 6
    d = dec["deployment"]
    assert d["kind"] == "lanes"
    assert d["crossover"]["status"] == "crossover"
    assert math.isclose(d["crossover"]["concurrency"], 2 ** (8 / 3), rel_tol=1e-9)
    assert d["admission_limit"] == 6
    spec, plain = d["lanes"]
    assert (spec["arm"], spec["k"], spec["maxconn"]) == ("mtp-k2", 2, 6)
    assert (plain["arm"], plain["k"]) == ("plain", 0)
    # vLLM 0.32.0 takes a batch-size schedule: K=2 up to the limit, 0 above, to the last c measured
    sched = d["schedule"]
    assert sched["supported"] is True
    assert sched["num_speculative_tokens_per_batch_size"] == [[1, 6, 2], [7, 16, 0]]
    assert sched["num_speculative_tokens"] == 2
    json.dumps(dec)  # decision.json is plain JSON
    md = "\n".join(render(dec))
    assert "## Decision" in md and "admits up to 6 requests" in md
    assert "| c=1 | all (pooled) | mtp-k2 | 180.0 | mtp-k4 (best median mtp-k4 181.0) |" in md


def test_one_arm_winning_every_band_is_a_static_deployment(make_run: Any) -> None:
    # the spec arm is ahead at c=1 only inside plain's range ([100, 110] vs [105, 115]): a tie,
    # so plain, the simpler arm, wins every band
    run = make_run({"plain": {1: [100, 105, 110], 4: [400, 410, 420]},
                    "mtp-k2": {1: [105, 110, 115], 4: [300, 305, 310]}})
    dec = compute([run])
    assert _winners(dec) == {1: "plain", 4: "plain"}
    assert dec["deployment"] == {"kind": "static", "arm": "plain", "key": "plain", "k": 0,
                                 "method": None, "reason": "wins every band",
                                 "compared": ["mtp-k2", "plain"]}


def test_plain_below_and_spec_above_fits_no_lane_split_and_is_flagged(make_run: Any) -> None:
    run = make_run({"plain": {1: [200, 201, 199], 2: [300, 301, 299], 4: [300, 301, 299]},
                    "mtp-k2": {1: [100, 101, 99], 2: [200, 201, 199], 4: [500, 501, 499]}})
    dec = compute([run])
    assert _winners(dec) == {1: "plain", 2: "plain", 4: "mtp-k2"}
    d = dec["deployment"]
    assert d["kind"] == "mixed" and d["arm"] == "plain" and d["flag"] == "loses some bands"
    assert any("no single deployment" in w for w in dec["warnings"])


def test_void_arm_never_wins(make_run: Any) -> None:
    run = make_run({"plain": {1: [100, 100]}, "mtp-k2": {1: [900, 900]}},
                   void={"mtp-k2": "gate failed"})
    dec = compute([run])
    assert _winners(dec) == {1: "plain"} and dec["deployment"]["kind"] == "static"


def test_cost_objective_picks_the_cheaper_card_across_a_matrix(make_run: Any) -> None:
    fast = make_run({"plain": {1: [1000, 1000]}}, run_id="h100", price=2.0)
    slow = make_run({"plain": {1: [600, 600]}}, run_id="a10", price=1.0)
    # throughput: 1000 > 600. cost: 2/(3600*1000)*1e6 = 0.5556 vs 1/(3600*600)*1e6 = 0.4630
    assert _winners(compute([fast, slow])) == {1: "h100/plain"}
    dec = compute([fast, slow], objective="cost")
    assert _winners(dec) == {1: "a10/plain"}
    band = dec["bands"][0]
    assert math.isclose(band["median"], 1e6 / 3600 / 600, rel_tol=1e-12)
    assert math.isclose(band["candidates"]["h100/plain"]["median"], 2e6 / 3600 / 1000)


def _open(arm: str, rate: float, rep: int, goodput: float, tok_s: float) -> CellRow:
    data: dict[str, Any] = {
        "run_id": "run-a", "arm": arm, "concurrency": 0, "rep": rep, "prompt_class": "prose",
        "cell": f"{arm}|rate{rate}|r{rep}|prose", "requests": 50, "wall_s": 10.0,
        "output_tokens": int(tok_s * 10), "output_tok_s": tok_s,
        "arrival": {"process": "poisson", "rate": rate, "burstiness": 1.0, "seed": rep,
                    "requests": 50},
        "slo": {"ttft_ms": 500.0}, "slo_percentile": 90.0, "goodput_tok_s": goodput,
        "slo_attainment": 0.95,  # every arm met the SLO: goodput alone decides
    }  # fmt: skip
    return CellRow(**data)


def test_goodput_objective_ranks_open_loop_rates_by_recorded_goodput(make_run: Any) -> None:
    run = make_run({"plain": {1: [100, 100]}, "mtp-k2": {1: [150, 150]}})
    # at rate 2 the spec arm has more raw throughput but less goodput than plain
    for rep in (0, 1):
        run.cells.append(_open("plain", 2.0, rep, 300.0 + rep, 320.0))
        run.cells.append(_open("mtp-k2", 2.0, rep, 200.0 + rep, 400.0))
    for rep in (0, 1):  # an all-at-once cell: rate inf, written as "inf" (decision.json is JSON)
        run.cells.append(_open("plain", math.inf, rep, 100.0, 500.0))
        run.cells[-1].arrival["rate"] = "inf"  # type: ignore[index]
    dec = compute([run], objective="goodput")
    json.dumps(dec, allow_nan=False)
    good = {b["load"]: b["arm"] for b in dec["bands"] if b["axis"] == "rate"}
    tput = {b["load"]: b["arm"] for b in compute([run])["bands"] if b["axis"] == "rate"}
    assert good == {2.0: "plain", "inf": "plain"} and tput[2.0] == "mtp-k2"


def test_a_deploy_arm_is_compared_not_chosen(make_run: Any) -> None:
    run = make_run({"plain": {1: [100, 101, 99], 8: [640, 650, 630]},
                    "mtp-k2": {1: [180, 182, 178], 8: [560, 570, 550]},
                    "deploy-lanes": {1: [170, 171, 169], 8: [645, 655, 635]}})
    dec = compute([run])
    assert _winners(dec) == {1: "mtp-k2", 8: "plain"}
    gaps = {g["load"]: g for g in dec["deployment_gap"] if g["prompt_class"] == "*"}
    assert math.isclose(gaps[1]["gap"], 170 / 180 - 1) and gaps[1]["loses"] is True
    assert gaps[8]["loses"] is False  # 645 vs 640, ranges overlap
    assert "LOSES to mtp-k2" in "\n".join(render(dec))


@pytest.mark.parametrize(("engine", "version", "ok"), [
    ("vllm", "0.32.0", True), ("vllm", "0.33.1", True), ("vllm", "0.31.2", False),
    ("vllm", None, False), ("sglang", "0.5.9", False), ("llamacpp", "b4000", False)])
def test_schedule_support_by_engine_version(engine: str, version: str | None, ok: bool) -> None:
    assert schedule_support(engine, version)["supported"] is ok


def test_old_vllm_gets_lanes_without_a_schedule(make_run: Any) -> None:
    dec = compute([make_run(SWEEP, engine_version="0.10.1")])
    assert dec["deployment"]["kind"] == "lanes"
    assert dec["deployment"]["schedule"]["supported"] is False


def test_decide_cli_writes_decision_json_and_report_shows_it(tmp_path: Any,
                                                             tailpod_home: Any) -> None:
    import typer
    from typer.testing import CliRunner

    from tailpod.cli import decide as decide_cli
    from tailpod.results.io import write_run
    from tailpod.results.report import write_report
    from tests.helpers.run_builder import build_run

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    decide_cli.register(app)
    run_dir = write_run(build_run(SWEEP), tmp_path / "sweep")
    res = CliRunner().invoke(app, ["decide", str(run_dir), "--json"])
    assert res.exit_code == 0, res.output
    saved = json.loads((run_dir / "decision.json").read_text())
    assert json.loads(res.stdout)["deployment"]["admission_limit"] == 6
    assert saved["deployment"]["lanes"][0]["maxconn"] == 6
    bad = CliRunner().invoke(app, ["decide", str(run_dir), "--objective", "latency"])
    assert bad.exit_code != 0 and "--objective must be one of" in bad.output
    report = write_report([run_dir]).read_text()
    assert "## Decision" in report and "admits up to 6 requests in flight" in report


def test_emitted_schedule_passes_vllms_own_validator(make_run: Any) -> None:
    import os
    import subprocess

    py = os.environ.get("TAILPOD_ENGINE_PYTHON")
    if not py or not os.path.exists(py):
        pytest.skip("no engine python (TAILPOD_ENGINE_PYTHON) to import vLLM from")
    sched = compute([make_run(SWEEP)])["deployment"]["schedule"]
    code = ("import json,sys\n"
            "from vllm.v1.spec_decode.dynamic.utils import "
            "validate_and_normalize_dynamic_sd_schedule as v, build_dynamic_sd_schedule_lookup as b\n"
            "s=json.loads(sys.argv[1]); v(s); t=b(s, 32, 2); print(json.dumps(t[1:]))")
    out = subprocess.run([py, "-c", code, json.dumps(sched["num_speculative_tokens_per_batch_size"])],
                         capture_output=True, text=True, timeout=120)
    if "No module named" in out.stderr:
        pytest.skip("vLLM without the dynamic speculative decoding module")
    assert out.returncode == 0, out.stderr[-2000:]
    # batch 1-6 -> K=2, 7-16 -> 0, and vLLM carries the last K (0) on to its max batch
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [2] * 6 + [0] * 26

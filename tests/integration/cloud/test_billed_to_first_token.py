"""Billed time from the create call to the first measured token (issue 29): the sweep completes
the pod's cold_start record (provision/volumes.py to_first_token) with the first token, placed on
this machine's clock, and the report says it. Expected figures are worked by hand here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailpod.provision.volumes import to_first_token
from tailpod.results.provider_facts import start_billed_line
from tests.helpers.probe_rows import request_row

COLD = {"create_at": 1000.0, "ready_at": 1060.0, "billed_s_to_ready": 60.0,
        "usd_to_ready": 0.05, "price_per_hr": 3.0, "compile_cache_hit": True, "volume": "tp-vol"}


def _req(sent_at: float, ttft: float, e2e: float, ok: bool = True) -> dict[str, object]:
    # t_start: a request row's send time on the pod's clock (closed and open loop alike)
    return {"kind": "request", "ok": ok, "t_start": sent_at, "ttft_s": ttft, "e2e_s": e2e}


def test_the_first_token_is_placed_on_this_machines_clock_and_priced() -> None:
    # The pod's clock runs 500 s ahead; its first token came at 5500.2 and its cell ended at
    # 5503.0 (pod clock). The rows arrived here at 1090.0: the first token is placed at
    # 1090.0 - (5503.0 - 5500.2) = 1087.2, 87.2 s after the create, billed at $3/h.
    rows = [_req(5500.0, 0.2, 3.0), _req(5500.5, 0.4, 2.0), _req(5499.0, 0.1, 9.0, ok=False),
            {"kind": "cell"}]
    got = to_first_token(COLD, rows, received_at=1090.0)
    assert got is not None
    assert got["first_token_at"] == pytest.approx(1087.2)
    assert got["billed_s_to_first_token"] == pytest.approx(87.2)
    assert got["usd_to_first_token"] == pytest.approx(87.2 * 3.0 / 3600.0, abs=1e-6)
    assert got["billed_s_to_ready"] == 60.0  # the record it completes is kept


def test_no_token_no_figure_and_an_unknown_price_is_no_dollar_figure() -> None:
    assert to_first_token(COLD, [{"kind": "cell"}, _req(1.0, 0.1, 1.0, ok=False)], 2000.0) is None
    assert to_first_token({"price_per_hr": 1.0}, [_req(1.0, 0.1, 1.0)], 2000.0) is None
    got = to_first_token(dict(COLD, price_per_hr=None), [_req(1.0, 0.1, 1.0)], 1100.0)
    assert got is not None and got["usd_to_first_token"] is None


def test_the_report_line_says_what_the_start_billed() -> None:
    done = to_first_token(COLD, [_req(5500.0, 0.2, 3.0)], received_at=1090.0)
    assert done is not None
    assert start_billed_line(done) == ("60 s to serving, 87 s to the first measured token "
                                       "($0.0727); compile cache hit; volume tp-vol")
    assert start_billed_line({"compile_cache_hit": None}) == (
        "unknown to serving, unknown to the first measured token; compile cache: unknown")


def test_the_sweep_completes_run_jsons_cold_start_once(tmp_path: Path) -> None:
    import time

    from tailpod.engines.base import EngineConfig
    from tailpod.measure.plan import SweepPlan, spec_arms
    from tailpod.measure.sweep import RunContext, RunDirectory, run_sweep
    from tests.unit.measure.test_max_rate import RateHost

    class TokenHost(RateHost):
        """Each cell's requests: sent on a pod clock 500 s ahead, first token 0.2 s after."""

        def run_cells(self, arm, cells, plan, run_id):  # type: ignore[no-untyped-def]
            rows = super().run_cells(arm, cells, plan, run_id)
            pod_now = time.time() + 500.0
            return [request_row(ok=True, t_start=pod_now - 1.0, ttft_s=0.2, e2e_s=1.0,
                                arm=arm.label, cell=c.cell_id, index=0)
                    for c in cells] + rows

    created = time.time() - 30.0  # the create call, 30 s ago on this machine's clock
    plan = SweepPlan(arms=spec_arms(EngineConfig(engine="vllm", model="m"), [0], "mtp", None),
                     reps=2, request_rates=[2.0, 4.0])
    run_dir = RunDirectory(tmp_path / "run")
    before = time.time()
    run = run_sweep(plan, run_dir, TokenHost(), RunContext(
        run_id="r", provider="runpod", model="m", engine="vllm",
        cold_start=dict(COLD, create_at=created)), log=lambda *_: None)
    after = time.time()
    cold = run["cold_start"]
    # the first cell's rows arrived between `before` and `after`; the pod spent 0.8 s after
    # its first token, so that token is placed 0.8 s before their arrival
    ms = 0.01  # the figures are rounded to the millisecond
    assert before - 0.8 - created - ms <= cold["billed_s_to_first_token"] <= after - 0.8 - created + ms
    first_at = cold["first_token_at"]
    assert before - 0.8 - ms <= first_at <= after - 0.8 + ms
    assert cold["billed_s_to_ready"] == 60.0 and cold["volume"] == "tp-vol"
    # later cells do not move it
    saved = run_dir.load()
    assert saved is not None and saved["cold_start"]["first_token_at"] == first_at

"""`benchmark --trace FILE [--trace-speed X] [--trace-format tailpod|mooncake]`: the file is
checked before any pod wait, copied beside the agent once, and replayed by one cell per arm, rep
and class (measure/plan.py, measure/hosts.py); the SLO section reports it (results/slo.py)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent_client.driver import PodAgent, SubprocessTransport
from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError
from tailpod.measure.hosts import AgentSweepHost, probe_cells
from tailpod.measure.plan import Cell, SweepPlan, schedule, spec_arms, trace_spec
from tailpod.results.schema import CellRow
from tailpod.results.slo import compute, render
from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer

MOONCAKE = [
    {"timestamp": 5000, "input_length": 40, "output_length": 4, "hash_ids": [7]},
    {"timestamp": 5100, "input_length": 8, "output_length": 2, "hash_ids": [7, 8]},
    {"timestamp": 5300, "input_length": 20, "output_length": 6, "hash_ids": []},
]


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_trace_spec_reads_with_the_agents_rules(tmp_path: Path) -> None:
    f = _write(tmp_path / "m.jsonl", MOONCAKE)
    spec = trace_spec(f, "mooncake", 2.0)
    digest = hashlib.sha256(f.read_bytes()).hexdigest()[:16]
    assert spec["name"] == f"trace-{digest}.jsonl" and spec["requests"] == 3
    assert spec["span_s"] == pytest.approx(0.3 / 2)
    assert spec["format"] == "mooncake" and spec["speed"] == 2.0


@pytest.mark.parametrize("rows,fmt,speed", [
    (["not json"], "tailpod", 1.0),
    ([{"kind": "cell"}], "tailpod", 1.0),  # no request in it
    (MOONCAKE, "tailpod", 1.0),  # a Mooncake file read as tailpod has no t_start
    (MOONCAKE, "mooncake", 0.0),
    (MOONCAKE, "csv", 1.0),
])
def test_bad_traces_are_config_errors(tmp_path: Path, rows: list[Any], fmt: str,
                                      speed: float) -> None:
    f = _write(tmp_path / "t.jsonl", rows)
    with pytest.raises(ConfigError) as exc:
        trace_spec(f, fmt, speed)
    assert exc.value.exit_code == 2
    with pytest.raises(ConfigError):
        trace_spec(tmp_path / "missing.jsonl", "tailpod", 1.0)


def test_cli_refuses_a_bad_trace_before_the_ledger(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    bad = _write(tmp_path / "bad.jsonl", ["{"])
    result = CliRunner().invoke(app, ["benchmark", "--trace", str(bad)])
    assert result.exit_code == 2
    # rich folds a long temp path mid-word at the terminal width: compare without whitespace
    assert "bad.jsonl:1:notvalidJSON" in "".join(result.output.split())
    good = _write(tmp_path / "m.jsonl", MOONCAKE)
    result = CliRunner().invoke(app, ["benchmark", "--trace", str(good), "--request-rate", "1"])
    assert result.exit_code == 2 and "--trace" in result.output
    result = CliRunner().invoke(app, ["benchmark", "--trace-speed", "2"])
    assert result.exit_code == 2 and "need --trace" in " ".join(result.output.split())


def test_trace_cells_carry_the_trace_arrival(tmp_path: Path) -> None:
    f = _write(tmp_path / "m.jsonl", MOONCAKE)
    arms = spec_arms(EngineConfig(engine="vllm", model="m"), [0], "mtp", None)
    plan = SweepPlan(arms=arms, reps=2, prompt_classes=["prose", "code"],
                     trace=trace_spec(f, "mooncake", 1.5))
    cells = [s for s in schedule(plan) if isinstance(s, Cell)]
    assert [c.cell_id for c in cells] == ["plain|trace|r0|prose", "plain|trace|r0|code",
                                          "plain|trace|r1|prose", "plain|trace|r1|code"]
    sent = probe_cells(arms[0], cells[:1], "cold", plan, "/pod/state/trace-x.jsonl")
    assert sent == [{"arm": "plain", "rep": 0, "prompt_class": "prose", "cache": "cold",
                     "cell": "plain|trace|r0|prose", "concurrency": None,
                     "arrival": {"process": "trace",
                                 "trace": {"path": "/pod/state/trace-x.jsonl",
                                           "format": "mooncake", "speed": 1.5}}}]
    assert plan.to_json()["trace"]["requests"] == 3


class _Host(AgentSweepHost):
    def __init__(self, measurer: PodAgent, url: str) -> None:  # no ledger: cells only
        self.measurer, self.cache, self.progress, self._url = measurer, "cold", None, url

    @property
    def base_url(self) -> str:
        return self._url


def run_beside_a_local_agent(plan: SweepPlan, state: Path,
                             config: SyntheticConfig) -> list[dict[str, Any]]:
    """Every cell of `plan`'s first arm, run by an agent started here as a local pod's is (its
    state under `state`) against a synthetic server of `config`: the rows the agent answers."""
    with SyntheticServer(config) as server:
        host = _Host(PodAgent(SubprocessTransport(state)), server.base_url)
        cells = [s for s in schedule(plan) if isinstance(s, Cell)]
        return host.run_cells(plan.arms[0], cells, plan, "rid")


def test_a_trace_cell_replays_beside_the_agent(tmp_path: Path) -> None:
    f = _write(tmp_path / "m.jsonl", MOONCAKE)
    arms = spec_arms(EngineConfig(engine="vllm", model="m"), [0], "mtp", None)
    plan = SweepPlan(arms=arms, reps=1, trace=trace_spec(f, "mooncake", 2.0), max_tokens=99)
    state = tmp_path / "agent-state"
    rows = run_beside_a_local_agent(plan, state, SyntheticConfig(rate=4000.0, ttft_s=0.002))
    copied = state / plan.trace["name"]  # type: ignore[index]
    assert copied.read_bytes() == f.read_bytes()
    reqs = sorted((r for r in rows if r["kind"] == "request"), key=lambda r: r["index"])
    cell = next(r for r in rows if r["kind"] == "cell")
    assert len(reqs) == 3 and all(r["ok"] for r in reqs)
    assert [r["completion_tokens"] for r in reqs] == [4, 2, 6]
    # at speed 2: offsets 0, 50, 150 ms
    t0 = reqs[0]["scheduled_at"]
    for r, want in zip(reqs, (0.0, 0.05, 0.15), strict=True):
        assert r["scheduled_at"] - t0 == pytest.approx(want, abs=2e-3)
        assert r["sent_at"] >= r["scheduled_at"]
    assert cell["cell"] == "plain|trace|r0|prose" and cell["arrival"]["process"] == "trace"
    assert cell["offered_rate_rps"] == pytest.approx(2 / 0.15)
    # the rows read back through the results schema, and the SLO section finds the replay
    from tailpod.results.io import parse_rows

    parsed, warnings = parse_rows([json.dumps(r) for r in rows])
    assert not warnings

    class _Run:
        cells = [r for r in parsed if isinstance(r, CellRow)]

        class meta:  # noqa: N801
            max_rate_search = None

            class pod:  # noqa: N801
                price_per_hr = None

    section = compute(_Run())  # type: ignore[arg-type]
    assert section is not None and section["trace"][0]["arm"] == "plain"
    assert section["trace"][0]["offered_rate_rps"] == pytest.approx(2 / 0.15)


def _trace_cell(arm: str, rep: int, attainment: float) -> CellRow:
    return CellRow(**{
        "run_id": "r", "arm": arm, "concurrency": 0, "rep": rep, "prompt_class": "prose",
        "cell": f"{arm}|trace|r{rep}|prose", "requests": 976, "wall_s": 100.0,
        "output_tokens": 10000, "output_tok_s": 100.0,
        "arrival": {"process": "trace", "rate": None, "trace": {
            "path": "/p/trace.jsonl", "format": "tailpod", "speed": 1.0}},
        "offered_rate_rps": 9.75, "achieved_rate_rps": 9.7, "slo": {"ttft_ms": 500.0},
        "slo_percentile": 90.0, "slo_attainment": attainment, "goodput_rps": attainment * 9.7,
        "goodput_tok_s": attainment * 100.0, "ttft_sched_p90_s": 0.3,
        "schedule_lag_max_s": 0.002})


def test_slo_section_reports_the_trace_replay() -> None:
    class _Run:
        cells = [_trace_cell("plain", 0, 0.95), _trace_cell("plain", 1, 0.85),
                 _trace_cell("plain", 2, 0.91), _trace_cell("mtp-k2", 0, 0.5)]

        class meta:  # noqa: N801
            max_rate_search = None

            class pod:  # noqa: N801
                price_per_hr = None

    section = compute(_Run())  # type: ignore[arg-type]
    assert section is not None and section["points"] == []
    by_arm = {p["arm"]: p for p in section["trace"]}
    assert by_arm["plain"]["reps"] == 3 and by_arm["plain"]["slo_attainment"] == 0.91
    assert by_arm["plain"]["slo_met"] is True and by_arm["mtp-k2"]["slo_met"] is False
    md = "\n".join(render(section))
    assert "### Trace replay" in md
    assert "| plain | tailpod | 1 | 3 | 9.75 | 9.70 | 91.0% | 8.83 | 91.0 | 300 | 2.0 | met |" in md

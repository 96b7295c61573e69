"""Schema: the agreed v1 shape validates, round-trips, exports, and v0 migrates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tailpod.errors import TailpodError
from tailpod.results.io import load_run, parse_rows, write_run
from tailpod.results.migrate import migrate_row, migrate_run_json
from tailpod.results.schema import CellRow, RequestRow, RunMeta, export_json_schema
from tests import paths
from tests.unit.results.conftest import build_run

REPO = paths.REPO

# Every field of results format v1 (docs/results.md), spelled as the probe and sweep runner write them.
RUN_V1 = {
    "schema_version": 1,
    "run_id": "r1",
    "tailpod_version": "0.1.0",
    "created_at": "2026-11-29T10:00:00Z",
    "finished_at": None,
    "provider": "runpod",
    "pod": {"gpu": "H200", "gpu_count": 1, "price_per_hr": 3.59, "machine": {"cpu": "x"}},
    "measured_from": "pod",
    "image": {"ref": "vllm/vllm-openai:v0.32.0", "digest": "sha256:1"},
    "model": "org/m",
    "engine": {"name": "vllm", "version": "0.32.0"},
    "plan": {
        "arms": ["plain", "mtp-k2"],
        "concurrency": [1, 2],
        "reps": 2,
        "max_tokens": 256,
        "prompt_classes": ["prose"],
        "interleave_arms": True,
    },
    "arms": [
        {
            "label": "plain",
            "engine_config": {"engine": "vllm", "model": "org/m", "spec": {"k": 0}},
            "argv": ["vllm", "serve"],
            "startup": {
                "engine": "vllm",
                "facts": {"kv_tokens": 1000},
                "lines": ["GPU KV cache size: 1,000 tokens"],
            },
            "gate": None,
            "void": False,
            "void_reason": None,
            "restart_s": 31.5,
        },
        {
            "label": "mtp-k2",
            "engine_config": {
                "engine": "vllm",
                "model": "org/m",
                "spec": {"k": 2, "method": "mtp", "draft_model": None},
            },
            "argv": ["vllm", "serve"],
            "startup": {"engine": "vllm", "facts": {}, "lines": []},
            "gate": {"status": "pass", "method": "token_ids", "first_mismatch": None, "prompts": 6},
            "void": False,
            "void_reason": None,
            "restart_s": None,
        },
    ],
    "notes": ["a note"],
}
REQUEST_V1 = {
    "kind": "request",
    "schema_version": 1,
    "run_id": "r1",
    "arm": "plain",
    "concurrency": 1,
    "rep": 0,
    "prompt_class": "prose",
    "cell": "plain|c1|r0|prose",
    "index": 0,
    "ok": True,
    "error": None,
    "cache": "cold",
    "prompt_tokens": 30,
    "completion_tokens": 256,
    "ttft_s": 0.05,
    "e2e_s": 2.6,
    "decode_tok_s": 100.0,
    "tpot_s": 0.01,
    "chunks": 256,
    "chunk_gap_p50_s": 0.01,
    "chunk_gap_max_s": 0.03,
    "t_start": 1764410400.0,
    "measured_from": "pod",
}
CELL_V1 = {
    "kind": "cell",
    "schema_version": 1,
    "run_id": "r1",
    "arm": "mtp-k2",
    "concurrency": 1,
    "rep": 0,
    "prompt_class": "prose",
    "cell": "mtp-k2|c1|r0|prose",
    "requests": 4,
    "failed": 0,
    "wall_s": 10.0,
    "output_tokens": 1024,
    "output_tok_s": 102.4,
    "ttft_p50_s": 0.05,
    "ttft_p90_s": 0.06,
    "ttft_p99_s": 0.07,
    "e2e_p50_s": 2.5,
    "e2e_p90_s": 2.6,
    "e2e_p99_s": 2.7,
    "decode_tok_s_p50": 103.0,
    "tpot_p50_s": 0.0097,
    "client_cpu_s": 0.4,
    "loop_lag_max_s": 0.002,
    "client_bound": False,
    "acceptance": {
        "drafts": 400,
        "draft_tokens": 800,
        "accepted": 520,
        "acceptance_length": 2.3,
        "acceptance_rate": 0.65,
        "per_position": [0.8, 0.5],
        "source": "vllm_metrics",
    },
    "flags": [],
    "void": False,
    "measured_from": "pod",
}


def _write_dir(path: Path, run: dict, rows: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "run.json").write_text(json.dumps(run))
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_agreed_v1_shape_loads(tmp_path: Path) -> None:
    run = load_run(_write_dir(tmp_path / "r1", RUN_V1, [REQUEST_V1, CELL_V1]))
    assert run.meta.pod.price_per_hr == 3.59 and run.migrated_from is None
    assert [a.k for a in run.meta.arms] == [0, 2]
    assert run.meta.arms[1].method == "mtp"
    assert isinstance(run.requests[0], RequestRow) and isinstance(run.cells[0], CellRow)
    assert run.cells[0].acceptance is not None and run.cells[0].acceptance.accepted == 520


def test_round_trip_is_stable_and_keeps_the_declared_sparse_fields(tmp_path: Path) -> None:
    sparse_run = RUN_V1 | {"run_tag": "tp-7"}
    sparse_cell = CELL_V1 | {"goodput_tok_s": 0.93}
    first = load_run(_write_dir(tmp_path / "a", sparse_run, [REQUEST_V1, sparse_cell]))
    write_run(first, tmp_path / "b")
    second = load_run(tmp_path / "b")
    assert second.meta == first.meta and second.cells == first.cells
    assert second.requests == first.requests
    written = json.loads((tmp_path / "b" / "run.json").read_text())
    assert written["run_tag"] == "tp-7" and "fingerprint" not in written  # unset: no key
    assert second.cells[0].model_dump()["goodput_tok_s"] == 0.93
    assert "goodput_rps" not in second.cells[0].model_dump()
    write_run(second, tmp_path / "c")
    assert (tmp_path / "b" / "run.json").read_text() == (tmp_path / "c" / "run.json").read_text()
    assert (tmp_path / "b" / "rows.jsonl").read_text() == (
        tmp_path / "c" / "rows.jsonl"
    ).read_text()


def test_constructed_run_round_trips(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [10.0, 11.0]}}, ttft={"plain": {"cold": [0.2]}})
    write_run(run, tmp_path / "x")
    back = load_run(tmp_path / "x")
    assert back.meta == run.meta and back.cells == run.cells and back.requests == run.requests


def test_exported_json_schema_matches_docs() -> None:
    on_disk = json.loads((REPO / "docs" / "results-schema.json").read_text())
    assert on_disk == export_json_schema(), (
        "regenerate: python -m tailpod.results.schema > docs/results-schema.json"
    )
    assert {"RunMeta", "RequestRow", "CellRow"} <= set(on_disk["$defs"])


def test_bad_rows_name_file_and_line(tmp_path: Path) -> None:
    bad = CELL_V1 | {"wall_s": "soon"}
    with pytest.raises(TailpodError, match=r"rows.jsonl:2: cell.wall_s"):
        load_run(_write_dir(tmp_path / "r", RUN_V1, [REQUEST_V1, bad]))
    with pytest.raises(TailpodError, match=":1: not valid JSON"):
        parse_rows(["{torn", json.dumps(CELL_V1)])


def test_torn_last_line_is_skipped_with_a_warning() -> None:
    rows, warnings = parse_rows([json.dumps(CELL_V1), '{"kind": "cell", "run_'])
    assert len(rows) == 1 and warnings == ["rows.jsonl:2: torn last line skipped"]


def test_bad_run_json_and_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(TailpodError, match="no run.json"):
        load_run(tmp_path)
    broken = RUN_V1 | {"measured_from": "laptop"}
    with pytest.raises(TailpodError, match="measured_from"):
        load_run(_write_dir(tmp_path / "b", broken, []))
    with pytest.raises(ValidationError, match="created_at"):
        RunMeta.model_validate(RUN_V1 | {"created_at": "yesterday"})


def test_newer_schema_version_is_refused() -> None:
    with pytest.raises(TailpodError, match="schema_version 2"):
        migrate_run_json(RUN_V1 | {"schema_version": 2})


# --- v0 (the pre-agreement draft shape documented in docs/results.md) -----------------------------

RUN_V0 = {
    "run_id": "old",
    "created_at": "2026-10-01T12:00:00",
    "provider": "runpod",
    "gpu": "A100",
    "price_usd_hr": 1.19,
    "off_pod": True,
    "image": "vllm/vllm-openai:v0.30",
    "model": "org/m",
    "engine": "vllm",
    "engine_version": "0.30.0",
    "concurrency": [1, 4],
    "reps": 3,
    "max_tokens": 128,
    "arms": [
        {
            "label": "plain",
            "k": 0,
            "config": {"engine": "vllm", "model": "org/m"},
            "startup_lines": ["GPU KV cache size: 9 tokens"],
            "facts": {"kv_tokens": 9},
        },
        {
            "label": "mtp-k2",
            "k": 2,
            "method": "mtp",
            "config": {"engine": "vllm", "model": "org/m"},
            "gate_passed": False,
        },
    ],
}
CELL_V0 = {
    "type": "cell",
    "run_id": "old",
    "arm": "mtp-k2",
    "concurrency": 4,
    "rep": 1,
    "requests": 8,
    "failed": 1,
    "wall_s": 20.0,
    "output_tokens": 2000,
    "tok_s": 100.0,
    "e2e_p50_s": 3.0,
    "accept_len": 2.5,
    "accept_rate": 0.75,
    "drafts": 100,
    "draft_tokens": 200,
    "accepted": 150,
    "off_pod": True,
}
REQUEST_V0 = {
    "type": "request",
    "run_id": "old",
    "arm": "plain",
    "concurrency": 1,
    "index": 3,
    "ok": True,
    "completion_tokens": 128,
    "ttft_s": 0.1,
    "e2e_s": 1.4,
    "t_start": 5.0,
}


def test_v0_run_json_migrates_to_v1() -> None:
    new = migrate_run_json(RUN_V0)
    meta = RunMeta.model_validate(new)
    assert meta.schema_version == 1
    assert meta.pod.price_per_hr == 1.19 and meta.pod.gpu == "A100"
    assert meta.measured_from == "off-pod"
    assert meta.image.ref == "vllm/vllm-openai:v0.30" and meta.image.digest is None
    assert meta.engine.name == "vllm" and meta.engine.version == "0.30.0"
    assert meta.plan.concurrency == [1, 4] and meta.plan.prompt_classes == ["default"]
    plain, spec = meta.arms
    assert plain.startup is not None and plain.startup.lines == ["GPU KV cache size: 9 tokens"]
    assert plain.facts == {"kv_tokens": 9} and plain.k == 0
    assert spec.k == 2 and spec.method == "mtp" and spec.is_void and spec.gate is not None
    assert spec.gate.status == "fail"
    assert "migrated from schema v0" in meta.notes
    assert "schema_version" not in RUN_V0  # the input is not mutated


def test_v0_rows_migrate_to_v1() -> None:
    cell = CellRow.model_validate(migrate_row(CELL_V0))
    assert cell.output_tok_s == 100.0 and cell.measured_from == "off-pod"
    assert cell.cell == "mtp-k2|c4|r1|default"
    assert cell.acceptance is not None and cell.acceptance.acceptance_length == 2.5
    assert cell.acceptance.drafts == 100
    req = RequestRow.model_validate(migrate_row(REQUEST_V0))
    assert req.rep == 0 and req.e2e_s == 1.4 and req.measured_from == "pod"


def test_v0_run_dir_loads_and_analyses(tmp_path: Path) -> None:
    from tailpod.results.analysis import analyze

    run = load_run(_write_dir(tmp_path / "old", RUN_V0, [REQUEST_V0, CELL_V0]))
    assert run.migrated_from == 0 and run.off_pod
    an = analyze(run)
    assert any("schema v0" in w for w in an["warnings"])
    assert an["stamp"] == "DO NOT QUOTE AGGREGATE"
    assert an["arms"][1]["void"] is True


def test_probe_and_sweep_extras_load(tmp_path: Path) -> None:
    """Fields the probe/sweep write (run_tag, arm_configs, starts, gate detail, request flags,
    cell cache) are declared, accepted and kept."""
    run = RUN_V1 | {"run_tag": "tp-1", "gate_reference": {"token_ids": [[1]]}}
    run["plan"] = RUN_V1["plan"] | {"arm_configs": {}, "requests_per_cell": None, "extend_k": True}
    run["arms"] = [
        RUN_V1["arms"][0] | {"starts": [{"at": "x", "startup_s": 1.0}]},
        RUN_V1["arms"][1]
        | {
            "gate": {
                "status": "skipped",
                "method": None,
                "prompts": 0,
                "first_mismatch": None,
                "detail": "no plain arm",
            }
        },
    ]
    warm_cell = CELL_V1 | {"cache": "warm", "cell": "mtp-k2|c1|r0|prose|warm", "flags": ["off_pod"]}
    loaded = load_run(
        _write_dir(tmp_path / "p", run, [REQUEST_V1 | {"flags": ["no_usage"]}, CELL_V1, warm_cell])
    )
    assert [c.cache for c in loaded.cells] == ["cold", "warm"]
    assert loaded.meta.arms[1].gate is not None and loaded.meta.arms[1].gate.status == "skipped"
    assert loaded.meta.model_dump()["run_tag"] == "tp-1"


def test_keys_the_format_does_not_declare_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TailpodError, match="unknown key 'sweep_seed'"):
        load_run(_write_dir(tmp_path / "a", RUN_V1 | {"sweep_seed": 7}, [CELL_V1]))
    with pytest.raises(TailpodError, match=r"rows.jsonl:1: unknown key 'cell.gpu_util_p50'"):
        load_run(_write_dir(tmp_path / "b", RUN_V1, [CELL_V1 | {"gpu_util_p50": 0.93}]))

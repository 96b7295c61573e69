"""probe.py travels alone to a bare pod: stdlib only, old Pythons, built-in prompts."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tailpod.probes import probe
from tailpod.sandbox.synthetic_server import SyntheticServer

REPO = Path(__file__).resolve().parents[2]
PROBE_PATH = REPO / "tailpod" / "probes" / "probe.py"
PROMPTS_DIR = REPO / "tailpod" / "probes" / "prompts"


def _imported_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in probe.py"
            assert node.module is not None
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
            raise AssertionError("dynamic import in probe.py")
    return names


def test_probe_imports_only_the_standard_library() -> None:
    modules = _imported_modules(PROBE_PATH.read_text())
    assert modules, "found no imports at all: the check is broken"
    not_stdlib = sorted(m for m in modules
                        if m not in sys.stdlib_module_names and m != "__future__")
    assert not_stdlib == []


def test_probe_parses_as_python_3_8() -> None:
    ast.parse(PROBE_PATH.read_text(), feature_version=(3, 8))


def test_builtin_prompt_classes_equal_the_shipped_json() -> None:
    shipped = {p.stem: json.loads(p.read_text()) for p in sorted(PROMPTS_DIR.glob("*.json"))}
    assert set(shipped) == {"prose", "code", "structured"}
    assert shipped == probe.BUILTIN_PROMPT_CLASSES
    for data in shipped.values():
        assert data["prompts"] and all(p["messages"][0]["role"] == "user"
                                       for p in data["prompts"])
    schema = shipped["structured"]["response_format"]
    assert schema["type"] == "json_schema" and "schema" in schema["json_schema"]


def _copy_alone(tmp_path: Path) -> Path:
    alone = tmp_path / "pod"
    alone.mkdir()
    shutil.copy(PROBE_PATH, alone / "probe.py")
    return alone / "probe.py"


def test_copied_alone_runs_with_builtin_prompts(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    server = synthetic(spec_k=2, tokens_per_chunk=(2,))
    script = _copy_alone(tmp_path)
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run(
        [sys.executable, "-I", str(script), "run", "--base-url", server.base_url,
         "--arm", "solo", "--requests-per-cell", "2", "--max-tokens", "9", "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "built-in prompt classes" in proc.stderr
    cells = [json.loads(x) for x in out.read_text().splitlines() if '"cell"' in x]
    cells = [c for c in cells if c["kind"] == "cell"]
    assert [c["prompt_class"] for c in cells] == ["prose", "code", "structured"]
    assert all(c["acceptance"]["acceptance_length"] == pytest.approx(2.0) for c in cells)


def test_metrics_subcommand_sums_counters(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    server = synthetic(spec_k=1)
    script = _copy_alone(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-I", str(script), "metrics", "--base-url", server.base_url,
         "--prefix", "vllm:", "--samples"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["engine"] == "vllm"
    assert data["sums"]["vllm:spec_decode_num_drafts_total"] == 0.0
    assert "vllm:kv_cache_usage_perc" not in data["sums"]  # NaN is not summed ...
    nan = [s for s in data["samples"] if s["name"] == "vllm:kv_cache_usage_perc"]
    assert nan[0]["value"] == "NaN"  # ... but listed, as a string JSON can carry
    quoted = [s for s in data["samples"] if s["name"] == "vllm:cache_config_info"]
    assert quoted and quoted[0]["labels"]["note"] == 'a "quoted" \\ value'


def _old_python() -> str | None:
    """A working Python 3.8 or 3.9 (pyenv shims may exist without the version selected)."""
    candidates = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.[89].*/bin/python"))]
    candidates += [c for c in (shutil.which("python3.8"), shutil.which("python3.9")) if c]
    for exe in candidates:
        try:
            ok = subprocess.run([exe, "-c", "import sys; assert sys.version_info < (3, 10)"],
                                capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return exe
    return None


def test_runs_under_an_old_python(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    old = _old_python()
    if old is None:
        pytest.skip("no Python 3.8/3.9 interpreter on this machine")
    server = synthetic(tokens_per_chunk=(3,))
    script = _copy_alone(tmp_path)
    out = tmp_path / "rows.jsonl"
    for transport in ("asyncio", "threads"):
        proc = subprocess.run(
            [old, "-I", str(script), "run", "--base-url", server.base_url, "--prompt-classes",
             "prose", "--requests-per-cell", "2", "--max-tokens", "7", "--concurrency", "2",
             "--transport", transport, "--out", str(out)],
            capture_output=True, text=True, timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["completion_tokens"] for r in rows if r["kind"] == "request"] == [7, 7, 7, 7]
    gate = subprocess.run(
        [old, "-I", str(script), "gate", "--reference", server.base_url, "--candidate",
         server.base_url, "--max-tokens", "5"],
        capture_output=True, text=True, timeout=120,
    )
    assert gate.returncode == 0, gate.stderr
    assert json.loads(gate.stdout)["status"] == "pass"

"""The agent travels as one zipapp to a bare pod: built deterministically, run as
`python3 -I agent.pyz <verb>` (also under the oldest Python it supports), every verb answering
one JSON envelope with the documented exit codes (docs/agent.md), prompts read as package data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent import AGENT_VERSION
from tailpod.agent.probes import prompt_classes
from tailpod.agent.verbs import VERBS
from tailpod.agent_client import build as agent_build
from tailpod.sandbox.synthetic_server import SyntheticServer
from tests import paths

REPO = paths.REPO
PACKAGED_PROMPTS = REPO / "tailpod" / "agent" / "probes" / "prompts"


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_build.build_agent(tmp_path_factory.mktemp("agent")).path


def call(pyz: Path, *verb: str, payload: Any = None, python: str = sys.executable,
         env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, dict, str]:
    """Run the built agent as the driver does; (exit code, envelope, stderr). The envelope must
    be the last line of stdout and nothing else may be there."""
    proc = subprocess.run(
        [python, "-I", str(pyz), *verb], input="" if payload is None else json.dumps(payload),
        capture_output=True, text=True, timeout=120, env=env, cwd=cwd or pyz.parent)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout + proc.stderr
    envelope = json.loads(lines[0])
    assert envelope["agent"] == AGENT_VERSION and envelope["verb"] == " ".join(verb)
    assert envelope["ok"] is (proc.returncode == 0)
    assert ("result" in envelope) is envelope["ok"] and ("error" in envelope) is not envelope["ok"]
    return proc.returncode, envelope, proc.stderr


def test_two_builds_are_byte_identical_and_a_changed_source_changes_the_hash(
    tmp_path: Path
) -> None:
    first = agent_build.agent_zip_bytes()
    assert agent_build.agent_zip_bytes() == first
    a = agent_build.build_agent(tmp_path / "a")
    b = agent_build.build_agent(tmp_path / "b")
    assert a.path.read_bytes() == b.path.read_bytes() == first
    assert a.name == f"agent-{a.sha256[:16]}.pyz" == b.name
    copy = tmp_path / "src"
    shutil.copytree(agent_build.AGENT_SOURCE, copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    os.utime(copy / "verbs.py", (0, 0))  # timestamps and caches never reach the archive
    (copy / "probes" / "__pycache__").mkdir(exist_ok=True)
    (copy / "probes" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert agent_build.agent_zip_bytes(copy) == first
    with open(copy / "envelope.py", "a") as fh:
        fh.write("# one more line\n")
    assert agent_build.agent_zip_bytes(copy) != first
    names = zipfile.ZipFile(a.path).namelist()
    assert names[0] == "__main__.py" and names[1:] == sorted(names[1:])
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert "agent/probes/prompts/prose.json" in names


def test_version_answers_an_envelope(pyz: Path) -> None:
    code, envelope, _ = call(pyz, "version")
    assert code == 0
    result = envelope["result"]
    assert result["agent"] == AGENT_VERSION and result["schema_version"] == 1
    assert set(result["verbs"]) == set(VERBS)


def test_usage_errors_exit_2_with_an_envelope(pyz: Path) -> None:
    code, envelope, _ = call(pyz, "engine", "launch")
    assert code == 2 and envelope["error"]["kind"] == "usage"
    code, envelope, _ = call(pyz, "engine", "status", payload={"state_dir": "x", "typo": 1})
    assert code == 2 and "typo" in envelope["error"]["message"]
    code, envelope, _ = call(pyz, "probe", "metrics", payload=[1, 2])
    assert code == 2 and envelope["error"]["kind"] == "usage"
    proc = subprocess.run([sys.executable, "-I", str(pyz), "engine", "stop"], input="{not json",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["kind"] == "usage"


def test_engine_verbs_without_an_engine(pyz: Path, tmp_path: Path) -> None:
    state = {"state_dir": str(tmp_path / "state")}
    code, envelope, _ = call(pyz, "engine", "status", payload=state)
    assert code == 0 and envelope["result"] == {"running": False, "healthy": False,
                                                "state": None}
    code, envelope, _ = call(pyz, "engine", "stop", payload=state)
    assert code == 0 and envelope["result"] == {"stopped": True, "had_engine": False}
    plan = {"argv": [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"],
            "port": 9, "label": "broken"}
    for verb in (("engine", "start"), ("engine", "relaunch")):
        code, envelope, _ = call(pyz, *verb, payload={**state, "plan": plan, "timeout": 60})
        assert code == 1 and envelope["error"]["kind"] == "engine_start"
        assert "exit code 3" in envelope["error"]["message"] and "boom" in envelope["error"]["tail"]


def test_engine_start_status_relaunch_stop(pyz: Path, tmp_path: Path) -> None:
    """A stand-in engine (a stdlib HTTP server with /health): start returns its record with the
    start facts and this start's log; relaunch replaces it; stop ends it."""
    from tailpod.agent.bootstrap.engine import port_open

    server = tmp_path / "engine.py"
    server.write_text(
        "import http.server, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
        "print('engine up on', sys.argv[1], flush=True)\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = {"state_dir": str(tmp_path / "state")}
    plan = {"argv": [sys.executable, str(server), str(port)], "port": port, "label": "plain"}
    code, envelope, _ = call(pyz, "engine", "start", payload={**state, "plan": plan})
    assert code == 0, envelope
    first = envelope["result"]
    assert first["label"] == "plain" and first["startup_s"] > 0
    assert first["stopped_previous"] is False and "engine up on" in first["log_text"]
    assert "gpus" in first["machine"]
    code, envelope, _ = call(pyz, "engine", "status", payload=state)
    assert envelope["result"]["running"] and envelope["result"]["healthy"]
    code, envelope, _ = call(pyz, "engine", "relaunch",
                             payload={**state, "plan": {**plan, "label": "spec"}})
    assert code == 0 and envelope["result"]["stopped_previous"] is True
    assert envelope["result"]["pid"] != first["pid"]
    assert envelope["result"]["log_text"].count("engine up on") == 1  # this start's part only
    code, envelope, _ = call(pyz, "engine", "stop", payload=state)
    assert code == 0 and envelope["result"] == {"stopped": True, "had_engine": True}
    assert not port_open("127.0.0.1", port)


def test_probe_run_from_the_zipapp_uses_packaged_prompts(
    pyz: Path, synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    server = synthetic(spec_k=2, tokens_per_chunk=(2,))
    cells = [{"arm": "solo", "concurrency": 1, "rep": 0, "prompt_class": name}
             for name in ("prose", "code", "structured")]
    code, envelope, _ = call(pyz, "probe", "run", payload={
        "options": {"base_url": server.base_url, "requests_per_cell": 2, "max_tokens": 9},
        "cells": cells})
    assert code == 0, envelope
    rows = envelope["result"]["rows"]
    cell_rows = [r for r in rows if r["kind"] == "cell"]
    assert [c["prompt_class"] for c in cell_rows] == ["prose", "code", "structured"]
    assert all(c["acceptance"]["acceptance_length"] == pytest.approx(2.0) for c in cell_rows)
    assert envelope["result"]["measured_from"] == "pod"


def test_packaged_prompt_classes_are_the_ones_the_agent_reads() -> None:
    shipped = {p.stem: json.loads(p.read_text()) for p in sorted(PACKAGED_PROMPTS.glob("*.json"))
               if p.stem != "gate"}
    assert shipped == prompt_classes.builtin_prompt_classes()
    assert set(shipped) == {"prose", "code", "structured", "tools"}
    schema = shipped["structured"]["response_format"]
    assert schema["type"] == "json_schema" and "schema" in schema["json_schema"]
    assert len(prompt_classes.gate_prompts()) == 6


def test_metrics_verb_sums_counters(
    pyz: Path, synthetic: Callable[..., SyntheticServer]
) -> None:
    server = synthetic(spec_k=1)
    code, envelope, _ = call(pyz, "probe", "metrics", payload={
        "base_url": server.base_url, "prefix": "vllm:", "samples": True})
    assert code == 0
    data = envelope["result"]
    assert data["engine"] == "vllm"
    assert data["sums"]["vllm:spec_decode_num_drafts_total"] == 0.0
    assert "vllm:kv_cache_usage_perc" not in data["sums"]  # NaN is not summed ...
    nan = [s for s in data["samples"] if s["name"] == "vllm:kv_cache_usage_perc"]
    assert nan[0]["value"] == "NaN"  # ... but listed, as a string JSON can carry
    quoted = [s for s in data["samples"] if s["name"] == "vllm:cache_config_info"]
    assert quoted and quoted[0]["labels"]["note"] == 'a "quoted" \\ value'
    code, envelope, _ = call(pyz, "probe", "metrics", payload={"base_url": "http://127.0.0.1:9"})
    assert code == 1 and envelope["error"]["kind"] == "metrics"


def test_logprobs_verb_answers_with_its_result(pyz: Path, tmp_path: Path) -> None:
    """The full capture comes back in the envelope (or goes to `out` on the pod); the KL maths
    over it is tests/unit/measure's."""
    from tailpod.sandbox.kl_engine import FakeEngine, FakeModel, serve

    prompts = [{"id": "a", "class": "prose", "messages": [{"role": "user", "content": "hi"}]}]
    with serve(FakeEngine(FakeModel(), "vllm")) as url:
        payload = {"base_url": url, "prompts": prompts, "top_k": 3, "max_tokens": 4}
        code, envelope, _ = call(pyz, "probe", "logprobs", payload=payload)
        assert code == 0, envelope
        result = envelope["result"]
        assert result["summary"] == {"prompts": 1, "positions": 4, "errors": []}
        assert result["logprobs"]["prompts"][0]["id"] == "a"
        out = tmp_path / "lp.json"
        code, envelope, _ = call(pyz, "probe", "logprobs", payload={**payload, "out": str(out)})
        assert code == 0 and "logprobs" not in envelope["result"]
        written = json.loads(out.read_text())
        assert written["prompts"] == result["logprobs"]["prompts"]
    code, envelope, _ = call(pyz, "probe", "logprobs", payload={"prompts": []})
    assert code == 1 and envelope["error"]["kind"] == "logprobs"


def test_gate_verb(pyz: Path, synthetic: Callable[..., SyntheticServer]) -> None:
    server = synthetic()
    code, envelope, _ = call(pyz, "probe", "gate", payload={
        "reference_url": server.base_url, "candidate": server.base_url, "max_tokens": 5})
    assert code == 0 and envelope["result"]["status"] == "pass"


def test_deadman_verbs(pyz: Path, tmp_path: Path) -> None:
    """status/heartbeat/disarm of a switch never armed; arm without the provider's injected
    credentials refuses, and says which are missing."""
    beat = {"heartbeat_file": str(tmp_path / "hb")}
    env = {k: v for k, v in os.environ.items() if k not in ("RUNPOD_POD_ID", "RUNPOD_API_KEY")}
    code, envelope, _ = call(pyz, "deadman", "status", payload=beat, env=env)
    assert code == 0 and envelope["result"]["state"] == "never_armed"
    code, envelope, _ = call(pyz, "deadman", "heartbeat", payload=beat, env=env)
    assert code == 0 and envelope["result"]["beat"] is True
    assert (tmp_path / "hb").exists()
    code, envelope, _ = call(pyz, "deadman", "disarm", payload=beat, env=env)
    assert code == 0 and envelope["result"] == {"disarmed": False, "pid": None}
    assert (tmp_path / "hb.disarmed").exists()
    code, envelope, _ = call(pyz, "deadman", "arm", env=env, payload={
        **beat, "provider": "runpod", "ttl_at": 0, "heartbeat_timeout": 600,
        "environ_from": ""})
    assert code == 1 and envelope["error"]["kind"] == "deadman"
    assert "RUNPOD_POD_ID and RUNPOD_API_KEY not set" in envelope["error"]["message"]
    code, envelope, _ = call(pyz, "deadman", "arm", env=env, payload={
        **beat, "provider": "nosuch", "ttl_at": 0, "heartbeat_timeout": 600})
    assert code == 2 and envelope["error"]["kind"] == "usage"


def test_deadman_arm_from_the_zipapp_runs_the_daemon_from_the_zipapp(
    pyz: Path, tmp_path: Path
) -> None:
    """`arm` starts `python -I <the .pyz> deadman run ...` detached; a dry-run switch with a
    1 s TTL fires and says so; status sees it."""
    beat = {"heartbeat_file": str(tmp_path / "hb")}
    log = tmp_path / "deadman.log"
    code, envelope, _ = call(pyz, "deadman", "arm", payload={
        **beat, "provider": "vastai", "ttl_at": 0, "heartbeat_timeout": 600, "dry_run": True,
        "poll": 0.1, "log": str(log)})
    assert code == 0, envelope
    pid = envelope["result"]["pid"]
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert str(pyz).encode() in cmdline and b"deadman" in cmdline and b"run" in cmdline
        code, envelope, _ = call(pyz, "deadman", "status", payload=beat)
        assert envelope["result"]["armed"] and envelope["result"]["pid"] == pid
    finally:
        code, envelope, _ = call(pyz, "deadman", "disarm", payload=beat)
    assert code == 0 and envelope["result"]["disarmed"] is True


def _old_python() -> str | None:
    """A working Python 3.8 (pyenv shims may exist without the version selected)."""
    candidates = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.8.*/bin/python"))]
    candidates += [c for c in (shutil.which("python3.8"),) if c]
    for exe in candidates:
        try:
            ok = subprocess.run([exe, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                                capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return exe
    return None


def test_runs_under_python_3_8(
    pyz: Path, synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    old = _old_python()
    if old is None:
        pytest.skip("no Python 3.8 interpreter on this machine")
    code, envelope, _ = call(pyz, "version", python=old)
    assert code == 0 and envelope["result"]["python"].startswith("3.8.")
    server = synthetic(tokens_per_chunk=(3,))
    rows: list[dict] = []
    for transport in ("asyncio", "threads"):
        code, envelope, err = call(pyz, "probe", "run", python=old, payload={
            "options": {"base_url": server.base_url, "requests_per_cell": 2, "max_tokens": 7,
                        "transport": transport},
            "cells": [{"arm": "old", "concurrency": 2, "rep": 0, "prompt_class": "prose"}]})
        assert code == 0, err
        rows += envelope["result"]["rows"]
    assert [r["completion_tokens"] for r in rows if r["kind"] == "request"] == [7, 7, 7, 7]
    code, envelope, _ = call(pyz, "probe", "gate", python=old, payload={
        "reference_url": server.base_url, "candidate": server.base_url, "max_tokens": 5})
    assert code == 0 and envelope["result"]["status"] == "pass"
    code, envelope, _ = call(pyz, "engine", "status", python=old,
                             payload={"state_dir": str(tmp_path)})
    assert code == 0
    code, envelope, _ = call(pyz, "deadman", "status", python=old,
                             payload={"heartbeat_file": str(tmp_path / "hb")})
    assert code == 0
    for provider in ("runpod", "vastai"):  # the start command's guard runs on the same Python
        code_text = agent_build.guard_code(provider)
        compiled = subprocess.run([old, "-I", "-c", "import sys; compile(sys.stdin.read(), 'g', "
                                   "'exec')"], input=code_text, capture_output=True, text=True,
                                  timeout=60)
        assert compiled.returncode == 0, compiled.stderr


def test_minify_takes_turns_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Matrix cards build their guards in parallel threads; CPython 3.11's AST constructor fails
    when two threads parse at once (tailpod/agent_client/build.py _AST_LOCK), so minify never
    runs in two threads at the same time."""
    import threading
    import time

    inside, most = [0], [0]
    real_parse = agent_build.ast.parse

    def watched_parse(*args: object, **kwargs: object) -> object:
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.002)  # widen the window another thread would need
        try:
            return real_parse(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            inside[0] -= 1

    monkeypatch.setattr(agent_build.ast, "parse", watched_parse)
    source = agent_build.GUARD_SOURCE.read_text(encoding="utf-8")
    threads = [threading.Thread(target=agent_build.minify, args=(source, {"POLL_S": float(i)}))
               for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 1
    assert agent_build.guard_code("runpod") is agent_build.guard_code("runpod")  # built once

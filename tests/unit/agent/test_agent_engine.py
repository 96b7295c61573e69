"""The agent's engine layer (tailpod/agent/bootstrap) with stand-in engines (plain HTTP servers);
the verbs over it: tests/unit/agent/test_agent_zipapp.py; the real engine: tests/e2e."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest

from tailpod.agent.bootstrap import engine, host_facts, overlay, start_error
from tailpod.sandbox.podhost import free_port


def http_server_plan(port: int, extra_child: bool = False) -> dict:
    code = (
        "import http.server,subprocess,sys\n"
        + (
            "subprocess.Popen([sys.executable,'-c','import time; time.sleep(600)'])\n"
            if extra_child
            else ""
        )
        + "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
        "    def log_message(self,*a): pass\n"
        "print('serving', flush=True)\n"
        f"http.server.HTTPServer(('127.0.0.1',{port}),H).serve_forever()\n"
    )
    return {"argv": [sys.executable, "-c", code], "port": port, "label": "fake"}


def test_launch_health_and_stop_kill_the_whole_group(tmp_path: Path) -> None:
    port = free_port()
    state = engine.launch(http_server_plan(port, extra_child=True), tmp_path)
    took = engine.wait_healthy(state, timeout=30, poll=0.1)
    assert took >= 0
    assert engine.is_running(state)
    assert engine.read_state(tmp_path)["pgid"] == state["pgid"]
    assert engine.stop(state, grace=5)
    assert not engine.group_alive(state["pgid"])  # the grandchild went too
    assert not engine.port_open("127.0.0.1", port)


def test_engine_exiting_during_startup_reports_log_tail(tmp_path: Path) -> None:
    plan = {
        "argv": [
            sys.executable,
            "-c",
            "print('loading weights'); print('ValueError: bad checkpoint'); raise SystemExit(3)",
        ],
        "port": free_port(),
        "label": "dies",
    }
    state = engine.launch(plan, tmp_path)
    with pytest.raises(start_error.EngineStartError) as info:
        engine.wait_healthy(state, timeout=30, poll=0.1)
    assert "exit code 3" in str(info.value)
    assert any("bad checkpoint" in line for line in info.value.tail)


def test_busy_port_is_refused(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(start_error.EngineStartError, match="already in use"):
            engine.launch(http_server_plan(port), tmp_path)


def test_timeout_names_the_wait(tmp_path: Path) -> None:
    plan = {"argv": [sys.executable, "-c", "import time; time.sleep(30)"], "port": free_port()}
    state = engine.launch(plan, tmp_path)
    t0 = time.time()
    with pytest.raises(start_error.EngineStartError, match="not healthy after"):
        engine.wait_healthy(state, timeout=1.5, poll=0.1)
    assert time.time() - t0 < 10
    assert engine.stop(state, grace=2)


def test_checkpoint_identity_of_a_directory_follows_its_bytes(tmp_path: Path) -> None:
    ckpt = tmp_path / "draft"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"hidden_size": 8}')
    (ckpt / "model.safetensors").write_bytes(b"\0" * 64)
    first = host_facts.checkpoint_identity(str(ckpt))
    assert first["source"] == "directory" and first["revision"].startswith("sha256:")
    (ckpt / "tailpod-checkpoint.json").write_text("{}")  # tailpod's note: not content
    assert host_facts.checkpoint_identity(str(ckpt)) == first
    (ckpt / "model.safetensors").write_bytes(b"\1" + b"\0" * 63)  # same size, other weights
    assert host_facts.checkpoint_identity(str(ckpt))["revision"] != first["revision"]


def test_checkpoint_identity_of_a_hub_id_is_the_cached_snapshot_commit(tmp_path: Path) -> None:
    refs = tmp_path / "hub" / "models--org--name" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("0123abcd\n")
    env = {"HF_HOME": str(tmp_path)}
    assert host_facts.checkpoint_identity("org/name", env) == {
        "ref": "org/name", "source": "hub", "revision": "0123abcd",
    }  # fmt: skip
    assert host_facts.checkpoint_identity("org/absent", env)["revision"] is None
    both = host_facts.checkpoint_identities({"model": "org/name", "draft_model": None}, env)
    assert set(both) == {"model"}


def test_build_overlay_links_the_checkpoint_and_writes_the_patched_files(tmp_path: Path) -> None:
    source = tmp_path / "snapshot"
    source.mkdir()
    (source / "config.json").write_text('{"quantization_config": {"ignore": ["lm_head"]}}')
    (source / "model.safetensors").write_bytes(b"weights")
    patched = {"quantization_config": {"ignore": ["lm_head", "mtp*"]}}
    spec = {"dir": str(tmp_path / "overlay"), "source": str(source), "revision": None,
            "files": {"config.json": patched}, "record": {"added": ["mtp*"], "reason": "why"}}
    record = overlay.build_overlay(spec)
    built = tmp_path / "overlay"
    assert (built / "model.safetensors").is_symlink()
    assert (built / "model.safetensors").resolve() == (source / "model.safetensors").resolve()
    assert not (built / "config.json").is_symlink()
    assert json.loads((built / "config.json").read_text()) == patched
    assert json.loads((source / "config.json").read_text())["quantization_config"]["ignore"] == [
        "lm_head"
    ]  # the source is never written through
    assert record["added"] == ["mtp*"] and record["patched_files"] == ["config.json"]
    identity = host_facts.checkpoint_identity(str(built))
    assert identity["source"] == "overlay" and identity["ref"] == str(source)
    assert identity["patch"]["reason"] == "why" and identity["served_from"] == str(built)
    assert overlay.build_overlay(spec) == record  # a relaunch rebuilds it in place


def test_build_overlay_finds_a_hub_snapshot_in_the_cache(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--org--name" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    spec = {"dir": str(tmp_path / "overlay"), "source": "org/name", "revision": "abc123",
            "python": "/nonexistent/python", "files": {}, "record": {}}
    record = overlay.build_overlay(spec, {"HF_HOME": str(tmp_path)})
    assert record["snapshot"] == str(snapshot) and record["revision"] == "abc123"
    with pytest.raises(start_error.EngineStartError, match="could not download org/other"):
        overlay.build_overlay({**spec, "source": "org/other", "python": sys.executable},
                            {"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})


def _writing_plan(port: int, cache: Path, new_graphs: int) -> dict:
    """A stand-in engine that writes `new_graphs` entries into the Inductor cache before it
    serves, as a compiling start does (torch/_inductor/codecache.py: fxgraph/<2>/<key>/<file>)."""
    plan = http_server_plan(port)
    writes = "".join(
        f"import os; os.makedirs({str(cache / 'fxgraph' / 'ab' / f'k{i}')!r}, exist_ok=True); "
        f"open({str(cache / 'fxgraph' / 'ab' / f'k{i}' / 'entry')!r}, 'w').write('g')\n"
        for i in range(new_graphs))
    plan["argv"] = [sys.executable, "-c", writes + plan["argv"][2]]
    plan["env"] = {"TORCHINDUCTOR_CACHE_DIR": str(cache)}
    return plan


def test_a_start_counts_the_inductor_cache_before_and_after(tmp_path: Path) -> None:
    cache = tmp_path / "inductor"
    (cache / "fxgraph" / "zz" / "old").mkdir(parents=True)
    (cache / "fxgraph" / "zz" / "old" / "entry").write_text("g")  # one graph from before
    (cache / "other.so").write_text("x")  # outside fxgraph/: not a graph
    cold = engine.start_engine(_writing_plan(free_port(), cache, 2), tmp_path / "s", timeout=30)
    try:
        assert cold["inductor_cache"] == {"graphs_before": 1, "graphs_after": 3}
    finally:
        assert engine.stop(cold)
    warm = engine.start_engine(_writing_plan(free_port(), cache, 0), tmp_path / "s", timeout=30)
    try:
        assert warm["inductor_cache"] == {"graphs_before": 3, "graphs_after": 3}
        assert json.loads((tmp_path / "s" / engine.STATE_FILE).read_text())["inductor_cache"] \
            == {"graphs_before": 3, "graphs_after": 3}
    finally:
        assert engine.stop(warm)


def test_without_an_inductor_cache_the_counts_say_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    state = engine.start_engine(http_server_plan(free_port()), tmp_path, timeout=30)
    try:
        assert state["inductor_cache"] == {"graphs_before": None, "graphs_after": None}
    finally:
        assert engine.stop(state)

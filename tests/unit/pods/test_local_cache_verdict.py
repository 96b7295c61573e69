"""Your own machine (`up --provider local`) reads the Inductor cache verdict as a rented pod's agent
does (tailpod/engines/compile_cache.py): the fxgraph entries counted before the launch and after
health. The engine here is a stand-in process: it serves /health, and "compiles" (writes one
graph entry) only when the cache holds none, as a compile cache does."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig, LaunchPlan
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import local
from tailpod.provision.local.provider import LocalProvider
from tests.unit.engines.mtp_ckpt_builder import build

STAND_IN_ENGINE = r"""
import http.server, os, pathlib, sys
graphs = pathlib.Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or "/nonexistent") / "fxgraph" / "ab"
if os.environ.get("TORCHINDUCTOR_CACHE_DIR") and not (graphs.exists() and any(graphs.iterdir())):
    graphs.mkdir(parents=True, exist_ok=True)
    (graphs / "fxgraph-entry").write_text("compiled")
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path | None,
                tag: str) -> dict[str, Any]:
    settings = load_settings(overrides={"home": tmp_path / "home"}, env={},
                             dotenv_path=tmp_path / "none")
    port = _free_port()
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache)} if cache is not None else {}
    monkeypatch.setattr(local, "_launch_plan", lambda *_: LaunchPlan(
        argv=[sys.executable, "-c", STAND_IN_ENGINE, str(port)], env=env))
    monkeypatch.setattr(local.engine, "engine_version", lambda *_: None)
    ledger = Ledger(settings.home)
    record = ledger.put(PodRecord(run_tag=tag, provider="local", gpu="local CPU",
                                  price_per_hr=0.0))
    model = tmp_path / "model"
    if not model.exists():  # a checkpoint without the MTP trap: served as it is
        build(model, architecture="MiMoForCausalLM", naming="mimo")
    cfg = EngineConfig(engine="vllm", model=str(model), port=port)
    provider = LocalProvider(settings.home)
    try:
        started = local._start(settings, provider, ledger, record, cfg, None)
    finally:
        state = provider.engine_state(tag)
        if state is not None:
            provider.terminate(provider.pod_id_for(tag))
    phases: dict[str, Any] = started.startup["facts"]["startup_phases"]
    return phases


def test_a_local_restart_on_a_warm_inductor_cache_is_read_as_a_hit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "inductor"
    cold = _start_once(tmp_path, monkeypatch, cache, "tp-20261202-150000-cold00")
    warm = _start_once(tmp_path, monkeypatch, cache, "tp-20261202-150100-warm00")
    # 0 entries before, 1 after: compiled; then 1 before, 1 after: every graph found
    assert (cold["compile_cache_hit"], cold["compile_cache_source"]) == (False, "inductor")
    assert (warm["compile_cache_hit"], warm["compile_cache_source"]) == (True, "inductor")
    assert len(list((cache / "fxgraph").rglob("*"))) == 2  # one folder, one entry


def test_without_an_inductor_cache_set_no_verdict_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    phases = _start_once(tmp_path, monkeypatch, None, "tp-20261202-150200-none00")
    assert (phases["compile_cache_hit"], phases["compile_cache_source"]) == (None, None)

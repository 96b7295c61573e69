"""Two real CPU vLLM lanes of the tiny checkpoint behind HAProxy (`up --lanes`): the engines start
one after the other with their own KV budgets and report their KV facts; with admission limit N
a closed loop of N clients is served by the spec lane alone and one of 2N overflows to plain,
shown by HAProxy's counters and by each engine's own `vllm:request_success` counter; `status`
shows both lanes and the proxy and `down` stops all three."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.pods import lanes
from tailpod.sandbox.podhost import free_port

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(lanes.shutil.which("haproxy") is None
                                 and not Path("/usr/sbin/haproxy").exists(),
                                 reason="haproxy is not installed")]
N = 2


def _successes(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(m.group(1)) for m in
               re.finditer(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def _stream(base: str) -> None:
    body = json.dumps({"model": "tailpod", "prompt": "one two three", "max_tokens": 24,
                       "temperature": 0, "ignore_eos": True, "stream": True}).encode()
    req = urllib.request.Request(f"{base}/v1/completions", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        assert resp.read().decode().rstrip().endswith("data: [DONE]")


def _loop(base: str, clients: int, each: int, think_s: float) -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for i in range(each):
                if i:
                    time.sleep(think_s)
                _stream(base)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors[:1]


def test_lanes_on_the_cpu_engine(engine_env: dict[str, str], tiny_models: dict[str, Path],
                                 leftover_engines: Any) -> None:
    runner = CliRunner()
    port = free_port()
    while any(_busy(p) for p in (port + 1, port + 2)):
        port = free_port()
    res = runner.invoke(app, ["up", "--provider", "local", "--model", str(tiny_models["target"]),
                              "--port", str(port), "--lanes", "spec:2,plain",
                              "--spec-method", "ngram", "--admission-limit", str(N),
                              "--lane-kv-gib", "1", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout)
    run_tag = record["run_tag"]
    try:
        info = record["extra"]["lanes"]
        assert info["admission_limit"] == N
        spec, plain = info["lanes"]["spec"], info["lanes"]["plain"]
        assert plain["started_after"] == f"{run_tag}-spec"  # one after the other
        for lane in (spec, plain):
            assert lane["budget"] == {"VLLM_CPU_KVCACHE_SPACE_gib": 1.0}
            assert lane["startup"]["facts"]["kv_tokens"] > 0  # each lane's own KV, from its log
        # gated before the proxy started: the spec lane's greedy token ids are the plain lane's
        assert info["gate"]["status"] == "pass" and info["gate"]["method"] == "token_ids"
        assert "--speculative-config" in " ".join(spec["argv"])
        assert "--speculative-config" not in " ".join(plain["argv"])
        base = record["endpoint"]
        before = lanes.lane_counts(_record(engine_env, run_tag))
        ok0 = {p: _successes(p) for p in (spec["port"], plain["port"])}
        assert before is not None

        _loop(base, N, 3, think_s=0.05)  # c = N
        mid = lanes.lane_counts(_record(engine_env, run_tag))
        assert mid is not None
        assert mid["spec"]["stot"] - before["spec"]["stot"] == N * 3
        assert mid["plain"]["stot"] - before["plain"]["stot"] == 0
        assert _successes(spec["port"]) - ok0[spec["port"]] == N * 3
        assert _successes(plain["port"]) - ok0[plain["port"]] == 0

        _loop(base, 2 * N, 3, think_s=0.0)  # c = 2N
        after = lanes.lane_counts(_record(engine_env, run_tag))
        assert after is not None
        d_plain = after["plain"]["stot"] - mid["plain"]["stot"]
        d_spec = after["spec"]["stot"] - mid["spec"]["stot"]
        assert d_spec + d_plain == 2 * N * 3 and d_plain >= 1
        assert after["spec"]["smax"] == N
        assert _successes(plain["port"]) - ok0[plain["port"]] == d_plain
        print(f"lanes N={N}: KV tokens spec {spec['startup']['facts']['kv_tokens']} plain "
              f"{plain['startup']['facts']['kv_tokens']}; startup spec {spec['startup_s']:.1f} s "
              f"plain {plain['startup_s']:.1f} s; c=2N: spec {d_spec} plain {d_plain}, smax spec "
              f"{after['spec']['smax']} plain {after['plain']['smax']}")

        status = runner.invoke(app, ["status", run_tag, "--json", "--no-beat"])
        (row,) = json.loads(status.stdout)["pods"]
        assert row["lanes"]["proxy"]["alive"]
        assert all(v["healthy"] for v in row["lanes"]["lanes"].values())
    finally:
        down = runner.invoke(app, ["down", run_tag, "--json"], catch_exceptions=False)
    assert down.exit_code == 0, down.output
    for p in (port, port + 1, port + 2):
        assert not _busy(p), f"port {p} still open"
    saved = json.loads((Path(engine_env["TAILPOD_RESULTS_DIR"]) / run_tag / "lanes.json")
                       .read_text())
    assert saved["lanes"]["spec"]["requests"] >= N * 3 and saved["lanes"]["plain"]["requests"] >= 1
    assert leftover_engines(str(tiny_models["target"].parent)) == set()


def _busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _record(env: dict[str, str], run_tag: str) -> Any:
    from tailpod.config import load_settings
    from tailpod.ledger import Ledger

    found = Ledger(load_settings().state_dir).get(run_tag)
    assert found is not None
    return found

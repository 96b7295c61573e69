"""Lane admission through a real HAProxy in front of two synthetic servers (pods/lanes.py): with
admission limit N, a closed loop of N clients sends every request to the spec lane, and one of 2N
clients overflows to the plain lane while the spec lane never holds more than N. Shown by
HAProxy's own stats-socket counters and by each server's own /_stats request count."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tailpod.config import load_settings
from tailpod.ledger import Ledger
from tailpod.pods import lanes
from tests import paths

pytestmark = pytest.mark.skipif(lanes.shutil.which("haproxy") is None
                                and not Path("/usr/sbin/haproxy").exists(),
                                reason="haproxy is not installed (scripts/system-requirements.sh)")

TOKENS = 12
RATE = 60.0  # tok/s per stream: one request holds its lane for about 0.2 s


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _synthetic(name: str, port: int) -> lanes.LaneLaunch:
    return lanes.LaneLaunch(
        name=name, port=port,
        argv=[sys.executable, "-m", "tailpod.sandbox.synthetic_server", "--port", str(port),
              "--rate", str(RATE), "--fixed-tokens", str(TOKENS), "--model", name],
        budget={"synthetic": True},
        # the shape an engine adapter parses (engines/base.py StartupFacts.to_json)
        parse_startup=lambda text: {"engine": "synthetic", "facts": {}, "lines": text.splitlines()},
    )


def _pod_lane(name: str, port: int, *extra: str) -> lanes.LaneLaunch:
    """_synthetic with `extra` flags, started on a pod (its agent over SSH): the pod's processes
    run this checkout's server, so it goes on their PYTHONPATH."""
    launch = _synthetic(name, port)
    launch.argv += list(extra)
    launch.env = {"PYTHONPATH": str(paths.REPO)}
    return launch


def _listening(*ports: int) -> list[int]:
    """Those of `ports` that something on this machine still accepts connections on."""
    out = []
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                out.append(port)
    return out


def _stream(base: str) -> str:
    body = json.dumps({"model": "x", "prompt": "hello", "max_tokens": TOKENS,
                       "stream": True}).encode()
    req = urllib.request.Request(f"{base}/v1/completions", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read().decode()
    assert text.rstrip().endswith("data: [DONE]"), text[-200:]  # SSE passed through whole
    return text


def _closed_loop(base: str, clients: int, per_client: int, think_s: float = 0.0) -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for i in range(per_client):
                if i and think_s:
                    time.sleep(think_s)
                _stream(base)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:1]


def _served(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stats", timeout=10) as resp:
        return int(json.loads(resp.read())["requests"])


def test_haproxy_config_names_the_admission_rule(tmp_path: Path) -> None:
    cfg = lanes.haproxy_config(9000, [("spec", 9001), ("plain", 9002)], 3, tmp_path / "s.sock")
    lines = [line.strip() for line in cfg.splitlines()]
    assert "balance first" in lines and "option http-server-close" in lines
    assert "server spec 127.0.0.1:9001 maxconn 3 check inter 2s" in lines
    assert lines.index("server spec 127.0.0.1:9001 maxconn 3 check inter 2s") < \
        lines.index(f"server plain 127.0.0.1:9002 maxconn {lanes.PLAIN_MAXCONN} check inter 2s")
    with pytest.raises(Exception, match="at least 1"):
        lanes.haproxy_config(9000, [("spec", 9001), ("plain", 9002)], 0, tmp_path / "s.sock")


def test_parse_lanes() -> None:
    assert lanes.parse_lanes("spec:3,plain") == [lanes.LaneSpec("spec", 3),
                                                 lanes.LaneSpec("plain", 0)]
    for bad in ("plain,spec:3", "spec:0,plain", "spec:x,plain", "spec:2"):
        with pytest.raises(Exception, match="--lanes"):
            lanes.parse_lanes(bad)


def test_admission_limit_fills_spec_then_overflows_to_plain(tailpod_home: Path,
                                                           tmp_path: Path) -> None:
    n = 2
    front, spec_port, plain_port = _free_ports(3)
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    run_dir = tmp_path / "run"
    record = lanes.up_lanes(settings, ledger, [_synthetic("spec", spec_port),
                                               _synthetic("plain", plain_port)],
                            admission_limit=n, front_port=front, run_dir=run_dir,
                            startup_timeout_s=60)
    base = record.endpoint
    assert base == f"http://127.0.0.1:{front}"
    try:
        facts = record.extra.lanes["lanes"]
        # one after the other: the plain lane was started after the spec lane was healthy
        assert facts["plain"]["started_after"] == f"{record.run_tag}-spec"
        before = lanes.lane_counts(record)
        assert before is not None and set(before) == {"spec", "plain"}
        assert before["spec"]["slim"] == n
        served0 = {p: _served(p) for p in (spec_port, plain_port)}

        # c = N: all on the spec lane. A client that re-sends the instant it reads the last chunk
        # can reach HAProxy before it has released the finished stream's slot (the proxy then
        # counts N + 1 and overflows one: seen once in 60 requests); 50 ms of think time keeps
        # the proxy's own in-flight count at N, which is what the admission rule is about.
        _closed_loop(base, clients=n, per_client=5, think_s=0.05)
        mid = lanes.lane_counts(record)
        assert mid is not None
        assert mid["spec"]["stot"] - before["spec"]["stot"] == n * 5
        assert mid["plain"]["stot"] - before["plain"]["stot"] == 0
        assert mid["spec"]["smax"] <= n
        assert _served(spec_port) - served0[spec_port] == n * 5  # the engine's own count
        assert _served(plain_port) - served0[plain_port] == 0

        _closed_loop(base, clients=2 * n, per_client=5)  # c = 2N: N on spec, the rest overflow
        after = lanes.lane_counts(record)
        assert after is not None
        d_spec = after["spec"]["stot"] - mid["spec"]["stot"]
        d_plain = after["plain"]["stot"] - mid["plain"]["stot"]
        assert d_spec + d_plain == 2 * n * 5
        assert after["spec"]["smax"] == n  # filled to its limit, never past it
        assert d_plain >= 5  # overflow happened (at least one client's worth)
        assert d_spec >= n * 5 - n  # the spec lane stayed (nearly) full throughout
        assert _served(plain_port) - served0[plain_port] == d_plain
        status = lanes.lanes_status(settings, record)
        assert status is not None and status["proxy"]["alive"]
        assert {k: v["healthy"] for k, v in status["lanes"].items()} == {"spec": True,
                                                                         "plain": True}
        path = lanes.write_lanes_json(ledger.get(record.run_tag) or record, run_dir)
        saved: dict[str, Any] = json.loads(path.read_text())
        assert saved["admission_limit"] == n
        assert saved["lanes"]["spec"]["requests"] == after["spec"]["stot"]
        assert saved["lanes"]["plain"]["requests"] == after["plain"]["stot"]
    finally:
        from tailpod.pods.kinds import kind_for

        current = ledger.get(record.run_tag) or record
        evidence = kind_for("local").down(settings, ledger, current)
    assert evidence.proven
    for port in (front, spec_port, plain_port):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still open"
    assert (ledger.get(record.run_tag) or record).status == "terminated"


def test_status_shows_both_lanes_and_the_proxy_and_down_stops_all_three(
        tailpod_home: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tailpod.cli.main import app
    from tailpod.provision.teardown import run_dir_for

    front, spec_port, plain_port = _free_ports(3)
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    record = lanes.up_lanes(settings, ledger, [_synthetic("spec", spec_port),
                                               _synthetic("plain", plain_port)],
                            admission_limit=1, front_port=front, startup_timeout_s=60)
    try:
        _stream(record.endpoint or "")
        res = CliRunner().invoke(app, ["status", record.run_tag, "--json", "--no-beat"])
        assert res.exit_code == 0, res.output
        (row,) = json.loads(res.stdout)["pods"]
        assert row["healthy"] is True
        assert row["lanes"]["proxy"]["alive"] is True
        assert row["lanes"]["admission_limit"] == 1
        assert row["lanes"]["lanes"]["spec"]["healthy"] and row["lanes"]["lanes"]["plain"]["healthy"]
        assert row["lanes"]["lanes"]["spec"]["requests"] == 1
        assert row["lanes"]["lanes"]["plain"]["requests"] == 0
        text = CliRunner().invoke(app, ["status", record.run_tag, "--no-beat"]).output
        assert "lane spec" in text and "lane plain" in text and "HAProxy" in text
    finally:
        down = CliRunner().invoke(app, ["down", record.run_tag, "--json"])
    assert down.exit_code == 0, down.output
    for port in (front, spec_port, plain_port):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still open"
    final = Ledger(settings.state_dir).get(record.run_tag)
    assert final is not None and final.status == "terminated"
    assert [p["gone"] for p in final.extra.lanes_down] == [True, True]
    saved = json.loads((run_dir_for(settings, record.run_tag) / lanes.LANES_FILE).read_text())
    assert saved["lanes"]["spec"]["requests"] == 1 and saved["lanes"]["plain"]["requests"] == 0
    assert saved["counts_final"] is True
    # down is idempotent: asked again, with the proxy gone, it keeps the counts it read
    again = CliRunner().invoke(app, ["down", record.run_tag, "--json"])
    assert again.exit_code == 0, again.output
    kept = json.loads((run_dir_for(settings, record.run_tag) / lanes.LANES_FILE).read_text())
    assert kept == saved


def test_up_lanes_refuses_what_it_cannot_deploy(tailpod_home: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tailpod.cli.main import app

    model = tmp_path / "model"
    model.mkdir()
    base = ["up", "--provider", "local", "--engine", "vllm", "--model", str(model)]
    res = CliRunner().invoke(app, [*base, "--lanes", "spec:2,plain"])
    assert res.exit_code != 0 and "--admission-limit" in res.output
    res = CliRunner().invoke(app, [*base, "--lanes", "plain,spec:2", "--admission-limit", "2"])
    assert res.exit_code != 0 and "spec:K,plain" in res.output
    static = tmp_path / "decision.json"
    static.write_text(json.dumps({"deployment": {"kind": "static", "arm": "plain"}}))
    res = CliRunner().invoke(app, [*base, "--decision", str(static)])
    assert res.exit_code != 0 and "not two lanes" in res.output
    assert not (tailpod_home / "lanes").exists()  # nothing was started


def _open_loop(base: str, interval_s: float, count: int, cap: int | None = None) -> None:
    """Requests sent on a fixed schedule (every interval_s, whatever is in flight); with `cap`,
    a due request waits while `cap` are in flight, so no more ever are, however late the
    sender runs (a stalled sender catches up by sending its overdue requests at once)."""
    errors: list[BaseException] = []
    slots = threading.BoundedSemaphore(cap or count)

    def one() -> None:
        try:
            _stream(base)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)
        finally:
            slots.release()

    threads = []
    t0 = time.monotonic()
    for i in range(count):
        time.sleep(max(0.0, t0 + i * interval_s - time.monotonic()))
        slots.acquire()
        threads.append(threading.Thread(target=one))
        threads[-1].start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:1]


def test_open_loop_schedule_overflows_only_when_the_spec_lane_is_full(tailpod_home: Path) -> None:
    # each request holds a lane ~0.2 s (12 tokens at 60 tok/s). Every 0.15 s: at most 2 in
    # flight (the schedule's, held by a cap of 2 on a loaded machine), under N = 3, so all on
    # spec. Every 0.02 s: ~10 in flight, so spec fills to 3 and the rest overflow.
    n = 3
    front, spec_port, plain_port = _free_ports(3)
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    record = lanes.up_lanes(settings, ledger, [_synthetic("spec", spec_port),
                                               _synthetic("plain", plain_port)],
                            admission_limit=n, front_port=front, startup_timeout_s=60)
    try:
        c0 = lanes.lane_counts(record)
        _open_loop(record.endpoint or "", 0.15, 12, cap=2)
        c1 = lanes.lane_counts(record)
        _open_loop(record.endpoint or "", 0.02, 30)
        c2 = lanes.lane_counts(record)
        assert c0 and c1 and c2
        assert c1["spec"]["stot"] - c0["spec"]["stot"] == 12
        assert c1["plain"]["stot"] - c0["plain"]["stot"] == 0
        d_spec = c2["spec"]["stot"] - c1["spec"]["stot"]
        d_plain = c2["plain"]["stot"] - c1["plain"]["stot"]
        assert d_spec + d_plain == 30 and d_plain >= 10
        assert c2["spec"]["smax"] == n
    finally:
        from tailpod.pods.kinds import kind_for

        kind_for("local").down(settings, ledger, ledger.get(record.run_tag) or record)

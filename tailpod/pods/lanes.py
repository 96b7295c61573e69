"""Two lanes of one checkpoint behind one endpoint: a speculative lane that admits up to N requests
in flight and a plain lane that takes the overflow, with a real HAProxy in front (docs/decide.md).

- The engines start **one after the other**, each healthy before the next starts (two vLLM
  instances started together mis-size each other's KV cache: vllm-project/vllm#55827), each with
  an explicit memory budget (on a CPU `VLLM_CPU_KVCACHE_SPACE` GiB, on a GPU `mem_fraction`, which
  the vLLM adapter spells `--gpu-memory-utilization`), and each lane's startup facts (KV tokens,
  max concurrency) are recorded.
- HAProxy: `balance first` over `spec` (maxconn = the admission limit) then `plain`; a request
  finds the first server with a free slot, so the spec lane is filled to N and the rest overflow;
  when both are full it queues. `option http-server-close` makes one server connection one
  request, so maxconn counts requests in flight. SSE passes through (HTTP mode, no buffering or
  compression). `/health` is answered by HAProxy itself (`monitor-uri`), failing when no lane is
  up, so health polls never count as lane requests. Per-server counts come from the stats socket
  (`show stat`: scur, smax, stot).
- The ledger record is the proxy (its endpoint, its process group: `down` proves it gone the way
  every local pod is proven); the lanes' engines live under `<home>/lanes/<run tag>/`, listed in
  the record's `extra.lanes`, and `down` stops and proves them first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailpod.agent.bootstrap import engine
from tailpod.agent.bootstrap.start_error import EngineStartError
from tailpod.agent_client.driver import GATE_MAX_TOKENS
from tailpod.config import Settings, ttl_deadline
from tailpod.engines.base import MAX_SPEC_K
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger, PodExtra, PodRecord, new_run_tag, operation_stamp
from tailpod.provision.base import PodSpec
from tailpod.provision.local.provider import LocalProvider

LANES_FILE = "lanes.json"
STATS_SOCKET = "haproxy.sock"
SOCKET_PATH_MAX = 97  # HAProxy's limit on a Unix socket's path (its error: "too long (max 97)")
PLAIN_MAXCONN = 1024  # the plain lane takes whatever overflows; HAProxy queues beyond it

Progress = Callable[[float, str], None]
# The pod agent's `probe gate` (agent/probes/gate.py, the sweep's gate): a request, its verdict.
LaneGate = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class LaneSpec:
    name: str  # "spec" or "plain"
    k: int


def parse_lanes(text: str) -> list[LaneSpec]:
    """`spec:K,plain` (in that order: the spec lane is the first HAProxy tries)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) != 2:
        raise ConfigError(f"--lanes takes spec:K,plain; got {text!r}")
    name, _, k = parts[0].partition(":")
    if name != "spec" or not k.isdigit() or not 1 <= int(k) <= MAX_SPEC_K or parts[1] != "plain":
        raise ConfigError(f"--lanes takes spec:K,plain with K from 1 to {MAX_SPEC_K}; "
                          f"got {text!r}")
    return [LaneSpec("spec", int(k)), LaneSpec("plain", 0)]


def check_lane_settings(specs: Sequence[LaneSpec], port: int, spec_k: int,
                        kv_gib: float | None, mem_fraction: float | None) -> None:
    """`up --lanes`' numbers, before anything rents: each lane's memory budget in range, the
    lanes' ports (the two after the proxy's, engine_lanes/pod_launches) inside 1-65535, and an
    `--spec-k` that is either left out (0) or the spec lane's own K."""
    if mem_fraction is not None and not (math.isfinite(mem_fraction) and 0 < mem_fraction < 1):
        raise ConfigError(f"--lane-mem-fraction must be a number between 0 and 1 (each lane's "
                          f"share of GPU memory), got {mem_fraction!r}")
    if kv_gib is not None and not (math.isfinite(kv_gib) and kv_gib > 0):
        raise ConfigError(f"--lane-kv-gib must be a positive number of GiB, got {kv_gib!r}")
    last = port + len(specs)
    if last > 65535:
        raise ConfigError(f"--port {port} leaves no room for the lanes: they listen on the "
                          f"{len(specs)} ports after the proxy's (up to {last}; the last is 65535)")
    spec_lane = next((s for s in specs if s.k), None)
    if spec_k and spec_lane is not None and spec_k != spec_lane.k:
        raise ConfigError(f"--spec-k {spec_k} disagrees with --lanes spec:{spec_lane.k}: the spec "
                          f"lane's K comes from --lanes (drop --spec-k)")


@dataclass
class LaneLaunch:
    """One lane's process: what runs, where it listens, and how its start-up log reads."""

    name: str
    argv: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    budget: dict[str, Any] = field(default_factory=dict)  # the memory budget it was given
    served_model: str | None = None  # the name it serves (None: the gate asks /v1/models)
    engine_config: dict[str, Any] = field(default_factory=dict)
    parse_startup: Callable[[str], dict[str, Any]] | None = None


def haproxy_config(front_port: int, lanes: Sequence[tuple[str, int]], admission_limit: int,
                   stats_socket: Path | str, plain_maxconn: int = PLAIN_MAXCONN,
                   host: str = "127.0.0.1") -> str:
    """The whole haproxy.cfg: `lanes` is [(name, port)], spec first."""
    if admission_limit < 1:
        raise ConfigError("the admission limit must be at least 1")
    servers = []
    for name, port in lanes:
        limit = admission_limit if name == "spec" else plain_maxconn
        servers.append(f"    server {name} {host}:{port} maxconn {limit} check inter 2s")
    return "\n".join([
        "global",
        f"    stats socket {stats_socket} mode 600 level user",
        "    maxconn 8192",
        "defaults",
        "    mode http",
        "    option http-server-close",  # one server connection per request: maxconn = in flight
        "    http-reuse never",
        "    timeout connect 5s",
        "    timeout client 1h",
        "    timeout server 1h",
        "    timeout queue 1h",
        "frontend lanes_in",
        f"    bind {host}:{front_port}",
        "    monitor-uri /health",
        "    acl no_lane nbsrv(lanes) lt 1",
        "    monitor fail if no_lane",
        "    default_backend lanes",
        "backend lanes",
        "    balance first",
        "    option httpchk GET /health",
        *servers,
        "",
    ])  # fmt: skip


def read_stats(sock_path: str | Path, timeout: float = 5.0) -> dict[str, dict[str, Any]]:
    """Per server of backend `lanes`: HAProxy's own counters from `show stat` (scur = in flight
    now, smax = most at once, stot = requests sent, qcur/qmax = queued, status)."""
    from tailpod.agent.bootstrap.haproxy import show_stat

    return parse_stats(show_stat(str(sock_path), timeout))


def parse_stats(text: str) -> dict[str, dict[str, Any]]:
    """`show stat` CSV (read here or by the pod agent's `proxy stats`) → per lane counters."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise TailpodError("HAProxy's stats socket answered no CSV")
    header = lines[0][2:].split(",")
    out: dict[str, dict[str, Any]] = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split(","), strict=False))
        if row.get("pxname") != "lanes" or row.get("svname") in ("FRONTEND", "BACKEND", None):
            continue
        out[row["svname"]] = {
            k: (int(row[k]) if row.get(k, "").isdigit() else row.get(k) or None)
            for k in ("scur", "smax", "stot", "qcur", "qmax", "slim", "status")
        }
    return out


def _haproxy() -> str:
    found = shutil.which("haproxy") or next(
        (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if Path(p).exists()), None)
    if not found:
        raise ConfigError("haproxy is not installed",
                          hint="apt-get install -y haproxy (scripts/system-requirements.sh)")
    return found


def lanes_home(settings: Settings, run_tag: str) -> Path:
    return settings.home / "lanes" / run_tag


def _stop_started(provider: LocalProvider, tags: list[str]) -> None:
    for tag in reversed(tags):
        with contextlib.suppress(TailpodError):  # best effort; down proves what is left
            provider.terminate(provider.pod_id_for(tag))


def up_lanes(settings: Settings, ledger: Ledger, launches: Sequence[LaneLaunch],
             admission_limit: int, front_port: int, progress: Progress | None = None,
             engine_cfg: dict[str, Any] | None = None, run_dir: Path | None = None,
             startup_timeout_s: float | None = None, gpu: str = "local CPU",
             gpu_count: int = 0, gate: LaneGate | None = None) -> PodRecord:
    """Start the lanes one after the other, then HAProxy in front; the ledger holds the proxy as
    the pod and every lane in `extra.lanes`. With `gate`, the spec lane is gated against the
    plain lane for token identity once both are healthy and before the proxy starts: a failed
    (or unrunnable) gate refuses the deployment, with the reason in the record and lanes.json.
    Anything started is stopped again on failure."""
    from tailpod.provision.teardown import run_dir_for

    verdict: dict[str, Any] | None = None
    names = [lane.name for lane in launches]
    if names != ["spec", "plain"]:
        raise ConfigError(f"lanes must be spec then plain, got {names}")
    binary = _haproxy()
    ports = [front_port, *(lane.port for lane in launches)]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"the proxy and the lanes need distinct ports, got {ports}")
    for port in ports:
        if engine.port_open("127.0.0.1", port):
            raise ConfigError(f"port {port} is already in use", hint="pass another --port")
    run_tag = new_run_tag()
    ledger.put(PodRecord(
        run_tag=run_tag, provider="local", engine=engine_cfg or {}, gpu=gpu,
        gpu_count=gpu_count, price_per_hr=0.0,
        ttl_expires_at=ttl_deadline(settings.ttl_hours, time.time()),
        extra=PodExtra(lanes={"admission_limit": admission_limit, "lanes": {}}),
        # who runs this `up`: a killed one reads `interrupted` in `status` (adversary #13)
        operation=operation_stamp("lanes-start"),
    ))  # fmt: skip
    home = lanes_home(settings, run_tag)
    lane_provider = LocalProvider(home)
    proxy_provider = LocalProvider(settings.home)
    started: list[str] = []
    timeout = startup_timeout_s if startup_timeout_s is not None else settings.startup_timeout_s
    lane_rows: dict[str, Any] = {}
    try:
        for lane in launches:  # one after the other: each is healthy before the next starts
            tag = f"{run_tag}-{lane.name}"
            info = lane_provider.create(PodSpec(
                run_tag=tag, gpu_preference=[], image="local", start_command=lane.argv,
                env={**lane.env, "TAILPOD_ARM_LABEL": lane.name}, ports=[lane.port]))
            started.append(tag)
            state = lane_provider.engine_state(tag)
            assert state is not None
            state["health_path"] = lane.health_path
            try:
                took = engine.wait_healthy(state, timeout, progress)
            except EngineStartError as exc:
                tail = "\n    ".join(exc.tail[-12:])
                raise TailpodError(f"lane {lane.name}: {exc}; last lines of {state['log']}:"
                                   f"\n    {tail}") from None
            log_text = Path(state["log"]).read_text(encoding="utf-8", errors="replace")
            startup = lane.parse_startup(log_text) if lane.parse_startup else {}
            lane_rows[lane.name] = {
                "port": lane.port, "endpoint": info.endpoint, "pod_id": info.pod_id,
                "state_dir": str(lane_provider.state_dir(tag)), "argv": lane.argv,
                "budget": lane.budget, "engine_config": lane.engine_config,
                "startup": startup, "startup_s": took,
                "started_after": started[-2] if len(started) > 1 else None,
            }  # fmt: skip
            ledger.update(run_tag, event=f"lane-{lane.name}-healthy",
                          extra={"lanes": {"admission_limit": admission_limit,
                                           "lanes": dict(lane_rows)}})
        verdict = gate_lanes(gate, launches) if gate is not None else None
        if verdict is not None:
            ledger.update(run_tag, event=f"lanes-gate-{verdict['status']}",
                          extra={"lanes": {"admission_limit": admission_limit,
                                           "lanes": dict(lane_rows), "gate": verdict}})
            if verdict["status"] != "pass":
                raise LaneGateFailed(verdict)
        cfg_path = home / "haproxy.cfg"
        sock = _socket_path(home, run_tag)
        cfg_path.write_text(haproxy_config(
            front_port, [(lane.name, lane.port) for lane in launches], admission_limit, sock))
        _check_config(binary, cfg_path)
        info = proxy_provider.create(PodSpec(
            run_tag=run_tag, gpu_preference=[], image="local",
            start_command=[binary, "-db", "-f", str(cfg_path)],
            env={"TAILPOD_ARM_LABEL": "haproxy"}, ports=[front_port]))
        state = proxy_provider.engine_state(run_tag)
        assert state is not None
        took = engine.wait_healthy(state, 30.0, progress, poll=0.2)
    except BaseException:
        _stop_started(lane_provider, started)
        if proxy_provider.engine_state(run_tag) is not None:
            _stop_started(proxy_provider, [run_tag])
        _settle_failed(ledger, run_tag, lane_provider, started, run_dir or run_dir_for(
            settings, run_tag))
        raise
    lanes_extra = {
        "admission_limit": admission_limit, "front_port": front_port,
        **({"gate": verdict} if verdict is not None else {}),
        "haproxy": {"binary": binary, "config": str(cfg_path), "stats_socket": str(sock),
                    "version": _haproxy_version(binary), "startup_s": took},
        "lanes": lane_rows,
    }  # fmt: skip
    spec_facts = (lane_rows["spec"].get("startup") or {})
    ledger.update(run_tag, event="lanes-up", status="running", pod_id=info.pod_id,
                  endpoint=info.endpoint, operation={},
                  extra={"lanes": lanes_extra, "startup": spec_facts, "startup_s": took,
                         "arms": {name: {"startup": row["startup"], "startup_s": row["startup_s"],
                                         "argv": row["argv"]}
                                  for name, row in lane_rows.items()}})
    final = ledger.get(run_tag)
    assert final is not None
    write_lanes_json(final, run_dir or run_dir_for(settings, run_tag))
    return final


class LaneGateFailed(TailpodError):
    """The spec lane's greedy tokens differ from the plain lane's (or the gate could not run):
    the deployment is refused, never served with a lane that changes the output."""

    def __init__(self, verdict: dict[str, Any]) -> None:
        super().__init__(f"the spec lane is refused: {verdict['reason']}",
                         hint="the spec lane must return the plain lane's tokens under greedy "
                              "decoding; check the draft method and K")
        self.verdict = verdict


def gate_lanes(gate: LaneGate, launches: Sequence[LaneLaunch],
               max_tokens: int = GATE_MAX_TOKENS) -> dict[str, Any]:
    """The sweep's token-identity gate, run by the agent with the plain lane as the reference
    and the spec lane as the candidate, both reached on their own ports (not through the proxy,
    which would send both to the spec lane). Its verdict, with a `reason` unless it passed."""
    by_name = {lane.name: lane for lane in launches}
    plain, spec = by_name["plain"], by_name["spec"]
    request = {"reference_url": f"http://127.0.0.1:{plain.port}",
               "candidate": f"http://127.0.0.1:{spec.port}",
               "reference_model": plain.served_model, "candidate_model": spec.served_model,
               "max_tokens": max_tokens}  # fmt: skip
    try:
        verdict = dict(gate(request))
    except TailpodError as exc:
        return {"status": "error", "reason": f"the token-identity gate could not run: "
                                             f"{exc.message}"}
    if verdict.get("status") == "pass":
        return {**verdict, "reference": "plain lane", "candidate": "spec lane"}
    where = verdict.get("first_mismatch") or {}
    return {**verdict, "status": "fail", "reference": "plain lane", "candidate": "spec lane",
            "reason": (f"token-identity gate failed: prompt {where.get('prompt')} differs from "
                       f"the plain lane at token {where.get('position')} (plain "
                       f"{where.get('reference_token')!r}, spec {where.get('candidate_token')!r})")}


def up_local_lanes(settings: Settings, cfg: Any, ledger: Ledger, specs: Sequence[LaneSpec],
                   admission_limit: int, on_cpu: bool, kv_gib: float | None,
                   mem_fraction: float | None, progress: Progress | None = None) -> PodRecord:
    """`up --lanes` on this machine (pods/kinds.py LocalPods.up_lanes): the model, the engine,
    the GPUs both lanes share and each lane's arm checked before anything is recorded, then
    both lanes and HAProxy (up_lanes)."""
    from tailpod.engines.base import EngineConfig
    from tailpod.engines.checkpoint import check_arms
    from tailpod.engines.local_install import (
        check_engine_installed,
        check_local_gpus,
        check_model,
        engine_python,
    )

    check_model(cfg.model)
    check_engine_installed(engine_python(settings), cfg.engine)
    gpus = check_local_gpus(cfg)["gpus"]  # both lanes share this machine's GPU(s), if any
    gpu, gpu_count = (str(gpus[0]["name"]), max(1, cfg.tensor_parallel)) if gpus else \
        ("local CPU", 0)
    launches = engine_lanes(settings, cfg, specs, on_cpu, kv_gib, mem_fraction)
    check_arms([EngineConfig.from_json(lane.engine_config) for lane in launches], settings)
    return up_lanes(settings, ledger, launches, admission_limit, cfg.port, progress,
                    engine_cfg=cfg.to_json(), gpu=gpu, gpu_count=gpu_count,
                    gate=local_gate(settings))


def local_gate(settings: Settings) -> LaneGate:
    """The gate run by the agent as a child of this machine (as the local sweep runs it)."""
    from tailpod.agent_client.driver import PodAgent, SubprocessTransport

    def run(request: dict[str, Any]) -> dict[str, Any]:
        with PodAgent(SubprocessTransport(settings.home / "agent")) as agent:
            return agent.gate(request)

    return run


def _settle_failed(ledger: Ledger, run_tag: str, lane_provider: LocalProvider, started: list[str],
                   run_dir: Path) -> None:
    """A refused or failed `up`: the record terminated only once every lane is proven gone (else
    it stays for `down` to settle), and lanes.json saying why when the gate refused it."""
    alive = [tag for tag in started if (st := lane_provider.engine_state(tag)) is not None
             and engine.group_alive(int(st["pgid"]))]
    record = ledger.update(run_tag, event="lanes-failed",
                           status="failed" if alive else "terminated", operation={})
    if (record.extra.lanes or {}).get("gate"):
        write_lanes_json(record, run_dir, counts={})


def _socket_path(home: Path, run_tag: str) -> Path:
    """The stats socket: in the lanes directory, or, when that path is longer than a Unix socket
    name may be (HAProxy allows 97 bytes), in a private directory of the temp dir."""
    import os
    import tempfile

    sock = home / STATS_SOCKET
    if len(str(sock)) <= SOCKET_PATH_MAX:
        return sock
    short = Path(tempfile.gettempdir()) / f"tailpod-lanes-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    os.chmod(short, 0o700)
    return short / f"{run_tag}.sock"


def _check_config(binary: str, cfg_path: Path) -> None:
    import subprocess

    res = subprocess.run([binary, "-c", "-f", str(cfg_path)], capture_output=True, text=True,
                         timeout=30)
    if res.returncode != 0:
        raise TailpodError(f"haproxy rejected {cfg_path}: {(res.stdout + res.stderr)[-800:]}")


def _haproxy_version(binary: str) -> str | None:
    import subprocess

    try:
        out = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0] if out else None


def lane_counts(record: PodRecord, settings: Settings | None = None
                ) -> dict[str, dict[str, Any]] | None:
    """HAProxy's per-lane counters now, or None when the proxy does not answer. The stats socket
    is the record's, or (a record that lost `extra.lanes`, given `settings`) the one the lanes
    directory's haproxy.cfg names."""
    lanes = record.extra.lanes or {}
    sock = (lanes.get("haproxy") or {}).get("stats_socket")
    if not sock and settings is not None:
        sock = _socket_in_config(lanes_home(settings, record.run_tag) / "haproxy.cfg")
    if not sock or not Path(sock).exists():
        return None
    try:
        return read_stats(sock)
    except (OSError, TailpodError):
        return None


def _socket_in_config(cfg_path: Path) -> str | None:
    try:
        text = cfg_path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        words = line.split()
        if words[:2] == ["stats", "socket"] and len(words) > 2:
            return words[2]
    return None


def write_lanes_json(record: PodRecord, run_dir: Path,
                     counts: dict[str, dict[str, Any]] | None = None,
                     final: bool = False) -> Path:
    """lanes.json: the admission limit, each lane's start facts and its request count (`final`:
    the counts read at `down`, the last ones the proxy gave)."""
    lanes = record.extra.lanes or {}
    counts = counts if counts is not None else lane_counts(record)
    out = {
        "run_tag": record.run_tag,
        "endpoint": record.endpoint,
        "admission_limit": lanes.get("admission_limit"),
        "haproxy": lanes.get("haproxy"),
        "lanes": {
            name: {**{k: row.get(k) for k in ("port", "budget", "engine_config", "startup",
                                              "startup_s", "started_after")},
                   "requests": (counts or {}).get(name, {}).get("stot"),
                   "max_in_flight": (counts or {}).get(name, {}).get("smax")}
            for name, row in (lanes.get("lanes") or {}).items()
        },
        "counted_at": time.time() if counts is not None else None,
        "counts_source": "haproxy stats socket (show stat: stot, smax)" if counts else None,
        "counts_final": bool(final and counts is not None),
        **({"gate": lanes["gate"]} if lanes.get("gate") else {}),
    }  # fmt: skip
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LANES_FILE
    path.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    return path


def lanes_status(settings: Settings, record: PodRecord) -> dict[str, Any] | None:
    """Both lanes and the proxy: alive, healthy, and HAProxy's counts."""
    lanes = record.extra.lanes
    if not lanes:
        return None
    counts = lane_counts(record) or {}
    rows = {}
    for name, row in (lanes.get("lanes") or {}).items():
        state = engine.read_state(Path(row["state_dir"]))
        alive = bool(state and engine.is_running(state))
        rows[name] = {
            "port": row["port"], "alive": alive,
            "healthy": alive and state is not None and engine.healthy(
                "127.0.0.1", int(row["port"]), state.get("health_path", "/health")),
            "requests": counts.get(name, {}).get("stot"),
            "in_flight": counts.get(name, {}).get("scur"),
            "proxy_status": counts.get(name, {}).get("status"),
        }  # fmt: skip
    proxy = LocalProvider(settings.home).engine_state(record.run_tag)
    return {
        "admission_limit": lanes.get("admission_limit"),
        "proxy": {"endpoint": record.endpoint,
                  "alive": bool(proxy and engine.is_running(proxy))},
        "lanes": rows,
    }


def record_final_counts(settings: Settings, record: PodRecord,
                        counts: dict[str, dict[str, Any]] | None = None,
                        read: bool = True) -> dict[str, Any]:
    """Rewrite the run directory's lanes.json with the proxy's last per-lane counts, before
    anything is stopped (`counts` as read elsewhere, e.g. by a pod's agent; else read here when
    `read`). A record that lost `extra.lanes` (adopted by `down --all`) updates the lanes.json
    written at `up`. When there are no counts to read, the file keeps the counts it had and says
    they are not final, and one already final is left as it is (a second `down`): never a count
    that was not read."""
    from tailpod.provision.teardown import run_dir_for

    run_dir = run_dir_for(settings, record.run_tag)
    path = run_dir / LANES_FILE
    if counts is None and read:
        counts = lane_counts(record, settings)
    if counts is not None and record.extra.lanes:
        write_lanes_json(record, run_dir, counts, final=True)
        return {"counts_final": True, "lanes_json": str(path)}
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        if record.extra.lanes:  # none written yet: the record's facts, no counts
            write_lanes_json(record, run_dir, {}, final=False)
            return {"counts_final": False, "lanes_json": str(path)}
        return {"counts_final": False, "lanes_json": None}
    if counts is None:
        if not doc.get("counts_final"):
            doc["counts_final"] = False
            path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return {"counts_final": bool(doc.get("counts_final")), "lanes_json": str(path)}
    for name, row in (doc.get("lanes") or {}).items():
        row["requests"] = counts.get(name, {}).get("stot")
        row["max_in_flight"] = counts.get(name, {}).get("smax")
    doc["counted_at"] = time.time()
    doc["counts_source"] = "haproxy stats socket (show stat: stot, smax)"
    doc["counts_final"] = True
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return {"counts_final": True, "lanes_json": str(path)}


def settle_lanes(settings: Settings, ledger: Ledger, record: PodRecord) -> PodRecord:
    """Before the teardown of a local run: for a lanes run, lanes.json's final counts, then every
    lane engine stopped and proven gone (the proxy is left to the record's own proven teardown).
    The one path of `down TAG`, `down --all`, `down --expired` and `benchmark --deploy`; any
    other run is returned as it is."""
    lanes_dir = lanes_home(settings, record.run_tag)
    if record.provider != "local" or not (record.extra.lanes or lanes_dir.is_dir()):
        return record
    counted = record_final_counts(settings, record)
    proofs = stop_lanes(settings, record)  # a lost record's lanes: the provider's terminate
    return ledger.update(record.run_tag, event="lanes-stopped",
                         extra=dataclasses.replace(record.extra, lanes_down=proofs, lanes_counts=counted))


def stop_lanes(settings: Settings, record: PodRecord) -> list[dict[str, Any]]:
    """Stop every lane engine the record lists (the proxy stays for the record's own proven
    teardown); each lane proven gone: its process group and its port. Raises when one is not."""
    lanes = record.extra.lanes or {}
    proofs, alive = [], []
    for name, row in (lanes.get("lanes") or {}).items():
        state = engine.read_state(Path(row["state_dir"]))
        if state is None:
            proofs.append({"lane": name, "gone": True, "detail": "never started"})
            continue
        gone = engine.stop(state)
        proofs.append({"lane": name, "gone": gone, "pgid": state["pgid"],
                       "port_closed": not engine.port_open("127.0.0.1", int(state["port"]))})
        if not gone:
            alive.append(f"lane {name}: kill -9 -{state['pgid']}")
    if alive:
        raise TailpodError("lane engines still alive: " + "; ".join(alive))
    return proofs


# --- lanes of a real engine (`tailpod up --provider local --lanes spec:K,plain`) -----------------


DEFAULT_LANE_KV_GIB = 1.0  # CPU: VLLM_CPU_KVCACHE_SPACE per lane
DEFAULT_LANE_MEM_FRACTION = 0.45  # GPU: each lane's --gpu-memory-utilization (two fit in 0.9)


def engine_lanes(settings: Settings, cfg: Any, specs: Sequence[LaneSpec], on_cpu: bool,
                 kv_gib: float | None = None,
                 mem_fraction: float | None = None) -> list[LaneLaunch]:
    """One LaneLaunch per lane of `cfg`'s checkpoint: the spec lane with K draft tokens, the plain
    lane without, on the two ports after the proxy's, each with its own memory budget."""
    from dataclasses import replace

    from tailpod.engines.adapters import get_adapter
    from tailpod.engines.local_install import engine_python, local_engine_env

    adapter = get_adapter(cfg.engine)
    out = []
    for i, lane in enumerate(specs):
        spec = replace(cfg.spec, k=lane.k, method=(cfg.spec.method or "ngram") if lane.k else None,
                       draft_model=cfg.spec.draft_model if lane.k else None)
        env: dict[str, str] = {}
        budget: dict[str, Any]
        if on_cpu:
            gib = kv_gib if kv_gib is not None else DEFAULT_LANE_KV_GIB
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{gib:g}"
            budget = {"VLLM_CPU_KVCACHE_SPACE_gib": gib}
            lane_cfg = replace(cfg, port=cfg.port + 1 + i, spec=spec)
        else:
            frac = mem_fraction if mem_fraction is not None else DEFAULT_LANE_MEM_FRACTION
            budget = {"mem_fraction": frac}
            lane_cfg = replace(cfg, port=cfg.port + 1 + i, spec=spec, mem_fraction=frac)
        plan = adapter.launch_plan(lane_cfg, python=engine_python(settings))
        out.append(LaneLaunch(
            name=lane.name, argv=plan.argv, port=lane_cfg.port,
            env={**plan.env, **local_engine_env(settings, lane.name), **env},
            health_path=plan.health_path, budget=budget, engine_config=lane_cfg.to_json(),
            served_model=lane_cfg.served_name,
            parse_startup=lambda text: adapter.parse_startup(text).to_json(),
        ))  # fmt: skip
    return out


def limit_from_decision(path: Path) -> tuple[int, int]:
    """(K, admission limit) of a decision.json whose deployment is two lanes, checked against
    the decision's model (results/deployment.py) before anything rents."""
    from tailpod.results.deployment import read_decision

    dep = read_decision(path)
    if dep["kind"] != "lanes":
        raise ConfigError(f"{path}: the deployment is {dep['kind']!r}, not two lanes",
                          hint=f"a static deployment needs no proxy: `{_static_up(dep)}`")
    return int(dep["lanes"][0]["k"]), int(dep["admission_limit"])


def _static_up(dep: dict[str, Any]) -> str:
    """The `up` that deploys a static decision: its own K and method (newcomer 3.2); the
    generic form where the decision names no K (a mixed or empty deployment)."""
    k = dep.get("k") if dep["kind"] == "static" else None
    if not isinstance(k, int):
        return "tailpod up --spec-k K"
    method = dep.get("method")
    return f"tailpod up --spec-k {k}" + (f" --spec-method {method}" if k and method else "")

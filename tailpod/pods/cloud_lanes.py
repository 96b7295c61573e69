"""Two lanes on a rented pod: `tailpod up --provider runpod|vastai --lanes spec:K,plain`.

The pod is rented, reached and its dead-man switch armed exactly as for one engine
(pods/cloud.py); only the start differs. Through the pod's agent over its one SSH session:
`proxy prepare` first (HAProxy found, or installed from the distribution's package, the config
pods/lanes.py writes checked: a pod that cannot have HAProxy is refused before any lane starts);
the spec lane, then the plain lane once the spec lane is healthy (vllm-project/vllm#55827), each an
`engine start` in its own state directory (`<pod state>/lanes/<lane>`) with its own memory budget;
the token-identity gate of the spec lane against the plain lane (the sweep's gate, agent
`probe gate`); then HAProxy started like an engine on the pod's engine port, the one port the pod
exposes. `status` reads each lane, the proxy and HAProxy's counters through the agent; `down`
records the final counts, stops the lanes and then the proxy, each proven stopped by the agent,
before the pod itself is terminated with the usual proof.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tailpod.agent_client.driver import EngineStarted, PodAgent
from tailpod.config import Settings
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import EngineConfig
from tailpod.engines.checkpoint import check_arms
from tailpod.engines.vllm import spelled_for_image
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import cloud as cloud_pods
from tailpod.pods import lanes as lanes_mod
from tailpod.pods.base import UpOptions
from tailpod.pods.lanes import LaneLaunch, LaneSpec
from tailpod.provision.apiclient import time_left
from tailpod.provision.base import PodInfo
from tailpod.provision.ssh.client import SshTarget
from tailpod.provision.teardown import LifecyclePolicy, run_dir_for

PROXY = "proxy"


def lane_dir(state_dir: str, name: str) -> str:
    return f"{state_dir}/lanes/{name}"


def pod_launches(settings: Settings, cfg: EngineConfig, specs: Sequence[LaneSpec],
                 mem_fraction: float | None = None,
                 cpu_kv_gib: float | None = None) -> list[LaneLaunch]:
    """The lanes of `cfg`'s checkpoint as the pod runs them: the pod's Python, a GPU memory
    budget each (`--gpu-memory-utilization`), or on a pod without GPUs (`cpu_kv_gib`, the
    sandbox's CPU engine) a KV cache of that many GiB each (`VLLM_CPU_KVCACHE_SPACE`); ports
    after the proxy's."""
    adapter = get_adapter(cfg.engine)
    cfg = spelled_for_image(cfg, settings.image)  # flags the image's vLLM release knows
    frac = mem_fraction if mem_fraction is not None else lanes_mod.DEFAULT_LANE_MEM_FRACTION
    out = []
    for i, lane in enumerate(specs):
        spec = replace(cfg.spec, k=lane.k, method=(cfg.spec.method or "ngram") if lane.k else None,
                       draft_model=cfg.spec.draft_model if lane.k else None)
        lane_cfg = replace(cfg, port=cfg.port + 1 + i, spec=spec, mem_fraction=frac)
        plan = adapter.launch_plan(lane_cfg, python=cloud_pods.pod_python(settings))
        env, budget = dict(plan.env), {"mem_fraction": frac}
        if cpu_kv_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{cpu_kv_gib:g}"
            budget = {"VLLM_CPU_KVCACHE_SPACE_gib": cpu_kv_gib}
        out.append(LaneLaunch(
            name=lane.name, argv=plan.argv, port=lane_cfg.port, env=env,
            health_path=plan.health_path, budget=budget,
            engine_config=lane_cfg.to_json(), served_model=lane_cfg.served_name,
            parse_startup=lambda text: adapter.parse_startup(text).to_json(),
        ))  # fmt: skip
    return out


def pod_socket_path(proxy_dir: str) -> str:
    """The stats socket in the proxy's directory, or in /tmp when that path is longer than
    HAProxy takes for a Unix socket (97 bytes, as pods/lanes.py's local one)."""
    sock = f"{proxy_dir}/haproxy.sock"
    if len(sock) <= lanes_mod.SOCKET_PATH_MAX:
        return sock

    return f"/tmp/tailpod-lanes-{hashlib.sha256(proxy_dir.encode()).hexdigest()[:16]}.sock"


def _start(agent: PodAgent, launch: LaneLaunch, state_dir: str, timeout_s: float,
           label: str | None = None, proxy: bool = False) -> dict[str, Any]:
    payload = {
        "plan": {"argv": launch.argv, "env": launch.env, "host": "127.0.0.1",
                 "port": launch.port, "label": label or launch.name,
                 "health_path": launch.health_path, "proxy": proxy},
        "state_dir": state_dir, "timeout": float(timeout_s),
        "env_file": f"{agent.state_dir}/pod.env",
    }  # fmt: skip
    return agent.call("engine start", payload=payload, timeout_s=timeout_s + 120)


def _stop(agent: PodAgent, state_dir: str, timeout_s: float = 180) -> dict[str, Any]:
    return agent.call("engine stop", payload={"state_dir": state_dir}, timeout_s=timeout_s)


def up_pod_lanes(settings: Settings, cfg: EngineConfig, ledger: Ledger,
                 specs: Sequence[LaneSpec], admission_limit: int, mem_fraction: float | None,
                 kv_gib: float | None, say: Callable[[str], None],
                 options: UpOptions) -> tuple[PodRecord, PodInfo]:
    """`up --provider runpod|vastai --lanes` (pods/kinds.py CloudPods.up_lanes): the pod rented
    as for one engine, then both lanes, the gate and HAProxy started on it by its agent; each
    lane's arm checked before the rental, lanes.json begun with no counts."""
    # --lane-kv-gib: a pod without GPUs (the sandbox's CPU engine) takes a CPU KV budget instead
    launches = pod_launches(settings, cfg, specs, mem_fraction, kv_gib)
    check_arms([EngineConfig.from_json(lane.engine_config) for lane in launches], settings)
    record, info = cloud_pods.up_cloud(
        settings, cfg, ledger, say, allow_unpinned=options.allow_unpinned,
        allow_nonephemeral=options.allow_nonephemeral, use_tailnet=options.use_tailnet,
        keep_on_failure=options.keep_on_failure, volume=options.volume,
        start=lambda agent, s, c, said: start_lanes_on_pod(agent, s, c, launches,
                                                           admission_limit, said))
    lanes_mod.write_lanes_json(record, run_dir_for(settings, record.run_tag), counts={})
    return record, info


def start_lanes_on_pod(agent: PodAgent, settings: Settings, cfg: EngineConfig,
                       launches: Sequence[LaneLaunch], admission_limit: int,
                       say: Any = None) -> EngineStarted:
    """HAProxy prepared, both lanes one after the other, the gate, then HAProxy on `cfg.port`;
    what pods/cloud.py records as the pod's start (the spec lane's facts, and `lanes` beside
    them). On any failure what was started on the pod is stopped before the error goes up (and
    `up` then tears the pod down with its proof)."""
    if [lane.name for lane in launches] != ["spec", "plain"]:
        raise TailpodError("lanes must be spec then plain")
    started: list[str] = []
    rows: dict[str, Any] = {}
    records: dict[str, dict[str, Any]] = {}
    try:
        # HAProxy first: a pod that has none and cannot install it is refused before either
        # lane engine starts (they took 7-8 s of the pod's time first: adversary-2026-12 row 10)
        proxy_dir = lane_dir(agent.state_dir, PROXY)
        sock = pod_socket_path(proxy_dir)
        text = lanes_mod.haproxy_config(cfg.port, [(lane.name, lane.port) for lane in launches],
                                        admission_limit, sock)
        prepared = agent.call("proxy prepare", payload={"config_text": text,
                                                        "state_dir": proxy_dir}, timeout_s=900)
        if say:
            say(f"HAProxy {prepared.get('version')}"
                + (" (installed from the distribution's package)"
                   if prepared.get("installed_now") else ""))
        for lane in launches:
            where = lane_dir(agent.state_dir, lane.name)
            if say:
                say(f"starting the {lane.name} lane on port {lane.port}")
            rec = _start(agent, lane, where, settings.startup_timeout_s)
            started.append(where)
            records[lane.name] = rec
            startup = lane.parse_startup(str(rec.get("log_text") or "")) if lane.parse_startup \
                else {}
            rows[lane.name] = {
                "port": lane.port, "state_dir": where, "argv": lane.argv, "budget": lane.budget,
                "engine_config": lane.engine_config, "startup": startup,
                "startup_s": rec.get("startup_s"),
                "started_after": f"{launches[0].name} lane" if lane is launches[1] else None,
            }  # fmt: skip
        verdict = lanes_mod.gate_lanes(agent.gate, launches)
        if verdict["status"] != "pass":
            raise lanes_mod.LaneGateFailed(verdict)
        proxy = LaneLaunch(name=PROXY, argv=[prepared["binary"], "-db", "-f",
                                              prepared["config"]], port=cfg.port)
        proxy_rec = _start(agent, proxy, proxy_dir, 60.0, label="haproxy", proxy=True)
        started.append(proxy_dir)
    except BaseException:
        for where in reversed(started):
            with contextlib.suppress(TailpodError):  # up's teardown of the pod proves the rest
                _stop(agent, where)
        raise
    spec_rec, spec_launch = records["spec"], launches[0]
    lanes_extra = {
        "admission_limit": admission_limit, "front_port": cfg.port, "gate": verdict,
        "haproxy": {"binary": prepared["binary"], "config": prepared["config"],
                    "stats_socket": sock, "version": prepared.get("version"),
                    "installed_now": prepared.get("installed_now"), "state_dir": proxy_dir,
                    "startup_s": proxy_rec.get("startup_s")},
        "lanes": rows, "on_pod": True,
    }  # fmt: skip

    facts = get_adapter(cfg.engine).parse_startup(str(spec_rec.get("log_text") or ""))
    return EngineStarted(record={**spec_rec, "lanes": lanes_extra}, facts=facts,
                         argv=list(spec_launch.argv))


def pod_on_cpu(record: PodRecord) -> bool:
    """The pod's agent found no GPU (the sandbox's CPU engine): lanes get a CPU KV budget."""
    machine = record.extra.machine
    return isinstance(machine, dict) and not machine.get("gpus")


def pod_counts(agent: PodAgent, record: PodRecord,
               timeout_s: float = 60) -> dict[str, dict[str, Any]] | None:
    sock = ((record.extra.lanes or {}).get("haproxy") or {}).get("stats_socket")
    if not sock:
        return None
    try:
        return lanes_mod.parse_stats(str(agent.call(
            "proxy stats", payload={"socket": sock}, timeout_s=timeout_s)["show_stat"]))
    except (TailpodError, KeyError):
        return None


def _agent(settings: Settings, record: PodRecord, wait_s: float = 15) -> PodAgent:
    return cloud_pods.open_pod_agent(settings, SshTarget.from_record(record.ssh), wait_s)


# `down`'s settle step comes before the pod's terminate, so under a --timeout deadline
# (apiclient.call_deadline) it may spend at most half of what is left, every SSH wait and agent
# call cut to that; with less than SETTLE_MIN_S to spend it does not ask the pod at all.
SETTLE_MIN_S = 5.0


def _cut(budget: LifecyclePolicy, wanted_s: float) -> float:
    """`wanted_s` cut to what the settle's deadline leaves; none left ends the settle (an error:
    the pod is then left to its terminate)."""
    left = budget.left(wanted_s)
    if left <= 0:
        raise TailpodError("the --timeout deadline left no more time to ask the pod")
    return left


def status(settings: Settings, record: PodRecord) -> dict[str, Any]:
    """Both lanes and the proxy as the pod's agent sees them, with HAProxy's counts; unknown
    (with the reason) when the pod cannot be reached: never a healthy guess."""
    lanes = record.extra.lanes or {}
    try:
        with _agent(settings, record) as agent:
            counts = pod_counts(agent, record) or {}
            rows = {}
            for name, row in (lanes.get("lanes") or {}).items():
                st = agent.call("engine status", payload={"state_dir": row["state_dir"]},
                                timeout_s=60)
                rows[name] = {"port": row["port"], "alive": bool(st.get("running")),
                              "healthy": bool(st.get("healthy")),
                              "requests": counts.get(name, {}).get("stot"),
                              "in_flight": counts.get(name, {}).get("scur"),
                              "proxy_status": counts.get(name, {}).get("status")}
            proxy = agent.call("engine status", payload={
                "state_dir": (lanes.get("haproxy") or {}).get("state_dir")}, timeout_s=60)
    except TailpodError as exc:
        return {"admission_limit": lanes.get("admission_limit"), "unknown": exc.message,
                "proxy": {"endpoint": record.endpoint, "alive": None}, "lanes": {}}
    return {"admission_limit": lanes.get("admission_limit"),
            "proxy": {"endpoint": record.endpoint, "alive": bool(proxy.get("running"))},
            "lanes": rows}


def settle(settings: Settings, ledger: Ledger, record: PodRecord) -> PodRecord:
    """Before the pod's own teardown: the final counts into lanes.json, then the lanes and the
    proxy stopped by the agent, each proven stopped there. A pod that cannot be reached is left
    to the teardown (terminating the pod stops all three) and lanes.json says its counts are
    not final."""
    if record.status == "terminated":  # proven down already: nothing runs there to ask
        return record
    left = time_left()
    budget = LifecyclePolicy().within(None if left is None else left / 2)
    try:
        if left is not None and left / 2 < SETTLE_MIN_S:
            raise TailpodError(f"the --timeout deadline leaves {left:.0f} s, too little to ask "
                               "the pod before its terminate")
        with _agent(settings, record, _cut(budget, 15)) as agent:
            return settle_with(agent, settings, ledger, record, budget)
    except TailpodError as exc:
        lanes_mod.record_final_counts(settings, record, None, read=False)
        return ledger.update(record.run_tag, event="lanes-not-settled", extra=dataclasses.replace(
            record.extra, lanes_down={"unknown": exc.message,
                                      "then": "the pod's termination stops all three"}))


def settle_with(agent: PodAgent, settings: Settings, ledger: Ledger,
                record: PodRecord, budget: LifecyclePolicy | None = None) -> PodRecord:
    """`settle` through an agent session already open (a sweep's); `budget` bounds each call."""
    budget = budget or LifecyclePolicy()  # no deadline: each call keeps its own timeout
    lanes = record.extra.lanes or {}
    counts = pod_counts(agent, record, _cut(budget, 60))
    lanes_mod.record_final_counts(settings, record, counts, read=False)
    stops = [(name, str(row["state_dir"])) for name, row in (lanes.get("lanes") or {}).items()]
    proxy_dir = (lanes.get("haproxy") or {}).get("state_dir")
    if proxy_dir:
        stops.append((PROXY, str(proxy_dir)))
    proofs: list[dict[str, Any]] = []
    for name, state_dir in stops:
        try:  # one stop that fails or finds no time is its own entry; the counts stay final
            proofs.append({"lane": name, **_stop(agent, state_dir, _cut(budget, 180))})
        except TailpodError as exc:
            proofs.append({"lane": name, "unknown": exc.message,
                           "then": "the pod's termination stops it"})
    return ledger.update(record.run_tag, event="lanes-stopped",
                         extra=dataclasses.replace(record.extra, lanes_down=proofs,
                                                   lanes_counts={"counts_final": counts is not None}))


def settle_lanes_run(settings: Settings, ledger: Ledger, record: PodRecord) -> PodRecord:
    """The step before any teardown of a lanes run, on this machine or on a pod."""
    if (record.extra.lanes or {}).get("on_pod") and record.ssh:
        return settle(settings, ledger, record)
    return lanes_mod.settle_lanes(settings, ledger, record)


def lanes_run_status(settings: Settings, record: PodRecord) -> dict[str, Any] | None:
    if (record.extra.lanes or {}).get("on_pod") and record.ssh:
        return status(settings, record)
    return lanes_mod.lanes_status(settings, record)

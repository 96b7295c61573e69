"""The pod kinds, one row each: which kind serves a provider name. A new kind of machine is a module
under pods/ plus one row here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from tailpod.agent_client.driver import ArmStart, PodAgent
from tailpod.config import Settings
from tailpod.engines.adapters import get_adapter, require_cloud_engine
from tailpod.engines.base import EngineAdapter, EngineConfig
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import cloud, local
from tailpod.pods.base import (
    LanesOptions,
    PodKind,
    Progress,
    UpOptions,
    UpResult,
    refuse_volume,
    settle_then_teardown,
)
from tailpod.pods.engine_log import EngineLog, agent_engine_log, local_engine_log
from tailpod.pods.ssh_box import SshBoxPods
from tailpod.provision.base import BillingEvidence
from tailpod.provision.teardown import LifecyclePolicy

Say = Callable[[str], None]


class CloudPods:
    """A rented pod (RunPod, vast.ai): the engine and the agent on the pod, reached over SSH."""

    name = "cloud"
    no_engine_left = "the pod bills with no engine (its TTL and dead-man switch still cover it)"

    def refuse(self, options: UpOptions) -> None:
        return None  # a rented pod honours every option

    def starts_engine_when_none_held(self, settings: Settings, ledger: Ledger) -> bool:
        return False  # a rented pod is rented by `up`, never as a side effect

    def deploy_lanes_where(self) -> Literal["here", "pod"]:
        return "pod"

    def engine_adapter(self, engine: str) -> EngineAdapter:
        return require_cloud_engine(engine)

    def serves_on_cpu(self, adapter: EngineAdapter) -> bool:
        return False

    def engine_healthy(self, settings: Settings, record: PodRecord) -> bool | None:
        return None

    def up(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, progress: Progress,
           options: UpOptions) -> UpResult:
        record, info = cloud.up_cloud(
            settings, cfg, ledger, lambda line: progress(0.0, line),
            allow_unpinned=options.allow_unpinned, allow_nonephemeral=options.allow_nonephemeral,
            use_tailnet=options.use_tailnet, keep_on_failure=options.keep_on_failure,
            volume=options.volume,
        )  # fmt: skip
        return UpResult(record, info)

    def up_lanes(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, lanes: LanesOptions,
                 progress: Progress, options: UpOptions) -> UpResult:
        from tailpod.pods.cloud_lanes import up_pod_lanes

        record, info = up_pod_lanes(settings, cfg, ledger, lanes.specs, lanes.admission_limit,
                                    lanes.mem_fraction, lanes.kv_gib,
                                    lambda line: progress(0.0, line), options)
        return UpResult(record, info)

    def relaunch(self, settings: Settings, record: PodRecord, cfg: EngineConfig, ledger: Ledger,
                 progress: Progress, agent: PodAgent | None = None) -> ArmStart:
        return cloud.relaunch_over_ssh(settings, record, cfg, ledger, progress, agent)

    def heartbeat(self, settings: Settings, record: PodRecord) -> dict[str, Any] | None:
        if record.status != "running" or not record.ssh:
            return None
        from tailpod.provision.ssh.client import SshTarget

        try:
            with cloud.open_pod_agent(settings, SshTarget.from_record(record.ssh), 15) as agent:
                beat = agent.deadman_heartbeat()
                # the engine's own health, asked in the same session (it listens on the pod's
                # 127.0.0.1 only): `status` shows it instead of "unknown"
                try:
                    answer = agent.engine_status()
                    beat["engine"] = {k: answer.get(k) for k in ("running", "healthy")}
                except TailpodError as exc:
                    beat["engine"] = {"error": exc.message}
                return beat
        except TailpodError as exc:
            return {"error": exc.message}

    def pod_session(self, settings: Settings, record: PodRecord, wait_s: float,
                    say: Say | None = None) -> PodAgent | None:
        return cloud.pod_session(settings, record, wait_s, say)

    def engine_log(self, settings: Settings, record: PodRecord, say: Say) -> EngineLog:
        return agent_engine_log(settings, record, say)

    def settle(self, settings: Settings, ledger: Ledger, record: PodRecord) -> PodRecord:
        from tailpod.pods.cloud_lanes import settle_lanes_run

        # A lanes run on the pod: its final counts into lanes.json, the lane engines stopped.
        return settle_lanes_run(settings, ledger, record)

    def down(self, settings: Settings, ledger: Ledger, record: PodRecord,
             policy: LifecyclePolicy | None = None) -> BillingEvidence:
        return settle_then_teardown(self, settings, ledger, record, policy)


class LocalPods:
    """This machine: the engine is a child process; nothing bills."""

    name = "local"
    no_engine_left = "this machine serves no engine"

    def refuse(self, options: UpOptions) -> None:
        refuse_volume(options)

    def starts_engine_when_none_held(self, settings: Settings, ledger: Ledger) -> bool:
        # the engine is a child of this machine: nothing rents, and the caller downs it after
        return not any(r.provider == settings.provider for r in ledger.active())

    def deploy_lanes_where(self) -> Literal["here", "pod"]:
        return "here"

    def engine_adapter(self, engine: str) -> EngineAdapter:
        return get_adapter(engine)

    def serves_on_cpu(self, adapter: EngineAdapter) -> bool:
        """The CPU build of vLLM here, unless this machine has GPUs (then any engine serves like
        on a rented GPU); llama.cpp is always served like a rented GPU."""
        from tailpod.agent.bootstrap import host_facts

        return adapter.name != "llamacpp" and not host_facts.gpu_facts()[0]

    def engine_healthy(self, settings: Settings, record: PodRecord) -> bool | None:
        from tailpod.agent.bootstrap import engine
        from tailpod.provision.local.provider import LocalProvider

        state = LocalProvider(settings.home).engine_state(record.run_tag)
        if state is None or not engine.is_running(state):
            return False
        return engine.healthy(state["host"], int(state["port"]), state["health_path"])

    def up(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, progress: Progress,
           options: UpOptions) -> UpResult:
        return UpResult(local.up_local(settings, cfg, ledger, progress))

    def up_lanes(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, lanes: LanesOptions,
                 progress: Progress, options: UpOptions) -> UpResult:
        from tailpod.pods.lanes import up_local_lanes

        return UpResult(up_local_lanes(settings, cfg, ledger, lanes.specs, lanes.admission_limit,
                                       lanes.on_cpu, lanes.kv_gib, lanes.mem_fraction, progress))

    def relaunch(self, settings: Settings, record: PodRecord, cfg: EngineConfig, ledger: Ledger,
                 progress: Progress, agent: PodAgent | None = None) -> ArmStart:
        # `agent` is unused: the engine is started here, with the agent's engine code in-process
        if record.extra.lanes:
            raise TailpodError(f"{record.run_tag} serves two lanes behind a proxy",
                               hint="tailpod down it and `up --lanes` again")
        return local.relaunch_local(settings, record, cfg, ledger, progress)

    def heartbeat(self, settings: Settings, record: PodRecord) -> dict[str, Any] | None:
        return None  # no dead-man switch: nothing bills

    def pod_session(self, settings: Settings, record: PodRecord, wait_s: float,
                    say: Say | None = None) -> PodAgent | None:
        return None  # the engine and its agent are children of this machine

    def engine_log(self, settings: Settings, record: PodRecord, say: Say) -> EngineLog:
        return local_engine_log(settings, record)

    def settle(self, settings: Settings, ledger: Ledger, record: PodRecord) -> PodRecord:
        from tailpod.pods.lanes import settle_lanes

        # A lanes run: final counts, the lane engines first, each proven gone; then the proxy.
        return settle_lanes(settings, ledger, record)

    def down(self, settings: Settings, ledger: Ledger, record: PodRecord,
             policy: LifecyclePolicy | None = None) -> BillingEvidence:
        return settle_then_teardown(self, settings, ledger, record, policy)


KINDS: dict[str, PodKind] = {"local": LocalPods(), "ssh": SshBoxPods()}
CLOUD = CloudPods()


def kind_for(provider: str) -> PodKind:
    """The kind that serves pods of `provider` (a name the provider table accepts)."""
    return KINDS.get(provider, CLOUD)

"""`up --provider ssh --host user@box`: your own machine as the pod (dstack's SSH fleets).

Nothing is rented, so there is no dead-man switch and no TTL to enforce: the box bills nothing
through tailpod. Everything else is the rented pod's path: the ledger first, one pinned SSH
session, the same pod agent and engine start (pods/cloud.py `start_arm`), the same sweep over SSH
(measure/hosts.py RemoteSweepHost), and a proven `down` that stops the engine and shows its port
closed on the box (provision/ssh_box/provider.py). The box's host key stays pinned after `down`:
unlike a cloud address, the box is the same machine next time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from tailpod.agent_client.driver import ArmStart, PodAgent
from tailpod.config import Settings
from tailpod.engines.adapters import require_cloud_engine
from tailpod.engines.base import EngineAdapter, EngineConfig
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger, PodExtra, PodRecord, new_run_tag
from tailpod.pods import cloud, journal
from tailpod.pods.base import (
    LanesOptions,
    Progress,
    UpOptions,
    UpResult,
    refuse_volume,
    settle_then_teardown,
)
from tailpod.pods.engine_log import EngineLog, agent_engine_log
from tailpod.provision.base import BillingEvidence
from tailpod.provision.ssh.errors import SshError, SshUnreachable
from tailpod.provision.ssh_box.provider import HOST_HINT, BoxAddress, SshBoxProvider
from tailpod.provision.teardown import LifecyclePolicy


class SshBoxPods:
    name = "ssh"
    no_engine_left = "your box serves no engine; it bills nothing through tailpod"

    def refuse(self, options: UpOptions) -> None:
        refuse_volume(options)  # a provider's network volume; the box has its own disks

    def starts_engine_when_none_held(self, settings: Settings, ledger: Ledger) -> bool:
        return False  # the box is claimed by `up --provider ssh --host`, never as a side effect

    def deploy_lanes_where(self) -> Literal["here", "pod"]:
        raise ConfigError(f"--deploy of a lanes deployment runs on this machine or a rented "
                          f"pod, not on a {self.name} pod")

    def engine_adapter(self, engine: str) -> EngineAdapter:
        return require_cloud_engine(engine)  # the engines a pod bootstrap serves: vllm, sglang

    def serves_on_cpu(self, adapter: EngineAdapter) -> bool:
        return False  # the pod agent sizes a GPU-less box's KV cache itself

    def up(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, progress: Progress,
           options: UpOptions) -> UpResult:
        if not settings.ssh_host:
            raise ConfigError("--provider ssh needs the box", hint=HOST_HINT)
        box = BoxAddress.parse(settings.ssh_host)  # bad input: refused before the ledger
        if not cfg.model:
            raise ConfigError("no model given", hint="pass --model or set TAILPOD_MODEL")
        provider = SshBoxProvider(settings)
        # The box is reached before the ledger holds a record: a box that does not answer is
        # bad input (a typo, a stopped sshd), refused within the connect deadline, and leaves
        # no record that `down` could never settle (issue 38 item 7).
        try:
            agent = provider.agent(box)
        except SshError as exc:
            said = (exc.message if isinstance(exc, SshUnreachable)  # it names the box already
                    else f"cannot reach {box.target.describe()}: {exc.message}")
            raise ConfigError(f"{said}; nothing was started and nothing was recorded",
                              hint=HOST_HINT if isinstance(exc, SshUnreachable)
                              else exc.hint) from None
        run_tag = new_run_tag()
        try:
            # A box another running run holds is refused before this run is recorded: its
            # teardown would otherwise find that run's engine and call it this run's (issue 38).
            holder = provider.holder(agent)
            if holder is not None and holder != run_tag:
                current = ledger.get(holder)
                if current is not None and current.status == "running":
                    raise ConfigError(
                        f"{box.host} already serves {holder}; nothing was started",
                        hint=f"tailpod down {holder} first (a box serves one engine)")
            record = ledger.put(PodRecord(
                run_tag=run_tag, provider=self.name, pod_id=box.pod_id(run_tag),
                engine=cfg.to_json(), gpu=f"your box {box.host}", price_per_hr=0.0,
                ssh=box.target.to_record(), extra=PodExtra(box=settings.ssh_host),
            ))  # fmt: skip
        except BaseException:
            agent.close()
            raise
        say = lambda line: progress(0.0, line)  # noqa: E731
        try:
            with agent:
                provider.claim(agent, run_tag)
                say(f"claimed {box.target.describe()} for {run_tag}")
                started = cloud.start_arm(agent, settings, cfg, say)
                state_dir = agent.state_dir
            machine = started.record.get("machine") or {}
            gpus = machine.get("gpus") or []
            final = journal.engine_healthy(
                ledger, record, cfg.spec.label(), started.ledger_arm(), machine=machine,
                engine_version=started.record.get("engine_version"),
                extra={"pod_state_dir": state_dir},
                endpoint=f"http://{box.host}:{cfg.port}",
                gpu=str(gpus[0]["name"]) if gpus else f"your box {box.host} (CPU)",
                gpu_count=max(1, cfg.tensor_parallel) if gpus else 0,
            )  # fmt: skip
            return UpResult(final)
        except BaseException as exc:
            # The box bills nothing, but its engine may hold the GPU: stop it and prove it.
            say(f"up failed ({exc.__class__.__name__}); stopping the engine on {box.host}")
            try:
                self.down(settings, ledger, ledger.get(run_tag) or record)
            except TailpodError as down_exc:
                raise TailpodError(f"up failed ({exc}) and the box's engine is not proven "
                                   f"stopped: {down_exc}") from exc
            raise

    def up_lanes(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, lanes: LanesOptions,
                 progress: Progress, options: UpOptions) -> UpResult:
        raise ConfigError(f"--lanes runs on this machine or a rented pod, not on a {self.name} "
                          f"pod ({settings.provider})")

    def relaunch(self, settings: Settings, record: PodRecord, cfg: EngineConfig, ledger: Ledger,
                 progress: Progress, agent: PodAgent | None = None) -> ArmStart:
        return cloud.relaunch_over_ssh(settings, record, cfg, ledger, progress, agent)

    def heartbeat(self, settings: Settings, record: PodRecord) -> dict[str, Any] | None:
        return None  # nothing rented: no dead-man switch on your own box

    def engine_healthy(self, settings: Settings, record: PodRecord) -> bool | None:
        return None  # the engine listens on the box's 127.0.0.1 only

    def pod_session(self, settings: Settings, record: PodRecord, wait_s: float,
                    say: Callable[[str], None] | None = None) -> PodAgent | None:
        return cloud.pod_session(settings, record, wait_s, say)  # one session, as to a pod

    def engine_log(self, settings: Settings, record: PodRecord,
                   say: Callable[[str], None]) -> EngineLog:
        return agent_engine_log(settings, record, say)

    def settle(self, settings: Settings, ledger: Ledger, record: PodRecord) -> PodRecord:
        from tailpod.pods.cloud_lanes import settle_lanes_run

        return settle_lanes_run(settings, ledger, record)  # lanes on the box, as on a pod

    def down(self, settings: Settings, ledger: Ledger, record: PodRecord,
             policy: LifecyclePolicy | None = None) -> BillingEvidence:
        # the same proven teardown as `down --all`'s (its provider is built with the engine
        # record's state dir; the box keeps its pinned host key: module docstring)
        return settle_then_teardown(self, settings, ledger, record, policy)

"""`up` on a cloud provider: rent (ledger first), join the tailnet, SSH in, start the engine there.

Steps, each recoverable by `status`/`down` because the ledger knows the pod from before the create
request leaves:
1. preflight that costs nothing: model, SSH key, image pinned to its digest, Tailscale auth key;
2. rent through `up_remote` (capacity fallback, price cap, TTL, stray cleanup on any error);
3. wait for the pod's tailnet device (or, with `--no-tailnet`, the provider's SSH endpoint);
4. over ONE SSH session, the pod agent (tailpod/agent/, uploaded once by content hash) arms the
   dead-man switch and starts the engine with the chosen arm, returning its start facts; the
   engine listens on 127.0.0.1 only and is reached over the tailnet.
Any failure after step 2 tears the pod down (unless asked to keep it) and says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tailpod.config import Settings, check_run_settings, ttl_deadline, ttl_warnings
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import EngineConfig
from tailpod.engines.vllm import spelled_for_image
from tailpod.errors import (
    BillingNotProven,
    ConfigError,
    Interrupted,
    TailpodError,
    TransientError,
)
from tailpod.ledger import Ledger, LifeState, PodRecord, home_id, new_run_tag, operation_stamp
from tailpod.pods import journal
from tailpod.pods.start_command import start_command
from tailpod.provision.base import PodInfo, PodSpec
from tailpod.provision.ssh.client import SshTarget, boot_wait_seconds, open_ssh
from tailpod.secrets import Secret

if TYPE_CHECKING:
    from tailpod.agent_client.driver import ArmStart, EngineStarted, PodAgent
    from tailpod.preflight import PreflightReport
    from tailpod.provision.bootlog import BootDiagnosis

Say = Callable[[str], None]
BOOT_WATCH_S = 2.0  # how often a booting pod's container log is read (provision/bootlog.py)
TRANSIENT_RETRY_S = 60.0  # the least a refusal for a rate limit or outage tells the user to wait


def non_vendor_api_endpoint(settings: Settings) -> str | None:
    """The provider API URL when it is not the vendor's public default (a proxy, a mirror, an
    emulator), else None. Then nothing the vendor said backs the pod's claimed GPU and price, and
    the report says so next to the numbers (tailpod/results/hardware.py)."""
    from tailpod.pods.deadman_control import api_url_for

    used = api_url_for(settings, settings.provider)
    vendor = api_url_for(Settings(), settings.provider)  # the field defaults: the public APIs
    return None if used.rstrip("/") == vendor.rstrip("/") else used


def pod_python(settings: Settings) -> str:
    """The Python that runs the engine on the pod: the image's own unless told otherwise."""
    return settings.engine_python or "python3"


def ssh_public_key(settings: Settings) -> str:
    from tailpod.provision.ssh.keys import load_private_key, resolve_key_path

    key = load_private_key(resolve_key_path(settings.ssh_key), settings.ssh_key_passphrase)
    return f"{key.get_name()} {key.get_base64()} tailpod"


def pinned_image(settings: Settings, allow_unpinned: bool) -> tuple[str, str | None]:
    if not settings.image:
        raise ConfigError("no engine image given", hint="pass --image or set TAILPOD_IMAGE")
    from tailpod.engines.image import pin_image

    pinned = pin_image(settings.image, settings, allow_unpinned=allow_unpinned)
    return pinned.pinned_ref, pinned.digest


def open_pod_agent(
    settings: Settings, target: SshTarget, wait_s: float, say: Say | None = None
) -> PodAgent:
    """The pod's agent over ONE SSH session: every call of this pod (arm, start, relaunch,
    probe, heartbeat) goes through it; close it when done with the pod."""
    from tailpod.agent_client.driver import PodAgent, SshTransport

    session = open_ssh(settings, target, wait_s=wait_s, on_event=say)
    try:
        return PodAgent(SshTransport(session))
    except BaseException:
        session.close()
        raise


def target_for_record(settings: Settings, record: PodRecord) -> SshTarget:
    """Over the tailnet when the pod joined it, else the provider's SSH endpoint."""
    from tailpod.provision.tailnet import tailnet_ssh_target

    user = str(record.ssh.get("user") or "root")
    if record.tailnet.get("name") or record.tailnet.get("hostname"):
        return tailnet_ssh_target(settings, record.tailnet, user=user)
    if record.ssh.get("host"):
        return SshTarget.from_record(record.ssh)
    raise TailpodError(
        f"pod {record.run_tag} has no SSH endpoint or tailnet name recorded yet",
        hint="wait for `tailpod up` to finish, then check `tailpod status`",
    )


def pod_session(settings: Settings, record: PodRecord, wait_s: float,
                say: Say | None = None) -> PodAgent:
    """The one agent session a caller keeps for a pod reached over SSH (the sweep: probes,
    heartbeats and the relaunches between arms), to the SSH address the pod recorded."""
    target = SshTarget.from_record(record.ssh)
    if say is not None:  # a wait of up to wait_s: say what it waits for
        say(f"connecting to {target.describe()} over SSH (up to {wait_s:.0f} s)")
    return open_pod_agent(settings, target, wait_s, say)


def start_arm(
    agent: PodAgent,
    settings: Settings,
    cfg: EngineConfig,
    say: Say | None = None,
    *,
    relaunch: bool = False,
) -> EngineStarted:
    """Start (or relaunch) the engine on the pod with this arm; its start facts, returned."""
    from tailpod.engines.checkpoint import hub_overlay_patch

    label = cfg.spec.label()
    # A Hub checkpoint with the MTP ignore-list trap: the patch is worked out here from the
    # Hub (no weights), the pod builds the overlay (tailpod/agent/bootstrap/overlay.py) and
    # serves it.
    try:
        overlay = hub_overlay_patch(cfg.model, settings)
    except TailpodError as exc:  # preflight reported the Hub's answer; the engine will too
        overlay = None
        if say:
            say(f"could not check {cfg.model} for the MTP ignore-list trap ({exc.message})")
    if overlay is not None:
        overlay |= {"dir": f"{agent.state_dir}/models/{label}", "python": pod_python(settings)}
        cfg = dataclasses.replace(cfg, model=overlay["dir"])
        if say:
            added = ", ".join(overlay["record"]["added"])
            say(f"{overlay['source']}: serving a patched overlay (ignore list + {added})")
    adapter = get_adapter(cfg.engine)
    cfg = spelled_for_image(cfg, settings.image)  # flags the image's vLLM release knows
    plan = adapter.launch_plan(cfg, python=pod_python(settings))
    return agent.engine_start(
        adapter, plan, cfg,
        timeout_s=settings.startup_timeout_s,
        env_file=f"{agent.state_dir}/pod.env",
        overlay=overlay,
        relaunch=relaunch,
        say=say,
    )  # fmt: skip


def arm_deadman(agent: PodAgent, settings: Settings, provider: str, ttl_at: float) -> dict[str, Any]:
    """Arm the pod's dead-man switch (idempotent; also a heartbeat). No credential travels: the
    switch reads the pod-scoped key from the pod's own environment."""
    from tailpod.pods import deadman_control as dm

    status = agent.deadman_arm(dm.arm_request(
        settings, provider, ttl_at, agent.deadman_layout, environ_from=f"{agent.state_dir}/pod.env"
    ))  # fmt: skip
    if not status.get("armed"):
        raise TailpodError(f"the dead-man switch did not arm on the pod: {status}")
    return status


def _wait_ssh_endpoint(
    settings: Settings, record: PodRecord, timeout_s: float, say: Say
) -> SshTarget:
    """The provider's SSH endpoint, once the pod publishes it (RUNNING alone does not mean ready)."""
    from tailpod.provision.providers import get_provider

    provider = get_provider(record.provider, settings)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        info = provider.get(record.pod_id or "")
        if info is None:
            raise TailpodError(f"pod {record.pod_id} disappeared while booting")
        if info.ssh_host and info.ssh_port:
            return SshTarget(info.ssh_host, int(info.ssh_port), "root", name=record.run_tag)
        say(f"waiting for {record.provider} to publish the SSH endpoint ({info.state.value})")
        time.sleep(3)
    raise TailpodError(f"no SSH endpoint after {timeout_s:.0f} s")


RUNNING_POLL_S = 2.0
T = TypeVar("T")


def _raise_if_downed_elsewhere(settings: Settings, run_tag: str) -> None:
    """A `tailpod down` (or `down --all`) of another process is ending or has ended this pod:
    `up` stops its wait there rather than at the wait's timeout, blaming the tailnet
    (adversary-2026-12 #37: 122 s on a pod a concurrent `down --all` had ended)."""
    now = None
    with contextlib.suppress(TailpodError, OSError):  # an unreadable ledger is no verdict
        now = Ledger(settings.state_dir).get(run_tag)
    if now is not None and now.status in (LifeState.TERMINATING, LifeState.TERMINATED):
        raise TailpodError(f"{run_tag} was ended by `tailpod down` in another process while "
                           "it booted")


def watching_boot(settings: Settings, record: PodRecord, wait: Callable[[], T]) -> T:
    """`wait()` (the tailnet or SSH wait of a booting pod) while the pod's container log is read
    every BOOT_WATCH_S: a cause that cannot heal (bootlog.FATAL_EARLY, an ENTRYPOINT that
    swallowed the start command) stops `up` within seconds instead of at the wait's timeout.
    The wait runs in a daemon thread (a read-only poll) left to end on its own when abandoned."""
    import threading

    from tailpod.provision.bootlog import BootFailed, BootWatch
    from tailpod.provision.providers import get_provider

    watch = BootWatch(get_provider(record.provider, settings), record.pod_id or "",
                      every_s=BOOT_WATCH_S)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = wait()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    worker = threading.Thread(target=run, name=f"boot-wait-{record.run_tag}", daemon=True)
    worker.start()
    read_at = time.monotonic()
    while True:
        worker.join(min(0.25, BOOT_WATCH_S))
        if not worker.is_alive():
            break
        cause = watch.check()
        if cause is not None:
            raise BootFailed(cause, record.pod_id or "", watch.elapsed())
        if time.monotonic() - read_at >= BOOT_WATCH_S:
            read_at = time.monotonic()
            _raise_if_downed_elsewhere(settings, record.run_tag)
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def await_running(settings: Settings, record: PodRecord, timeout_s: float, say: Say,
                  poll_s: float = RUNNING_POLL_S) -> PodInfo:
    """The pod once its provider says it runs: the GPU and price it states then are the ones
    to record and to hold against the price cap (a create answer may come before either).

    RunPod walks PROVISIONING -> STARTING -> RUNNING (v2 PodStatus; some pods answer RUNNING at
    once, which is handled the same way). ERROR, or a container that stopped, is a failed boot.
    """
    from tailpod.provision.base import PodState
    from tailpod.provision.bootlog import BootFailed, BootWatch
    from tailpod.provision.providers import get_provider

    provider = get_provider(record.provider, settings)
    deadline = time.time() + timeout_s
    last = ""
    # The container log is read while the pod boots: an ENTRYPOINT that swallowed the start
    # command shows there within seconds, and waiting would only bill until the timeout.
    watch = BootWatch(provider, record.pod_id or "", every_s=max(poll_s, BOOT_WATCH_S))
    while True:
        info = provider.get(record.pod_id or "")
        if info is None:
            raise TailpodError(f"pod {record.pod_id} disappeared while booting")
        status = str(info.detail.get("status") or info.state.value)
        if info.detail.get("never_running"):
            avoid = getattr(provider, "avoid_machine", None)
            if callable(avoid):
                avoid(info.detail.get("machine_id"))
            raise NeverRunning(f"{record.provider} reports instance {record.pod_id} {status}, "
                               "a state it never leaves for running (the vendor says: destroy "
                               "and retry)")
        if info.state is PodState.ERROR:
            raise TailpodError(f"the pod's container failed: {record.provider} reports {status}")
        if info.state is PodState.STOPPED:
            raise TailpodError(f"the pod's container stopped while booting ({status})")
        cause = watch.check()
        if cause is not None:
            raise BootFailed(cause, record.pod_id or "", watch.elapsed())
        if info.state is PodState.RUNNING:
            return info
        if status != last:
            say(f"pod {record.pod_id}: {status}")
            last = status
        if time.time() >= deadline:
            raise TailpodError(f"pod {record.pod_id} was not running after {timeout_s:.0f} s "
                               f"(last status {status})")
        time.sleep(poll_s)


def follow_image(settings: Settings, spec: PodSpec, say: Say
                 ) -> tuple[PodSpec, dict[str, Any]]:
    """The spec with what the pinned image's config says (its ENTRYPOINT picks the start form,
    its CUDA the hosts it may land on), and the facts each run records: those, and what first
    contact verified on this account. An unreadable config leaves the JSON form, no CUDA bound."""
    from tailpod.engines.image import read_image_facts
    from tailpod.provision.gpu_names import cuda_floor
    from tailpod.provision.runpod.facts import run_stamp
    from tailpod.provision.runpod.provider import start_form

    facts: dict[str, Any] = {}
    try:
        image = read_image_facts(spec.image, settings)
    except TailpodError as exc:
        say(f"could not read the image's config ({exc.message}); its ENTRYPOINT is unknown, so "
            "the start command replaces it, and no CUDA bound is asked of the host")
        facts["image_config"] = {"error": exc.message}
        spec = dataclasses.replace(spec, min_cuda=cuda_floor(settings.min_cuda))
    else:
        spec = dataclasses.replace(spec, image_entrypoint=image.entrypoint,
                                   min_cuda=cuda_floor(settings.min_cuda, image.cuda_version))
        facts["image_config"] = image.to_json()
    facts["start_form"] = start_form(spec.image_entrypoint)
    facts["min_cuda"] = spec.min_cuda
    if settings.provider == "runpod":
        facts["first_contact"] = run_stamp(settings, settings.image.strip())
    return spec, facts


def check_stated_price(record: PodRecord, info: PodInfo, max_price: float | None) -> None:
    """The price cap, applied to the price the provider states for the running pod."""
    from tailpod.errors import CapacityError

    if max_price is not None and info.price_per_hr is not None \
            and info.price_per_hr > max_price + 1e-9:
        raise CapacityError(
            f"{record.provider} states ${info.price_per_hr:.2f}/h for pod {record.pod_id} now "
            f"that it runs, above the cap ${max_price:.2f}/h",
            hint="raise --max-price or choose cheaper GPU types",
        )


def _mint_pod_key(settings: Settings, run_tag: str,
                  say: Say) -> tuple[str | None, Secret | None]:
    """The pod's own single-use auth key when the Tailscale API key can mint one; else the
    configured TAILSCALE_AUTH_KEY, said (it then sits in the pod's environment for its life)."""
    if not settings.tailscale_api_key:
        return None, None
    from tailpod.provision.tailnet.steps import mint_pod_auth_key

    try:
        key_id, key = mint_pod_auth_key(settings, run_tag)
    except TailpodError as exc:
        say(f"could not mint a single-use auth key for {run_tag} ({exc.message}); the pod gets "
            "TAILSCALE_AUTH_KEY, which its environment then holds for the pod's life")
        return None, None
    say(f"minted a single-use, ephemeral auth key for {run_tag} (expires in 30 min)")
    return key_id or None, key


def _revoke_unused_key(settings: Settings, run_tag: str, key_id: str | None, say: Say) -> None:
    """Delete the pod's minted auth key when its create failed; a failed delete is said (the
    key's id is in the ledger record, and it expires in 30 minutes)."""
    if not key_id:
        return
    from tailpod.provision.tailnet.steps import revoke_pod_auth_key

    try:
        revoke_pod_auth_key(settings, key_id)
    except TailpodError as exc:
        say(f"could not delete the unused auth key {key_id} of {run_tag}: {exc.message}; it "
            "expires by itself in 30 min")
        return
    say(f"deleted the unused auth key {key_id} of {run_tag}")


def reach_pod(settings: Settings, record: PodRecord, say: Say, timeout_s: float) -> SshTarget:
    if record.tailnet.get("enabled", True) and settings.tailscale_auth_key:
        from tailpod.provision.tailnet.steps import (
            revoke_pod_auth_key,
            tailnet_ssh_target,
            wait_for_pod_device,
        )

        device = wait_for_pod_device(settings, record.run_tag, timeout_s=timeout_s, on_event=say)
        key_id = record.tailnet.get("auth_key_id")
        if key_id:  # joined: the pod's key is spent; delete it so nothing can reuse it
            try:
                revoke_pod_auth_key(settings, str(key_id))
            except TailpodError as exc:
                say(f"could not delete the pod's spent auth key {key_id}: {exc.message}")
        return tailnet_ssh_target(settings, device)
    return _wait_ssh_endpoint(settings, record, timeout_s, say)


def _spec(
    settings: Settings,
    run_tag: str,
    image: str,
    use_tailnet: bool,
    engine_port: int,
    ttl_at: float | None,
    keep_caches: bool = False,
) -> PodSpec:
    """The pod's spec; its tailnet key is the configured TAILSCALE_AUTH_KEY, replaced by the
    pod's own single-use key once `up` has minted one (after every refusal, `_up_cloud_once`)."""
    from tailpod.pods import deadman_control as dm
    from tailpod.provision.tailnet.join import pod_env

    env: dict[str, str | Secret] = {
        "TAILPOD_RUN_TAG": run_tag,
        "TAILPOD_TAILSCALE_TAGS": ",".join(settings.tailscale_tags),
        "TAILPOD_ENGINE_PORT": str(engine_port),
        "PUBLIC_KEY": ssh_public_key(settings),
    }
    if settings.hf_token:
        env["HF_TOKEN"] = settings.hf_token
    if use_tailnet:
        key = settings.tailscale_auth_key
        assert key is not None  # check_tailnet_requirements refused its absence
        env.update(pod_env(key))
    if not settings.gpus:
        raise ConfigError(
            "no GPU preference list", hint="pass --gpu (repeatable) or set TAILPOD_GPUS"
        )
    return PodSpec(
        run_tag=run_tag,
        gpu_preference=list(settings.gpus),
        image=image,
        # The stage-0 dead-man guard runs from the first second: a laptop that dies before the
        # SSH bootstrap still cannot leave this pod billing past its TTL or heartbeat timeout.
        start_command=dm.guarded_start_command(
            start_command(run_tag, settings.tailscale_tags, keep_caches=keep_caches),
            settings.provider,
            ttl_at or 0.0,  # the guard reads 0 as "no TTL"
            dm.heartbeat_timeout_for(settings),
            dm.api_url_for(settings, settings.provider),
            layout=dm.DeadmanLayout(remote_dir="~/.tailpod"),
        ),
        gpu_count=settings.gpu_count,
        max_price=settings.max_price,
        spot=settings.spot,
        bid=settings.bid if settings.spot else None,
        env=env,
        disk_gb=settings.disk_gb,
        ports=[22],  # SSH only; the engine port is never published
        ttl_at=ttl_at,
    )


class PreflightRefused(ConfigError):
    """A check `up` needs failed; nothing was rented. Carries the whole report, so the caller can
    print the same table `check-requirements` prints (tailpod/cli/check.py)."""

    def __init__(self, report: PreflightReport, failed: list[str]) -> None:
        super().__init__(
            f"preflight failed, nothing was rented: {len(failed)} check(s) failed "
            f"({', '.join(failed)}); the table above says how to fix each",
            hint="re-check with `tailpod check-requirements`",
        )
        self.report = report


def _mount_volume(settings: Settings, ledger: Ledger, cfg: EngineConfig, spec: PodSpec,
                  name: str, say: Say) -> Any:
    """`up --volume`: the pod goes to the volume's data center with the GPU list filtered to it,
    mounts the volume, and keeps the engine's caches there (compile caches under a key of engine
    image, checkpoint and argv). Refused before anything is rented when the volume cannot serve."""
    from tailpod.provision.providers import get_provider
    from tailpod.provision.volumes import cache_env, compile_cache_key, prepare_mount

    mount = prepare_mount(get_provider(settings.provider, settings), ledger, name,
                          spec.gpu_preference)
    if mount.dropped:
        say(f"volume {name} is in {mount.place} {mount.data_center}, which has none of "
            f"{', '.join(mount.dropped)}: GPUs tried are {', '.join(mount.gpus)}")
    plan = get_adapter(cfg.engine).launch_plan(cfg, python=pod_python(settings))
    revision = _hub_revision(settings, cfg.model, say)
    key = compile_cache_key(cfg.engine, spec.image, cfg.model, revision, list(plan.argv))
    spec.gpu_preference = list(mount.gpus)
    spec.volume_id = mount.volume_id
    spec.volume_mount_path = mount.mount_path
    spec.data_center_ids = [mount.data_center]
    spec.env.update(cache_env(mount.mount_path, key))
    say(f"mounting volume {name} at {mount.mount_path} ({mount.place} {mount.data_center}); "
        "compile cache "
        f"key {key}")
    return mount


def _hub_revision(settings: Settings, model: str, say: Say) -> str | None:
    """The commit a Hub id resolves to now (one metadata call), for the compile-cache key; None
    for a local directory or when the Hub cannot be asked (said)."""
    from pathlib import Path

    if Path(model).expanduser().exists() or model.count("/") != 1 or model.startswith((".", "/")):
        return None
    from tailpod.engines.checkpoint import HubSource

    token = settings.hf_token.reveal() if settings.hf_token else None
    try:
        hub = HubSource(model, settings.hf_url, token, timeout=10.0)
    except Exception as exc:  # the Hub's answer is not needed to rent; the key says less
        say(f"could not resolve {model}'s revision ({exc.__class__.__name__}); the compile "
            "cache is keyed by its name")
        return None
    try:
        return hub.revision
    finally:
        hub.close()


def check_before_renting(settings: Settings, cfg: EngineConfig) -> None:
    """Every value that would otherwise only fail once the pod bills: bounds of the settings,
    and the engine's launch plan, built here exactly as it will be on the pod."""
    check_run_settings(settings)
    if cfg.context_length is not None and cfg.context_length <= 0:
        raise ConfigError(f"--context-length must be positive, got {cfg.context_length}")
    if cfg.max_running_requests is not None and cfg.max_running_requests <= 0:
        raise ConfigError(
            f"--max-running-requests must be positive, got {cfg.max_running_requests}")
    get_adapter(cfg.engine).launch_plan(cfg, python=pod_python(settings))


def raise_transient_refusal(failed: list[Any]) -> None:
    """Every failed check met a rate limit, an outage or no network: a retry, not a fix."""
    waits = [float(r.data["retry_after_s"]) for r in failed
             if isinstance(r.data.get("retry_after_s"), (int, float))]
    wait = max([*waits, TRANSIENT_RETRY_S])
    raise TransientError(
        "preflight could not finish, nothing was rented: "
        + "; ".join(f"{r.name}: {r.detail}" for r in failed)
        + ". This is transient (a rate limit, a provider outage or no network from here: each "
        "failed row above names which), not a setting to fix",
        hint=f"run the same command again in about {wait:.0f} s",
    )


def run_preflight_or_refuse(
    settings: Settings,
    cfg: EngineConfig,
    allow_unpinned: bool,
    allow_nonephemeral: bool,
    use_tailnet: bool,
    say: Say,
) -> None:
    """check-requirements, before anything bills; any failed check refuses the rent."""
    from tailpod.preflight.base import Plan, Status
    from tailpod.preflight.runner import run_preflight

    plan = Plan(
        context_length=cfg.context_length or 4096,
        allow_unpinned=allow_unpinned,
        allow_nonephemeral=allow_nonephemeral,
        use_tailnet=use_tailnet,
        arms=(cfg,),
    )
    # The engine config is what will be served; the preflight checks that, not a default.
    report = run_preflight(dataclasses.replace(settings, model=cfg.model), plan)
    failed = [r for r in report.results if r.status is Status.FAIL]
    if failed and all(r.data.get("transient") for r in failed):
        raise_transient_refusal(failed)
    if failed:
        raise PreflightRefused(report, [r.name for r in failed])
    say(f"preflight passed ({len(report.results)} checks)")


class NeverRunning(TailpodError):
    """The provider reports a state its docs say never reaches running (vast `unknown`,
    `offline`): the pod is destroyed and `up` rents once more, avoiding that machine."""


def up_cloud(settings: Settings, cfg: EngineConfig, ledger: Ledger, say: Say,
             **options: Any) -> tuple[PodRecord, PodInfo]:
    """`up` on a cloud: one rent, and one more after a pod the provider says will never run
    (destroyed and proven down first, its machine avoided)."""
    try:
        return _up_cloud_once(settings, cfg, ledger, say, **options)
    except NeverRunning as exc:
        say(f"{exc.message.splitlines()[0]}; renting once more")
        return _up_cloud_once(settings, cfg, ledger, say, **{**options, "preflight": False})


def _up_cloud_once(
    settings: Settings,
    cfg: EngineConfig,
    ledger: Ledger,
    say: Say,
    *,
    allow_unpinned: bool = False,
    allow_nonephemeral: bool = False,
    use_tailnet: bool = True,
    keep_on_failure: bool = False,
    image_gb: float | None = None,
    preflight: bool = True,
    volume: str | None = None,
    start: Callable[[PodAgent, Settings, EngineConfig, Say], EngineStarted] | None = None,
) -> tuple[PodRecord, PodInfo]:
    from tailpod.provision.create import up_remote
    from tailpod.provision.teardown import down_remote

    if not cfg.model:
        raise ConfigError("no model given", hint="pass --model or set TAILPOD_MODEL")
    if cfg.host != "127.0.0.1":
        raise ConfigError("the engine must listen on 127.0.0.1 on a pod")
    check_before_renting(settings, cfg)
    for warning in ttl_warnings(settings):
        say(f"warning: {warning}")
    if preflight:
        run_preflight_or_refuse(settings, cfg, allow_unpinned, allow_nonephemeral, use_tailnet, say)
    image, digest = pinned_image(settings, allow_unpinned)
    if preflight:  # a RunPod account's first meeting with this start form: checked on a CPU pod
        from tailpod.pods.first_contact import ensure_first_contact

        ensure_first_contact(settings, image, say)
    if use_tailnet:
        from tailpod.provision.tailnet.steps import check_tailnet_requirements

        check_tailnet_requirements(settings, allow_nonephemeral=allow_nonephemeral)
    # The home's id in the tag: a team's shared account tells whose pod it is (proof.py).
    run_tag = new_run_tag(home_id(settings.state_dir, settings.home_id))
    # One clock read: the spec carries this deadline to the ledger and to the pod's guard.
    ttl_at = ttl_deadline(settings.ttl_hours, time.time())
    spec = _spec(settings, run_tag, image, use_tailnet, cfg.port, ttl_at,
                 keep_caches=bool(volume))
    spec, facts = follow_image(settings, spec, say)
    mount = _mount_volume(settings, ledger, cfg, spec, volume, say) if volume else None
    # The pod's own auth key is minted last, once nothing before the create can refuse: a spec
    # or volume refused above leaves no live key behind (#26).
    pod_key_id, pod_key = (_mint_pod_key(settings, run_tag, say) if use_tailnet
                           else (None, None))
    if pod_key is not None:
        from tailpod.provision.tailnet.join import pod_env

        spec.env.update(pod_env(pod_key))
    offered = "each offer's minimum" if spec.bid is None else f"${spec.bid:g}/h"
    bid = f", spot, bid {offered}" if spec.spot else ""
    cap = "no price cap" if spec.max_price is None else f"cap ${spec.max_price:g}/h"
    say(f"renting on {settings.provider}: {', '.join(spec.gpu_preference)} ({cap}{bid})")
    tailnet = {"enabled": use_tailnet, **({"auth_key_id": pod_key_id} if pod_key_id else {})}
    try:
        record, info = up_remote(settings, ledger, spec, tailnet=tailnet)
    except BaseException:
        # No pod holds the minted key (create_pod_safely ended any stray): revoke it now, where
        # it stayed valid for its 30 minutes after a refused create (issue 38, #26).
        _revoke_unused_key(settings, run_tag, pod_key_id, say)
        raise
    if mount is not None:
        from tailpod.provision.volumes import note_use

        note_use(ledger, mount.tag, run_tag)
        record = ledger.update(run_tag, event="volume-mounted",
                               extra=dataclasses.replace(record.extra, volume=mount.to_json()))
    current = record

    def step(event: str, **fields: Any) -> PodRecord:
        """ledger.update; a record the ledger lost meanwhile (files deleted) is written back."""
        nonlocal current
        if ledger.get(run_tag) is None:
            say(f"the ledger lost {run_tag} while `up` ran; writing it back")
            current.note("written-back", reason="the ledger no longer held this record")
            ledger.put(current)
        current = ledger.update(run_tag, event=event, **fields)
        return current

    try:
        step("image-pinned", image=image, engine=cfg.to_json(),
             tailnet={"enabled": use_tailnet, **({"auth_key_id": pod_key_id} if pod_key_id
                                                  else {})},
             extra=dataclasses.replace(record.extra, image={"ref": image, "digest": digest},
                                       provider_facts=facts),
             operation=operation_stamp("ssh-wait"))
        running = await_running(settings, current, boot_wait_seconds(image_gb), say)
        step("running", gpu=running.gpu_type or current.gpu,
             price_per_hr=running.price_per_hr if running.price_per_hr is not None
             else current.price_per_hr,
             extra=dataclasses.replace(current.extra, provider_facts={
                 **facts, "host_cuda": running.detail.get("cuda")
                 or running.detail.get("cuda_max_good")}))
        check_stated_price(current, running, spec.max_price)
        # what the running pod states, plus what only the create knew (capacity fallback)
        info = dataclasses.replace(running, detail={**info.detail, **running.detail})
        target = watching_boot(settings, current, lambda: reach_pod(
            settings, current, say, boot_wait_seconds(image_gb)))
        step("reachable", ssh=target.to_record(), operation=operation_stamp("engine-start"))
        with open_pod_agent(settings, target, boot_wait_seconds(image_gb), say) as agent:
            deadman = arm_deadman(agent, settings, settings.provider, ttl_at or 0.0)
            say(f"dead-man switch armed (pid {deadman.get('pid')})")
            # `start`: another start of the pod (two lanes behind HAProxy: pods/cloud_lanes.py)
            started = (start or start_arm)(agent, settings, cfg, say)
        name = target.pin_name
        result = started.record
        from tailpod.provision.volumes import cold_start

        cold = cold_start(current.events, current.price_per_hr, time.time(),
                          started.facts.facts, current.extra.volume)
        final = journal.engine_healthy(
            ledger, current, cfg.spec.label(), started.ledger_arm(),
            machine=result.get("machine"), engine_version=result.get("engine_version"),
            extra={"pod_state_dir": agent.state_dir, "cold_start": cold,
                   "emulated": non_vendor_api_endpoint(settings) is not None,
                   "api_endpoint": non_vendor_api_endpoint(settings),
                   "lanes": result.get("lanes") or current.extra.lanes,
                   "deadman": {"ttl_at": ttl_at or 0.0, "pid": deadman.get("pid"),
                               "heartbeat_timeout_s": deadman.get("heartbeat_timeout_s")}},
            write=step, operation={}, endpoint=f"http://{name}:{cfg.port}",
        )  # fmt: skip
        return final, info
    except BaseException as exc:
        if keep_on_failure:
            with contextlib.suppress(TailpodError):
                step("kept-on-failure", operation={})  # kept on purpose, not interrupted
            raise TailpodError(
                f"{run_tag} is up but not serving: {exc}",
                hint=f"it still bills: inspect with `tailpod ssh {run_tag}`, "
                f"stop it with `tailpod down {run_tag}`",
            ) from None
        diagnosis = None
        if isinstance(exc, Exception):  # not on Ctrl-C: that tears down without delay
            with contextlib.suppress(TailpodError):
                diagnosis = _diagnose_boot(settings, current, say)
                step("boot-diagnosed",
                     extra=dataclasses.replace(current.extra, boot_failure=diagnosis.to_json()))
        say(f"bootstrap failed ({exc.__class__.__name__}); tearing {run_tag} down")
        current = ledger.get(run_tag) or current  # teardown writes a lost record back
        try:
            down_remote(settings, ledger, current)
        except TailpodError as down_exc:
            raise BillingNotProven(  # exit 3: it may still bill (docs/exit-codes.md)
                f"bootstrap failed ({exc}) and teardown is NOT proven: {down_exc}",
                hint=f"run `tailpod down {run_tag}`",
            ) from None
        if isinstance(exc, TailpodError):
            message, hint = exc.message, exc.hint
            if diagnosis is not None:
                from tailpod.provision.bootlog import explain
                from tailpod.provision.tailnet.api import TailnetError

                message, hint = explain(message, hint, diagnosis,
                                        tailnet_wait=isinstance(exc, TailnetError))
            failed = NeverRunning if isinstance(exc, NeverRunning) else TailpodError
            raise failed(
                f"{message}\n  the pod was torn down, billing proven stopped", hint
            ) from None
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(f"{run_tag} was torn down, billing proven stopped") from None
        # an error tailpod did not expect (a full disk, a bug), which the CLI says in one line:
        # what became of the pod is said here (adversary-2026-12, `up` with 12 KB free)
        say(f"{run_tag} was torn down, billing proven stopped")
        raise


def _diagnose_boot(settings: Settings, record: PodRecord, say: Say) -> BootDiagnosis:
    """The pod's container log, kept in the run directory, its last lines shown."""
    from tailpod.provision.bootlog import diagnose
    from tailpod.provision.providers import get_provider
    from tailpod.provision.teardown import run_dir_for

    provider = get_provider(record.provider, settings)
    diagnosis = diagnose(provider, record.pod_id, run_dir_for(settings, record.run_tag))
    if diagnosis.path is not None:
        say(f"container log kept in {diagnosis.path}")
    return diagnosis


def relaunch_cloud(
    settings: Settings,
    record: PodRecord,
    cfg: EngineConfig,
    ledger: Ledger,
    say: Say | None = None,
    agent: PodAgent | None = None,
) -> EngineStarted:
    """Restart the pod's engine with another arm through `agent` (the caller's one session to
    the pod; a new one only when the caller has none) and return the arm's start facts. The
    ledger records them for `status` and recovery; nobody reads them back from there."""
    if agent is None:
        with open_pod_agent(settings, SshTarget.from_record(record.ssh), 60) as own:
            return relaunch_cloud(settings, record, cfg, ledger, say, own)
    started = start_arm(agent, settings, cfg, say, relaunch=True)
    current = ledger.get(record.run_tag)
    assert current is not None
    arms = {**current.extra.arms, cfg.spec.label(): started.ledger_arm()}
    ledger.update(
        record.run_tag,
        event="engine-relaunched",
        engine=cfg.to_json(),
        extra=dataclasses.replace(current.extra, startup=started.facts.to_json(), arms=arms),
    )
    return started


def relaunch_over_ssh(settings: Settings, record: PodRecord, cfg: EngineConfig, ledger: Ledger,
                      progress: Callable[[float, str], None],
                      agent: PodAgent | None = None) -> ArmStart:
    """A pod kind's relaunch for any pod reached over SSH (rented, or your own box), through
    `agent` when the caller holds a session to the pod."""
    return relaunch_cloud(settings, record, cfg, ledger,
                          lambda line: progress(0.0, line), agent).arm_start()

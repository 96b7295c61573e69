"""up / relaunch / down for the local provider: the engine on this machine, tracked like a rented pod."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from tailpod.agent.bootstrap import engine, host_facts
from tailpod.agent.bootstrap.start_error import EngineStartError
from tailpod.agent_client.driver import ArmStart
from tailpod.config import Settings, ttl_deadline
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import EngineConfig, LaunchPlan
from tailpod.engines.compile_cache import apply_cache_source
from tailpod.engines.llamacpp import LlamaCppAdapter
from tailpod.engines.local_install import (
    check_engine_installed,
    check_gguf,
    check_llama_server,
    check_local_gpus,
    check_model,
    engine_python,
    is_llamacpp,
    local_engine_env,
)
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger, PodExtra, PodRecord, new_run_tag
from tailpod.pods import journal
from tailpod.provision.base import PodSpec
from tailpod.provision.local.provider import LocalProvider

Progress = Callable[[float, str], None]


def _launch_plan(record: PodRecord, cfg: EngineConfig, settings: Settings) -> LaunchPlan:
    adapter = get_adapter(cfg.engine)
    if isinstance(adapter, LlamaCppAdapter):
        # The binary `up` checked, kept in the ledger so a relaunch (a sweep arm) finds it too.
        binary = record.extra.llama_server or check_llama_server(settings.llama_server)[0]
        return adapter.launch_plan(cfg, binary=binary)
    return adapter.launch_plan(cfg, python=engine_python(settings))


def work_around_mtp_trap(
    settings: Settings, cfg: EngineConfig, run_tag: str
) -> tuple[EngineConfig, list[str]]:
    """A quantized checkpoint whose MTP tensors are stored unquantized but missing from the
    quantization ignore list makes the loader die; serve a patched copy of its config instead
    (weights symlinked) and say what was added."""
    from dataclasses import replace

    from tailpod.engines.checkpoint import fix_mtp_ignore_list

    patched = settings.home / "patched" / run_tag / cfg.spec.label()
    shutil.rmtree(patched, ignore_errors=True)
    added = fix_mtp_ignore_list(cfg.model, patched)
    if not added:
        return cfg, []
    return replace(cfg, model=str(patched)), added


def _start(
    settings: Settings,
    provider: LocalProvider,
    ledger: Ledger,
    record: PodRecord,
    cfg: EngineConfig,
    progress: Progress | None,
) -> ArmStart:
    patched: list[str] = []
    if not is_llamacpp(cfg):  # a GGUF file has no quantization config to patch
        cfg, patched = work_around_mtp_trap(settings, cfg, record.run_tag)
    if patched:
        ledger.update(record.run_tag, event="mtp-ignore-list-patched", extra=dataclasses.replace(
            (ledger.get(record.run_tag) or record).extra,
            mtp_ignore_patch={"served_from": cfg.model, "added": patched},
        ))  # fmt: skip
    adapter = get_adapter(cfg.engine)
    plan = _launch_plan(ledger.get(record.run_tag) or record, cfg, settings)
    spec = PodSpec(
        run_tag=record.run_tag,
        gpu_preference=[],
        image="local",
        start_command=plan.argv,
        env={**plan.env, **local_engine_env(settings, cfg.spec.label())},
        ports=[cfg.port],
    )
    info = provider.create(spec)
    ledger.update(
        record.run_tag,
        event="engine-started",
        status="creating",
        pod_id=info.pod_id,
        endpoint=info.endpoint,
        engine=cfg.to_json(),
        extra=dataclasses.replace(record.extra, argv=plan.argv, launch_warnings=plan.warnings),
    )
    state = provider.engine_state(record.run_tag)
    assert state is not None
    try:
        took = engine.wait_healthy(state, settings.startup_timeout_s, progress)
    except EngineStartError as exc:
        provider.terminate(info.pod_id)
        ledger.update(record.run_tag, event="engine-failed", status="terminated")
        tail = "\n    ".join(exc.tail[-12:])
        raise TailpodError(f"{exc}; last lines of {state['log']}:\n    {tail}") from None
    log_text = Path(state["log"]).read_text(encoding="utf-8", errors="replace")
    # The Inductor cache counted as the pod agent counts it: before the launch (engine.launch)
    # and now, after health, in the engine's own environment.
    inductor = engine.inductor_counts_after(
        state, {**os.environ, **{k: v for k, v in spec.env.items() if isinstance(v, str)}})
    # The log file is appended to across relaunches; parse only this launch's part.
    startup = apply_cache_source(adapter.parse_startup(log_text[state.get("log_offset", 0) :]),
                                 inductor)
    current = ledger.get(record.run_tag)
    assert current is not None
    started = ArmStart(
        startup=startup.to_json(),
        argv=plan.argv,
        startup_s=took,
        checkpoints=host_facts.checkpoint_identities(
            {"model": cfg.model, "draft_model": cfg.spec.draft_model},
            {**os.environ, **local_engine_env(settings, cfg.spec.label())},
        ),
    )
    arm = {"startup": started.startup, "startup_s": took, "argv": plan.argv,
           "checkpoints": started.checkpoints}
    journal.engine_healthy(ledger, current, cfg.spec.label(), arm, machine=state.get("machine"),
                           engine_version=engine.engine_version(cfg.host, cfg.port))
    return started


def up_local(
    settings: Settings, cfg: EngineConfig, ledger: Ledger, progress: Progress | None = None
) -> PodRecord:
    gpu, gpu_count, extra = "local CPU", 0, PodExtra()
    if is_llamacpp(cfg):
        check_gguf(cfg.model, "model")
        if not cfg.spec.plain and cfg.spec.draft_model:
            check_gguf(cfg.spec.draft_model, "draft model")
        binary, version = check_llama_server(settings.llama_server)
        extra = PodExtra(llama_server=binary, llama_server_version=version)
    else:
        check_model(cfg.model)
        check_engine_installed(engine_python(settings), cfg.engine)
    gpus = check_local_gpus(cfg)["gpus"]
    if gpus:  # the engine serves from this machine's GPUs (any engine): the record names them
        gpu, gpu_count = str(gpus[0]["name"]), max(1, cfg.tensor_parallel)
    if engine.port_open(cfg.host, cfg.port):
        raise ConfigError(f"port {cfg.port} is already in use", hint="pass another --port")
    provider = LocalProvider(settings.home)
    record = ledger.put(
        PodRecord(
            run_tag=new_run_tag(),
            provider="local",
            engine=cfg.to_json(),
            gpu=gpu,
            gpu_count=gpu_count,
            price_per_hr=0.0,
            ttl_expires_at=ttl_deadline(settings.ttl_hours, time.time()),
            extra=extra,
        )
    )
    _start(settings, provider, ledger, record, cfg, progress)
    final = ledger.get(record.run_tag)
    assert final is not None
    return final


def relaunch_local(
    settings: Settings,
    record: PodRecord,
    cfg: EngineConfig,
    ledger: Ledger,
    progress: Progress | None = None,
) -> ArmStart:
    """Restart the engine of a running local pod with another configuration (another arm);
    its start facts, returned (the ledger records them for `status`)."""
    provider = LocalProvider(settings.home)
    if record.pod_id:
        provider.terminate(record.pod_id)
    return _start(settings, provider, ledger, record, cfg, progress)

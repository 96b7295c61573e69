"""`tailpod up`, `status` and `down`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, Group
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tailpod.cli import remote
from tailpod.cli import volume as volume_cli
from tailpod.cli.common import (
    StepLedger,
    console,
    err_console,
    handle_errors,
    ledger_for,
    print_json,
    settings_from,
    step_say,
)
from tailpod.cli.gpus import DISK_GB, MIN_CUDA, MIN_RELIABILITY
from tailpod.config import Settings, check_run_settings, gpu_flags
from tailpod.engines.base import EngineConfig, SpecArm, check_spec_k, check_spec_method
from tailpod.engines.checkpoint import check_arms
from tailpod.engines.llamacpp import SPLIT_MODES
from tailpod.errors import ConfigError
from tailpod.ledger import (
    Ledger,
    PodRecord,
    ended_at,
    interrupted_step,
    matrix_settle,
    matrix_status,
)
from tailpod.pods.arm_switch import settle_command, switch_arm
from tailpod.pods.base import LanesOptions, UpOptions, UpResult
from tailpod.pods.journal import last_change
from tailpod.pods.kinds import kind_for
from tailpod.provision.apiclient import call_deadline, fail_fast_unreachable
from tailpod.provision.providers import canonical_name, check_spot_route
from tailpod.results.hardware import check_pod, gpu_column
from tailpod.secrets import redact


@contextmanager
def startup_progress(what: str) -> Iterator[Any]:
    """A spinner with elapsed time and the engine's latest log line; without a terminal, a
    plain line per step on stderr (cli/common.py step_say)."""
    if not console.is_terminal:
        yield step_say(what)
        return
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[line]}", style="dim"),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(what, line="")

        def update(elapsed: float, line: str) -> None:
            progress.update(task, line=redact(line)[-90:])

        yield update


@contextmanager
def requirements_on_refusal(provider: str) -> Iterator[None]:
    """When preflight refuses the rent, print the table `check-requirements` prints; the error
    line (exit 2) follows."""
    from tailpod.pods.cloud import PreflightRefused

    try:
        yield
    except PreflightRefused as exc:
        from tailpod.cli.check import print_requirements

        print_requirements(exc.report, provider, err_console)  # stderr: `--json` output stays JSON
        raise


def pods_table(rows: list[dict[str, Any]], out: Console) -> Table | Group:
    """`status`'s pods: one table when it fits the terminal whole, else a block of `key value`
    lines per pod (eleven columns at 80 wrapped every header and cut the run tag and the
    endpoint; rich shortens a cell with an ellipsis rather than overflow the width)."""
    cells = [
        {
            "run tag": row["run_tag"],
            "provider": row["provider"],
            "pod": row.get("pod_id") or "-",
            "status": status_cell(row) + (f" (matrix {row['matrix']['id']})" if row.get("matrix")
                                          and not row["matrix"]["interrupted"] else ""),
            "engine": row["engine"] or row.get("purpose") or "-",
            "arm": row["arm"] or "-",
            "endpoint": row["endpoint"] or "-",
            "GPU": gpu_column(row["gpu"], row["hardware"]),
            "$/hr": "-" if row["price_per_hr"] is None else f"{row['price_per_hr']:.3f}",
            "uptime": f"{row['uptime_s'] / 60:.1f} min",
            "spent": "-" if row["spend_usd"] is None else f"${row['spend_usd']:.4f}",
            "health": {True: "[green]healthy[/]", False: "[red]down[/]"}.get(row["healthy"], "unknown"),
            "flags": f"[red]{', '.join(row['flags'])}[/]" if row.get("flags") else "-",
        }
        for row in rows
    ]
    table = Table(title="tailpod pods")
    for col in cells[0]:
        table.add_column(col, no_wrap=True)
    for cell in cells:
        table.add_row(*cell.values())
    if Measurement.get(out, out.options.update_width(10_000), table).maximum <= out.width:
        return table
    blocks: list[Text | Table] = []
    for cell in cells:
        # the title is a line of its own: a table's title wraps at the block's width, which cut
        # a run tag in two (newcomer 2.25)
        blocks.append(Text(f"tailpod pod {cell['run tag']}", style="italic", overflow="fold"))
        block = Table(show_header=False, box=None)
        block.add_column(style="bold", no_wrap=True)
        block.add_column(overflow="fold")
        for key, value in cell.items():
            if key != "run tag":
                block.add_row(key, value)
        blocks.append(block)
    return Group(*blocks)


def utc_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def status_cell(row: dict[str, Any]) -> str:
    """The ledger's status, and the provider's word for the pod where it says otherwise."""
    said = row.get("provider_state")
    if said and said != row["status"] and not str(row["status"]).startswith("gone"):
        return f"{row['status']} (provider: {said})"
    return str(row["status"])


FLAG_MEANINGS = {
    "ghost": "the ledger holds the pod as live but its provider no longer has it: it ended "
             "outside tailpod (its dead-man switch, its TTL, or a delete by hand), or by a "
             "teardown of tailpod's whose proof did not finish (its reason says which); nothing "
             "bills for it; `tailpod down TAG` proves and records that",
    "orphan": "the provider holds a tailpod-tagged pod the ledger does not: it bills outside "
              "the ledger (another machine's run, an old crash); `tailpod down --all` stops it",
    "other": "the pod's run tag carries another home's id (a colleague's TAILPOD_HOME on the "
             "same account): it bills for their run, not this home's; their `tailpod down` "
             "settles it (docs/providers.md, a team on one account)",
    "interrupted": "a tailpod command was stopped part-way on this pod (its owner process is "
                   "gone); `tailpod down TAG` settles it",
    "expired": "the pod is past its TTL; `tailpod down --expired`",
    "preempted": "a spot pod that lost its bid: the provider stopped it (its processes are gone) "
                 "and its disk bills until it is destroyed; `tailpod down TAG` destroys it and "
                 "proves the instance and its disk gone (docs/providers.md, Spot)",
}


def flag_legend(report: Any) -> list[str]:
    """What each flag in the cloud table means, for the flags that table shows."""
    shown = {f.split(" ")[0] for row in report.rows for f in row.flags}
    lines = [f"  {name}: {text}" for name, text in FLAG_MEANINGS.items() if name in shown]
    return ["flags:", *lines] if lines else []


def engine_config(
    settings: Settings,
    spec_k: int,
    spec_method: str | None,
    draft_model: str | None,
    context_length: int | None,
    max_running_requests: int | None,
    enforce_eager: bool,
) -> EngineConfig:
    check_spec_k(spec_k)
    for flag, value in (("--context-length", context_length),
                        ("--max-running-requests", max_running_requests)):
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be positive, got {value}")
    if spec_method:
        check_spec_method(spec_method)
    if spec_k and spec_method == "draft_model" and not draft_model:
        raise ConfigError("--spec-method draft_model needs --draft-model DIR")
    method = spec_method or ("draft_model" if draft_model else "mtp")
    return EngineConfig(
        engine=settings.engine,
        model=settings.model,
        served_name=settings.served_name,
        port=settings.port,
        context_length=context_length,
        max_running_requests=max_running_requests,
        spec=SpecArm(k=spec_k, method=method if spec_k else None, draft_model=draft_model),
        enforce_eager=enforce_eager,
    )


def check_provider(name: str) -> None:
    canonical_name(name)  # a ConfigError naming the choices for an unknown provider


def relaunch_arm(
    run_tag: str,
    model: str | None,
    spec_k: int,
    spec_method: str | None,
    draft_model: str | None,
    json_out: bool,
) -> None:
    """Restart a running pod's engine with another arm; its startup facts land in the ledger."""
    settings = settings_from()
    ledger = ledger_for(settings)
    record = ledger.resolve(run_tag)
    if record.status != "running":
        raise ConfigError(f"{record.run_tag} is {record.status}, not running")
    current = EngineConfig.from_json(record.engine)
    wanted = engine_config(
        replace(settings, model=model or current.model, engine=current.engine,
                port=current.port, served_name=current.served_name),
        spec_k, spec_method, draft_model, current.context_length,
        current.max_running_requests, current.enforce_eager,
    )  # fmt: skip
    wanted = replace(wanted, tensor_parallel=current.tensor_parallel, extra_args=current.extra_args)
    with startup_progress(f"relaunching {wanted.engine} ({wanted.spec.label()})") as update:
        started = switch_arm(settings, record, wanted, ledger, update)
    facts = started.startup.get("facts") or {}
    final = ledger.get(record.run_tag)
    assert final is not None
    if json_out:
        print_json(final.to_json())
        return
    console.print(
        f"[green]relaunched[/] {record.run_tag}: {wanted.spec.label()} on {wanted.model}; "
        f"KV cache {facts.get('kv_tokens')} tokens, "
        f"max concurrency {facts.get('max_concurrency')}"
    )


def print_cloud_up(settings: Settings, record: PodRecord) -> None:
    from tailpod.provision.tailnet.steps import remember_pod_ssh

    path, include = remember_pod_ssh(settings, record.run_tag, record.ssh)
    # soft-wrapped: the terminal folds a long line, so the image digest and the Include line
    # stay whole for a reader to copy (newcomer 2.4: rich broke them onto lines of their own)
    console.print(
        f"[green]up[/] {record.run_tag} on {record.provider}: {record.gpu} at "
        f"${record.price_per_hr or 0:.3f}/hr, image {record.image}", soft_wrap=True
    )
    console.print(f"  ssh: tailpod ssh {record.run_tag}   (or add to ~/.ssh/config: {include})",
                  soft_wrap=True)
    console.print(f"  ssh config entry written to {path}", soft_wrap=True)


def pod_status(settings: Settings, record: PodRecord) -> dict[str, Any]:
    healthy = kind_for(record.provider).engine_healthy(settings, record)
    engine = record.engine or {}
    # A pod proven down stops at its proven end: its uptime and spend never grow afterwards.
    uptime = max(0.0, (ended_at(record) or time.time()) - record.created_at)
    spend = (
        (record.price_per_hr or 0.0) * uptime / 3600 if record.price_per_hr is not None else None
    )
    step = interrupted_step(record)
    change = last_change(record)  # the journal's last change of state, shown with its time
    matrix = matrix_status(record)
    stopped = matrix["id"] if matrix is not None and matrix["interrupted"] else None
    # a failed arm switch left no engine (pods/arm_switch.py): said, with what settles it
    no_engine = record.extra.no_engine if record.status == "running" and not step else None
    status = (f"interrupted during {step}" if step
              else "running, no engine" if no_engine else record.status)
    return {
        "run_tag": record.run_tag,
        "provider": record.provider,
        "status": f"interrupted matrix {stopped} ({status})" if stopped else status,
        "interrupted_during": step,
        "matrix": matrix,
        "owner": record.operation or (record.extra.matrix or {}).get("owner") if stopped
        else record.operation or None,
        "settle": matrix_settle(record, stopped) if stopped
        else f"tailpod down {record.run_tag}" if step
        else (settle_command(record.run_tag) if no_engine else None),
        "no_engine": no_engine,
        "engine": engine.get("engine"),
        "purpose": record.extra.purpose,  # a pod rented for a check, not to serve
        "model": engine.get("model"),
        "arm": SpecArm(**engine["spec"]).label() if engine.get("spec") else None,
        "endpoint": record.endpoint,
        "gpu": record.gpu,
        "hardware": check_pod(record),
        "price_per_hr": record.price_per_hr,
        "uptime_s": round(uptime, 1),
        "spend_usd": None if spend is None else round(spend, 4),
        "healthy": False if no_engine else healthy,
        "ttl_expired": bool(record.ttl_expires_at and time.time() > record.ttl_expires_at),
        "last_change": None if change is None else change.to_json(),
        **({"lanes": _lanes_status(settings, record)} if record.extra.lanes else {}),
    }


def _lanes_status(settings: Settings, record: PodRecord) -> dict[str, Any] | None:
    from tailpod.pods.cloud_lanes import lanes_run_status

    return lanes_run_status(settings, record) if record.status == "running" else None


def up_lanes_cli(settings: Settings, cfg: EngineConfig, ledger: Ledger, lanes: str | None,
                 admission_limit: int | None, decision: Path | None, cpu_engine: bool,
                 kv_gib: float | None, mem_fraction: float | None, json_out: bool,
                 options: UpOptions | None = None) -> None:
    """`up --lanes spec:K,plain`: the flags read, then the kind's up_lanes (both engines one
    after the other, HAProxy in front: on this machine, pods/lanes.py, or on a rented pod,
    pods/cloud_lanes.py)."""
    from tailpod.pods import lanes as lanes_mod

    kind = kind_for(settings.provider)
    if decision is not None:
        k, limit = lanes_mod.limit_from_decision(decision)
        specs = lanes_mod.parse_lanes(lanes or f"spec:{k},plain")
        if specs[0].k != k:
            raise ConfigError(f"--lanes spec:{specs[0].k} disagrees with the decision's K={k}")
        admission_limit = admission_limit or limit
    else:
        specs = lanes_mod.parse_lanes(lanes or "")
    if not admission_limit or admission_limit < 1:
        raise ConfigError("--lanes needs --admission-limit N (or --decision decision.json)")
    lanes_mod.check_lane_settings(specs, cfg.port, cfg.spec.k, kv_gib, mem_fraction)
    shape = LanesOptions(tuple(specs), admission_limit, cpu_engine, kv_gib, mem_fraction)
    with startup_progress(f"starting two {cfg.engine} lanes and HAProxy") as update, \
            requirements_on_refusal(settings.provider):
        result = kind.up_lanes(settings, cfg, ledger, shape, update, options or UpOptions())
    if not print_up_start(settings, result, json_out):
        print_lanes_up(result.record, admission_limit)


def print_up_start(settings: Settings, result: UpResult, json_out: bool) -> bool:
    """What `up` says first of what it started: the loud line when capacity fallback rented
    another card, then either the record as JSON (True: nothing more to say) or, for a pod
    reached over SSH, its rental and its ssh config entry (False: the caller goes on)."""
    remote.print_fallback_warning(result.info)
    if json_out:
        print_json(result.record.to_json())
        return True
    if result.record.ssh:
        print_cloud_up(settings, result.record)
    return False


def print_lanes_up(record: PodRecord, admission_limit: int) -> None:
    info = record.extra.lanes
    console.print(f"[green]up[/] {record.run_tag}: two lanes behind HAProxy at "
                  f"{record.endpoint}; spec lane admits {admission_limit} in flight")
    gate = info.get("gate") or {}
    console.print(f"  token-identity gate: spec lane {gate.get('status')} against the plain lane "
                  f"({gate.get('prompts')} prompts, {gate.get('max_tokens')} tokens, "
                  f"{gate.get('token_source')})")
    for name, row in info["lanes"].items():
        facts = (row.get("startup") or {}).get("facts", {})
        console.print(f"  {name}: port {row['port']}, {row['budget']}, KV cache "
                      f"{facts.get('kv_tokens')} tokens, max concurrency "
                      f"{facts.get('max_concurrency')}, healthy in "
                      f"{float(row.get('startup_s') or 0):.0f} s")
    console.print(f"  OPENAI_BASE_URL={record.endpoint}/v1", soft_wrap=True)


def vol_only_rows(report: Any) -> Any:
    """The storage report without its provider errors (status reports those as unknown)."""
    return type(report)(report.rows)


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def up(
        provider: str = typer.Option(
            None, help="local, runpod, vastai or ssh (your own box; env TAILPOD_PROVIDER)."
        ),
        engine: str = typer.Option(None, help="vllm, sglang or llamacpp (env TAILPOD_ENGINE)."),
        model: str = typer.Option(None, help="Checkpoint directory or Hub id (env TAILPOD_MODEL)."),
        port: int = typer.Option(None, help="Engine port on the pod (env TAILPOD_PORT)."),
        spec_k: int = typer.Option(0, "--spec-k", help="Draft tokens per step; 0 = plain decode."),
        spec_method: str = typer.Option(
            None, help="Speculation: mtp (the checkpoint's own head), ngram, draft_model."
        ),
        draft_model: str = typer.Option(None, help="Draft checkpoint for draft_model speculation."),
        context_length: int = typer.Option(None, help="Maximum context length."),
        max_running_requests: int = typer.Option(
            None, help="Pin the engine's request slots (same in every arm)."
        ),
        enforce_eager: bool = typer.Option(
            None, help="Skip graph compilation (faster start); default on for the local CPU engine."
        ),
        gpu: list[str] = typer.Option(
            None, "--gpu", help="GPU preference, repeatable; the order is the fallback order. "
            "NAME:N asks for N of them (A40:2)."
        ),
        gpu_count: int = typer.Option(None, help="GPUs per pod (tensor-parallel size)."),
        max_price: float = typer.Option(None, help="Refuse offers above this $/hr."),
        spot: bool = typer.Option(
            None, "--spot/--no-spot", help="Rent an interruptible (spot) pod where the provider "
            "sells one (vast.ai); it can be preempted (env TAILPOD_SPOT)."),
        bid: float = typer.Option(
            None, "--bid", metavar="USD/H", help="With --spot: the bid per machine in $/h "
            "(default: each offer's minimum bid); the price cap applies to it (env TAILPOD_BID)."),
        min_reliability: float = MIN_RELIABILITY,
        min_cuda: str = MIN_CUDA,
        disk_gb: int = DISK_GB,
        image: str = typer.Option(None, help="Engine image; pinned to its digest before renting."),
        ttl_hours: float = typer.Option(None, help="The pod terminates itself after this."),
        allow_unpinned: bool = typer.Option(False, help="Accept a mutable tag such as latest."),
        allow_nonephemeral: bool = typer.Option(
            False, help="Accept a reusable, non-ephemeral Tailscale auth key."
        ),
        tailnet: bool = typer.Option(
            True, help="Join the pod to the tailnet (off: SSH to the provider's endpoint)."
        ),
        keep_on_failure: bool = typer.Option(
            False, help="Keep (and keep paying for) a pod whose engine failed to start."
        ),
        first_contact: bool = typer.Option(
            None, "--first-contact/--no-first-contact",
            help="RunPod: the first time this account meets the image's start form, check on a "
            "CPU pod (under a cent, proven down) that the start command runs and the pod key can "
            "delete its pod, before any GPU rents (default; env TAILPOD_FIRST_CONTACT=auto|off). "
            "Off: both stay unverified and the run says so.",
        ),
        relaunch: str = typer.Option(
            None,
            "--relaunch",
            help="RUN_TAG of a running pod: restart its engine with this arm (--spec-k, "
            "--spec-method, --draft-model, --model) instead of renting a new pod.",
        ),
        host: str = typer.Option(
            None, "--host", metavar="USER@HOST[:PORT]",
            help="--provider ssh: your own box, reached over SSH (env TAILPOD_SSH_HOST).",
        ),
        llama_server: str = typer.Option(
            None,
            help="Your llama.cpp server binary, for --provider local --engine llamacpp "
            "(env TAILPOD_LLAMA_SERVER; default: llama-server on PATH).",
        ),
        split_mode: str = typer.Option(
            None,
            help="llama.cpp with --gpu-count > 1: layer (whole layers per GPU, the default) "
            "or row (each weight split by rows).",
        ),
        lanes: str = typer.Option(
            None, "--lanes", help="spec:K,plain: two engines of the checkpoint behind one HAProxy "
            "endpoint; the spec lane admits --admission-limit requests in flight, the rest go to "
            "plain; gated for token identity first (--provider local, or a rented pod: HAProxy "
            "installed there from the distribution's package).",
        ),
        admission_limit: int = typer.Option(
            None, "--admission-limit", help="With --lanes: the spec lane's maxconn."
        ),
        decision: Path = typer.Option(
            None, "--decision", help="With --lanes: take K and the admission limit from this "
            "decision.json (`tailpod decide`)."
        ),
        lane_kv_gib: float = typer.Option(
            None, help="With --lanes on a CPU: each lane's KV cache in GiB (VLLM_CPU_KVCACHE_SPACE)."
        ),
        lane_mem_fraction: float = typer.Option(
            None, help="With --lanes on a GPU: each lane's --gpu-memory-utilization."
        ),
        volume: str = typer.Option(
            None, "--volume", help="A volume (tailpod volume create) to mount: the pod goes to "
            "its data center (vast.ai: its machine) and keeps weights and compile caches on it."),
        json_out: bool = typer.Option(False, "--json", help="Print the ledger record as JSON."),
    ) -> None:
        """Start a pod and its serving engine, and record it in the ledger.

        A pod that fails before tailpod can SSH in is torn down; the error shows the last lines
        of its container log (kept as container.log in the run directory) and names the cause it
        recognises: the image's entrypoint rejected the start command, the image pull failed, the
        disk is full, sshd did not start, or the tailnet join failed.
        """
        if relaunch:
            relaunch_arm(relaunch, model, spec_k, spec_method, draft_model, json_out)
            return
        gpus, count = gpu_flags(gpu, gpu_count)  # `--gpu A40:2`: two A40s (SkyPilot's form)
        settings = settings_from(
            provider=provider,
            engine=engine,
            model=model,
            port=port,
            gpus=gpus,
            gpu_count=count,
            max_price=max_price,
            spot=spot,
            bid=bid,
            min_reliability=min_reliability,
            min_cuda=min_cuda,
            disk_gb=disk_gb,
            image=image,
            ttl_hours=ttl_hours,
            llama_server=llama_server,
            ssh_host=host,
            first_contact=None if first_contact is None else ("auto" if first_contact else "off"),
        )
        check_provider(settings.provider)
        check_run_settings(settings)  # before preflight, the ledger or any rental
        check_spot_route(settings)
        kind = kind_for(settings.provider)
        options = UpOptions(allow_unpinned=allow_unpinned, allow_nonephemeral=allow_nonephemeral,
                            use_tailnet=tailnet, keep_on_failure=keep_on_failure, volume=volume)
        kind.refuse(options)  # what this kind cannot honour: exit 2 before anything else
        # The local CPU engine (vLLM) gets a small context and eager mode; llama.cpp on your own
        # GPU box is served like a rented GPU.
        adapter = kind.engine_adapter(settings.engine)
        llamacpp = adapter.name == "llamacpp"
        cpu_engine = kind.serves_on_cpu(adapter)
        cfg = engine_config(
            settings,
            spec_k,
            spec_method,
            draft_model,
            context_length if context_length is not None else (1024 if cpu_engine else None),
            max_running_requests,
            (cpu_engine if enforce_eager is None else enforce_eager),
        )
        if not cpu_engine:
            cfg = cfg.on_gpus(settings.gpu_count)
        if split_mode is not None:
            if not llamacpp or split_mode not in SPLIT_MODES:
                raise ConfigError(
                    f"--split-mode {split_mode!r}: llama.cpp only, one of {', '.join(SPLIT_MODES)}"
                )
            cfg = replace(cfg, extra_args=(*cfg.extra_args, "--split-mode", split_mode))
        if not (lanes or decision) and (lane_kv_gib, lane_mem_fraction, admission_limit) != \
                (None, None, None):
            raise ConfigError("--lane-kv-gib, --lane-mem-fraction and --admission-limit shape "
                              "two lanes: they need --lanes spec:K,plain (or --decision)")
        if not (lanes or decision):
            check_arms([cfg], settings)  # an arm that cannot run: exit 2 before any rental
        ledger = StepLedger(settings.state_dir)  # says the pod id, GPU and price as they come
        if lanes or decision:
            up_lanes_cli(settings, cfg, ledger, lanes, admission_limit, decision, cpu_engine,
                         lane_kv_gib, lane_mem_fraction, json_out, options)
            return
        with startup_progress(f"starting {cfg.engine} ({cfg.spec.label()})") as update, \
                requirements_on_refusal(settings.provider):
            result = kind.up(settings, cfg, ledger, update, options)
        if print_up_start(settings, result, json_out):
            return
        record = result.record
        facts = (record.extra.startup or {}).get("facts", {})
        console.print(
            f"[green]up[/] {record.run_tag}: {cfg.engine} serving {cfg.model} "
            f"({cfg.spec.label()}) at {record.endpoint} "
            f"in {record.extra.startup_s or 0:.0f} s"
        )
        console.print(
            f"  KV cache: {facts.get('kv_tokens')} tokens; "
            f"max concurrency: {facts.get('max_concurrency')}"
        )
        console.print(f"  OPENAI_BASE_URL={record.endpoint}/v1", soft_wrap=True)
        stamp = check_pod(record).get("stamp")
        if stamp:
            console.print(f"  [bold red]{stamp}[/]")

    @app.command()
    @handle_errors
    def status(
        run_tag: str = typer.Argument(None, help="One run tag; default: every active pod."),
        json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
        all_records: bool = typer.Option(False, "--all", help="Include terminated pods."),
        beat: bool = typer.Option(
            True, help="Send each cloud pod's dead-man switch a heartbeat (over SSH)."
        ),
        timeout: float = typer.Option(
            remote.STATUS_TIMEOUT_S, "--timeout", min=1.0,
            help="Stop asking the providers after this many seconds, every call included; what "
            "they did not answer is reported unknown (exit 3).",
        ),
    ) -> None:
        """What is running: provider, engine, model, endpoint, GPU, $/hr, uptime, spend, health.

        When a provider cannot be asked, status says so on stderr, never "nothing is running",
        and exits 3: something may bill that it cannot see (docs/exit-codes.md)."""
        deadline = time.monotonic() + timeout
        settings = settings_from()
        ledger = ledger_for(settings)
        if run_tag:
            records = [ledger.resolve(run_tag)]
        else:
            records = ledger.all() if all_records else ledger.active()
        rows = [pod_status(settings, r) for r in records]
        if beat:
            for row, record in zip(rows, records, strict=True):
                row["deadman"] = kind_for(record.provider).heartbeat(settings, record)
                engine = (row["deadman"] or {}).get("engine") or {}
                if row["healthy"] is None and isinstance(engine.get("healthy"), bool):
                    row["healthy"] = engine["healthy"]  # the pod's engine, asked over SSH
        # status only reports: a URL nothing answers at is said at once, not retried (2.28)
        with call_deadline(deadline), fail_fast_unreachable():
            cloud = remote.remote_report(settings, ledger)
            storage = volume_cli.down_storage(settings, ledger, None, delete_volumes=False)
        unknown = remote.unknown_line(cloud, ledger) if cloud else None
        lanes_unknown = [f"{row['run_tag']}: lanes not read ({row['lanes']['unknown']})"
                         for row in rows if (row.get("lanes") or {}).get("unknown")]
        if lanes_unknown:
            unknown = "; ".join([*([unknown] if unknown else []), *lanes_unknown])
        gone = {g.run_tag: g for g in cloud.ghosts} if cloud else {}
        for row in rows:
            ghost = gone.get(row["run_tag"])
            if ghost is not None:  # the ledger's "running" is not what the provider says
                row["status"] = f"gone (ledger: {row['status']})"
                row["gone"] = next((f for f in ghost.flags if f != "ghost"), None)
                row["settle"] = ghost.settle
        # one row per pod: the provider's figures folded into the pod rows (cli/remote.py)
        others = remote.fold_provider_truth(rows, cloud) if cloud else []
        if storage and storage.errors and not unknown:
            unknown = "; ".join(f"{n}: volumes could not be listed ({e})"
                                for n, e in storage.errors.items())
        if json_out:
            print_json({"pods": rows, **({"cloud": cloud.to_json()} if cloud else {}),
                        **({"storage": storage.to_json()} if storage else {}),
                        "unknown": unknown})
            if unknown:
                err_console.print(f"[bold red]unknown:[/] {unknown}")
                raise typer.Exit(3)
            return
        if cloud:
            remote.print_remote(cloud, others)
            for line in flag_legend(cloud):
                console.print(line, markup=False)
        if storage and storage.rows:
            volume_cli.print_storage(vol_only_rows(storage))
        if unknown:
            # Never reassure without evidence: no "nothing is running" after a provider failed.
            if rows:
                console.print(pods_table(rows, console))
            err_console.print(f"[bold red]unknown:[/] {unknown}")
            raise typer.Exit(3)
        if not rows:
            console.print("no pod is running" if storage and storage.rows
                          else "nothing is running")
            return
        console.print(pods_table(rows, console))
        # a run the provider's report holds has its interruption said there (cli/remote.py
        # print_remote); any other (this machine's, your box's) is said here
        told = {(r.run_tag, r.provider) for r in cloud.rows} if cloud else set()
        for row in rows:
            for name, lane in ((row.get("lanes") or {}).get("lanes") or {}).items():
                console.print(
                    f"  {row['run_tag']} lane {name}: port {lane['port']}, "
                    f"{'healthy' if lane['healthy'] else 'DOWN'}, {lane['requests']} requests, "
                    f"{lane['in_flight']} in flight (HAProxy: {lane['proxy_status']})")
            if (row.get("lanes") or {}).get("unknown"):  # never a guess: the pod did not answer
                console.print(f"  [bold red]{row['run_tag']} lanes and HAProxy: unknown[/] "
                              f"({row['lanes']['unknown']})")
            elif row.get("lanes"):
                proxy = row["lanes"]["proxy"]
                console.print(f"  {row['run_tag']} HAProxy {proxy['endpoint']}: "
                              f"{'alive' if proxy['alive'] else 'DOWN'}, spec lane admits "
                              f"{row['lanes']['admission_limit']}")
            preempted = next((f for f in row.get("flags") or [] if f.startswith("preempted")),
                             None)
            change = row.get("last_change")
            if change and not preempted:  # a stopped spot pod is not "running since" its start
                console.print(f"  {row['run_tag']}: {change['state']} since "
                              f"{utc_time(change['at'])} ({change['event']})", markup=False)
            if row["hardware"].get("stamp"):
                console.print(f"  [bold red]{row['run_tag']}: {row['hardware']['stamp']}[/]")
            if row.get("gone"):
                console.print(f"[bold red]{row['run_tag']}: gone at {row['provider']}[/]: "
                              f"{row['gone']}; record it with: {row['settle']}")
            elif preempted:
                console.print(f"[bold red]{row['run_tag']}: {escape(preempted)}[/]; settle it "
                              f"with: tailpod down {row['run_tag']}")
            elif row.get("no_engine"):
                console.print(f"[bold red]{row['run_tag']}: no engine[/] " + escape(
                    f"(arm {row['no_engine']['arm']} failed to start; "
                    f"{row['no_engine']['restore']}); settle it with: {row['settle']}"))
            elif row.get("settle") and (row["run_tag"], row["provider"]) not in told:
                owner = row.get("owner") or {}
                console.print(
                    f"[bold red]{row['run_tag']}: {row['status']}[/] (pid {owner.get('pid')} on "
                    f"{owner.get('host')} is gone); settle it with: {row['settle']}")
            deadman = row.get("deadman")
            if deadman and "error" in deadman:
                console.print(f"  {row['run_tag']}: dead-man heartbeat failed: {deadman['error']}")
            elif deadman:
                ttl = deadman.get("ttl_left_s")
                console.print(
                    f"  {row['run_tag']}: dead-man switch {deadman.get('state')}, heartbeat sent"
                    + (f", TTL left {ttl / 3600:.1f} h" if isinstance(ttl, (int, float)) else "")
                )

    @app.command()
    @handle_errors
    def down(
        run_tag: str = typer.Argument(None, help="Run tag; default: the only active pod."),
        json_out: bool = typer.Option(False, "--json", help="Print the proof as JSON."),
        all_tagged: bool = typer.Option(
            False, "--all", help="Every tailpod-tagged resource of the cloud accounts."
        ),
        all_homes: bool = typer.Option(
            False, "--all-homes", help="With --all: other homes' pods on the same account too "
            "(their run tags carry another home id; by default they are left alone)."),
        expired: bool = typer.Option(False, "--expired", help="Every pod past its TTL."),
        volumes: bool = typer.Option(
            False, "--volumes", help="Also delete the volumes this run mounted (else they are "
            "kept, and listed with what they bill)."),
        timeout: float = typer.Option(
            remote.DOWN_TIMEOUT_S, "--timeout", min=1.0,
            help="A wall-clock deadline over every provider call, connect and read included; "
            "at it, exit 3 with each pod's id and its manual stop (billing not proven).",
        ),
    ) -> None:
        """Terminate the pod, then prove that it is gone and nothing bills.

        Works from the providers' listing when the ledger is damaged or lost: `down --all`
        finds every tailpod-tagged pod, and `down RUN_TAG` a tag the ledger does not hold."""
        if all_homes and not all_tagged:
            raise ConfigError("--all-homes goes with --all", hint="tailpod down --all --all-homes")
        if volumes and (all_tagged or expired):  # docs/volumes.md: one run's volumes only
            raise ConfigError(
                f"--volumes deletes the volumes of one run; with {'--all' if all_tagged else '--expired'}"
                " it is refused (nothing was attempted)",
                hint="down --all keeps every volume and lists what it bills; delete one with "
                "tailpod volume rm NAME, or down RUN_TAG --volumes")
        settings = settings_from()
        ledger = ledger_for(settings)
        policy = remote.down_policy(timeout)
        with call_deadline(policy.deadline):
            if all_tagged or expired:
                try:
                    return remote.down_many_cli(
                        settings, ledger, expired_only=not all_tagged, json_out=json_out,
                        policy=policy, all_homes=all_homes)
                finally:  # storage is listed, never deleted, by --all
                    report = volume_cli.down_storage(settings, ledger, None,
                                                     delete_volumes=False)
                    if report and report.rows:
                        volume_cli.print_storage(report, err=json_out)
            record = remote.record_or_provider_truth(settings, ledger, run_tag)
            if record.status == "terminated":
                # The ledger's word is no evidence: the provider is asked again all the same.
                err_console.print(f"{record.run_tag} is terminated in the ledger; asking "
                                  f"{record.provider} again")
            storage: list[Any] = []

            def after(proof: Any) -> None:
                storage.append(volume_cli.down_storage(settings, ledger, record.run_tag,
                                                       delete_volumes=volumes, proof=proof))

            # Every kind, local included: its own settle (a lanes run's final counts, its lanes
            # stopped), then the same proven teardown (pods/down.py).
            try:
                remote.down_remote_cli(settings, ledger, record, json_out, policy=policy,
                                       after=after)
            finally:
                if storage and storage[0] is not None and (storage[0].rows
                                                           or storage[0].delete_failed):
                    volume_cli.print_storage(storage[0], err=json_out)
            if storage and storage[0] is not None and storage[0].delete_failed:
                raise typer.Exit(3)  # the pod is proven gone; a volume asked for still bills

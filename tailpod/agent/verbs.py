"""The agent's command line: `python3 -I agent.pyz <verb> [<sub>]`, a JSON object on stdin, one
JSON envelope on the last line of stdout (envelope.py). The contract of every verb, its stdin
keys and its result, is docs/agent.md."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import AGENT_VERSION, SCHEMA_VERSION
from .bootstrap import deadman, haproxy
from .bootstrap.engine import engine_status, read_state, start_engine, stop
from .bootstrap.start_error import EngineStartError, EngineStopError
from .envelope import (
    EXIT_FAILED,
    EXIT_OK,
    AgentError,
    UsageError,
    emit,
    failure,
    remember_env_file,
    scrub,
    success,
)
from .probes.arrival import parse_arrival, parse_slo
from .probes.basics import DEFAULT_BASE_URL, ProbeError
from .probes.gate import (
    GATE_METHODS,
    GateError,
    run_gate,
    run_gate_against_reference,
    save_gate_reference,
)
from .probes.load import RunOptions, run_cells
from .probes.logprobs import collect_logprobs, logprob_prompts
from .probes.metrics import metrics_summary, parse_prometheus
from .probes.rows import CellPlan, RowWriter
from .probes.transport import Endpoint, detect_engine, scrape_metrics

_REQUIRED = object()


def take(args: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """`args` checked against `spec` (key -> default, or _REQUIRED): unknown keys and missing
    required ones are usage errors, so a typo never silently falls back to a default."""
    if not isinstance(args, dict):
        raise UsageError("stdin must hold one JSON object")
    unknown = sorted(set(args) - set(spec))
    if unknown:
        raise UsageError("unknown key(s): " + ", ".join(unknown))
    out: dict[str, Any] = {}
    for key, default in spec.items():
        if key in args and args[key] is not None:
            out[key] = args[key]
        elif default is _REQUIRED:
            raise UsageError(f"missing key: {key}")
        else:
            out[key] = default
    return out


def _remember_env_files(args: Any) -> None:
    """The env files whose credentials this call's answer must not carry: the one named, and
    the one the pod's start script keeps beside the agent's state (tailpod/pods/cloud.py)."""
    if isinstance(args, dict):
        remember_env_file(args.get("env_file"))
        if isinstance(args.get("state_dir"), str):
            remember_env_file(str(Path(args["state_dir"]) / "pod.env"))


def _progress(t: float, line: str) -> None:
    sys.stderr.write(f"[{t:5.0f}s] {scrub(line)}\n")
    sys.stderr.flush()


# -- engine -----------------------------------------------------------------------------------------
_ENGINE_START = {"plan": _REQUIRED, "state_dir": _REQUIRED, "timeout": 1800.0, "env_file": None}


def cmd_engine_start(args: dict[str, Any]) -> dict[str, Any]:
    a = take(args, _ENGINE_START)
    if not isinstance(a["plan"], dict) or not a["plan"].get("argv") or "port" not in a["plan"]:
        raise UsageError("plan must be an object with argv and port")
    try:
        return start_engine(a["plan"], Path(a["state_dir"]), float(a["timeout"]),
                            Path(a["env_file"]) if a["env_file"] else None, _progress)
    except EngineStopError as exc:
        raise AgentError("engine_stop", str(exc), exc.tail) from None
    except EngineStartError as exc:
        raise AgentError("engine_start", str(exc), exc.tail) from None


def cmd_engine_stop(args: dict[str, Any]) -> dict[str, Any]:
    a = take(args, {"state_dir": _REQUIRED, "grace": 20.0})
    recorded = read_state(Path(a["state_dir"]))
    if recorded is None:
        return {"stopped": True, "had_engine": False}
    if not stop(recorded, float(a["grace"])):
        raise AgentError("engine_stop", f"the engine {recorded.get('label')!r} (process group "
                         f"{recorded.get('pgid')}) or its port outlived SIGTERM and SIGKILL")
    return {"stopped": True, "had_engine": True}


def cmd_proxy_prepare(args: dict[str, Any]) -> dict[str, Any]:
    """HAProxy for two lanes: found or installed, its config written and checked."""
    a = take(args, {"config_text": _REQUIRED, "state_dir": _REQUIRED, "install": True})
    try:
        return haproxy.prepare(str(a["config_text"]), Path(a["state_dir"]), bool(a["install"]))
    except EngineStartError as exc:
        raise AgentError("proxy_prepare", str(exc), exc.tail) from None


def cmd_proxy_stats(args: dict[str, Any]) -> dict[str, Any]:
    a = take(args, {"socket": _REQUIRED})
    try:
        return {"show_stat": haproxy.show_stat(str(a["socket"]))}
    except OSError as exc:
        raise AgentError("proxy_stats", f"{a['socket']}: {exc}") from None


def cmd_engine_status(args: dict[str, Any]) -> dict[str, Any]:
    a = take(args, {"state_dir": _REQUIRED})
    return engine_status(Path(a["state_dir"]))


# -- probe ------------------------------------------------------------------------------------------
# The options the laptop may set: every RunOptions field, with its own default (one source); the
# cells themselves say arm, concurrency, rep, class and cache.
_RUN_OPTIONS = {f.name: f.default for f in dataclasses.fields(RunOptions)}
# A closed-loop cell needs concurrency; an open-loop one carries `arrival` and then concurrency
# caps the requests in flight (null or absent: no cap).
_CELL = {"arm": _REQUIRED, "concurrency": None, "rep": _REQUIRED,
         "prompt_class": _REQUIRED, "cache": "cold", "cell": None, "arrival": None,
         "soak_s": None}


def _workers(raw: Any) -> int:
    """options.workers: load-generating processes, a whole number >= 1."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise UsageError(f"workers must be an integer >= 1, not {raw!r}")
    return raw


def cmd_probe_run(args: dict[str, Any]) -> dict[str, Any]:
    a = take(args, {"options": {}, "cells": _REQUIRED, "out": None})
    o = take(a["options"], _RUN_OPTIONS)
    if not isinstance(a["cells"], list) or not a["cells"]:
        raise UsageError("cells must be a non-empty list")
    try:
        opts = RunOptions(
            base_url=str(o["base_url"]), model=o["model"], run_id=o["run_id"],
            requests_per_cell=int(o["requests_per_cell"]), max_tokens=int(o["max_tokens"]),
            ignore_eos=bool(o["ignore_eos"]), temperature=float(o["temperature"]),
            prompts_dir=o["prompts_dir"], warmup=int(o["warmup"]), engine=str(o["engine"]),
            api=str(o["api"]), transport=str(o["transport"]),
            request_timeout=float(o["request_timeout"]),
            client_bound_threshold=float(o["client_bound_threshold"]),
            slo=parse_slo(o["slo"]),
            slo_percentile=None if o["slo_percentile"] is None else float(o["slo_percentile"]),
            workers=_workers(o["workers"]),
            unique_schema=bool(o["unique_schema"]),
        )
        if opts.slo_percentile is not None and not 0 < opts.slo_percentile <= 100:
            raise UsageError("slo_percentile must be in (0, 100]")
        if opts.workers > 1 and opts.transport != "asyncio":
            raise UsageError("workers > 1 needs transport asyncio")
        cells = []
        for raw in a["cells"]:
            c = take(raw, _CELL)
            arrival = None
            if c["arrival"] is not None:
                arrival = parse_arrival(c["arrival"]).as_json()
            elif c["concurrency"] is None:
                raise UsageError("missing key: concurrency (a cell without arrival)")
            soak = c["soak_s"]
            if soak is not None and (arrival is not None or isinstance(soak, bool)
                                     or not isinstance(soak, (int, float))):
                raise UsageError(f"soak_s must be a number of seconds on a closed-loop cell, "
                                 f"not {soak!r}")
            cells.append(CellPlan(str(c["arm"]), int(c["concurrency"] or 0), int(c["rep"]),
                                  str(c["prompt_class"]), str(c["cache"]), c["cell"], arrival,
                                  None if soak is None else float(soak)))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"bad option or cell: {exc}") from None
    except ProbeError as exc:
        raise UsageError(str(exc)) from None
    writer = RowWriter(a["out"]) if a["out"] else None
    try:
        facts, rows = run_cells(opts, cells, writer)
    except ProbeError as exc:
        raise AgentError("probe", str(exc)) from None
    finally:
        if writer is not None:
            writer.close()
    return {**facts, "rows": rows}


_GATE = {"candidate": _REQUIRED, "reference_url": None, "reference": None,
         "reference_file": None, "save": False, "save_path": None, "model": None,
         "reference_model": None, "candidate_model": None, "max_tokens": 64, "seed": 0,
         "prompts": None, "method": None, "timeout": 300.0}


def cmd_probe_gate(args: dict[str, Any]) -> dict[str, Any]:
    a = take(args, _GATE)
    modes = [k for k in ("reference_url", "reference", "reference_file") if a[k]]
    modes += ["save"] if a["save"] else []
    if len(modes) != 1:
        raise UsageError("give exactly one of reference_url, reference, reference_file, save")
    if a["method"] is not None and a["method"] not in GATE_METHODS:
        raise UsageError(f"method must be one of {', '.join(GATE_METHODS)}")
    methods = (a["method"],) if a["method"] else GATE_METHODS
    candidate_model = a["candidate_model"] or a["model"]
    try:
        if a["save"]:
            ref = save_gate_reference(a["candidate"], a["save_path"], candidate_model,
                                      a["prompts"], int(a["max_tokens"]), int(a["seed"]),
                                      float(a["timeout"]), methods)
            return {"status": "saved", "path": a["save_path"], "prompts": len(ref["prompts"]),
                    "token_source": ref["token_source"], "max_tokens": ref["max_tokens"],
                    "reference": ref}
        if a["reference"] or a["reference_file"]:
            reference = a["reference"]
            if a["reference_file"]:
                with open(a["reference_file"], encoding="utf-8") as fh:
                    reference = json.load(fh)
            if not isinstance(reference, dict):
                raise UsageError("reference must be a gate reference object")
            return run_gate_against_reference(reference, a["candidate"], candidate_model,
                                              float(a["timeout"]))
        return run_gate(a["reference_url"], a["candidate"], a["reference_model"] or a["model"],
                        candidate_model, a["prompts"], int(a["max_tokens"]), int(a["seed"]),
                        float(a["timeout"]), methods)
    except (GateError, ProbeError, OSError, ValueError, KeyError) as exc:
        raise AgentError("gate", str(exc)) from None


_LOGPROBS = {"base_url": DEFAULT_BASE_URL, "model": None, "prompts": _REQUIRED,
             "reference": None, "top_k": 20, "max_tokens": 64, "engine": "auto",
             "ignore_eos": False, "timeout": 600.0, "out": None}


def cmd_probe_logprobs(args: dict[str, Any]) -> dict[str, Any]:
    a = take(args, _LOGPROBS)
    try:
        result = collect_logprobs(
            a["base_url"], logprob_prompts(a["prompts"]), int(a["top_k"]), int(a["max_tokens"]),
            a["model"], a["engine"], a["reference"], float(a["timeout"]), bool(a["ignore_eos"]),
        )
        if a["out"]:
            with open(a["out"], "w", encoding="utf-8") as fh:
                json.dump(result, fh)
    except (ProbeError, OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise AgentError("logprobs", f"{type(exc).__name__}: {exc}") from None
    summary = {"prompts": len(result["prompts"]),
               "positions": sum(len(p.get("positions") or []) for p in result["prompts"]),
               "errors": [p["id"] for p in result["prompts"] if p.get("error")]}
    return {"summary": summary} if a["out"] else {"summary": summary, "logprobs": result}


def cmd_probe_metrics(args: dict[str, Any]) -> dict[str, Any]:
    a = take(args, {"base_url": DEFAULT_BASE_URL, "file": None, "prefix": "", "samples": False})
    if a["file"]:
        try:
            with open(a["file"], encoding="utf-8", errors="replace") as fh:
                samples = parse_prometheus(fh.read())
        except OSError as exc:
            raise AgentError("metrics", f"{a['file']}: {exc}") from None
        source = a["file"]
    else:
        ep = Endpoint.parse(a["base_url"])
        got = scrape_metrics(ep)
        if got is None:
            raise AgentError("metrics", f"no /metrics at {ep.url()}")
        samples, source = got, ep.url() + "/metrics"
    return metrics_summary(samples, source, detect_engine(samples), str(a["prefix"]),
                           bool(a["samples"]))


# -- deadman ----------------------------------------------------------------------------------------
_ARM = {"provider": _REQUIRED, "ttl_at": _REQUIRED, "heartbeat_file": _REQUIRED,
        "heartbeat_timeout": _REQUIRED, "api_url": None, "poll": None, "log": None,
        "dry_run": False, "environ_from": None, "python": None, "retry_base": None,
        "max_backoff": None, "give_up_after": None, "http_timeout": None,
        "no_preflight": False, "arm_timeout": None}


def _deadman(command: str, args: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Run one of deadman.py's commands with the stdin keys as its options (argparse checks
    them as it always did)."""
    a = take(args, spec)
    argv = [command]
    for key, value in a.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, str(value)]
    try:
        ns = deadman.parse_args(argv)
    except SystemExit:  # argparse said why on stderr
        raise UsageError(f"deadman {command}: bad options (see stderr)") from None
    handler = {"arm": deadman.cmd_arm, "beat": deadman.cmd_beat,
               "status": deadman.cmd_status, "disarm": deadman.cmd_disarm}[command]
    code, result = handler(ns)
    if code != 0:
        message = result.get("error") or (
            "the switch is firing: a termination is in progress" if result.get("firing")
            else f"deadman {command} failed")
        raise AgentError("deadman", str(message))
    return result


def cmd_version(_args: dict[str, Any]) -> dict[str, Any]:
    return {"agent": AGENT_VERSION, "schema_version": SCHEMA_VERSION,
            "python": ".".join(map(str, sys.version_info[:3])), "verbs": sorted(VERBS)}


VERBS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "version": cmd_version,
    "engine start": cmd_engine_start,
    "engine relaunch": cmd_engine_start,  # the arm switch: stop the recorded engine, start this
    "engine stop": cmd_engine_stop,
    "engine status": cmd_engine_status,
    "proxy prepare": cmd_proxy_prepare,
    "proxy stats": cmd_proxy_stats,
    "probe run": cmd_probe_run,
    "probe gate": cmd_probe_gate,
    "probe logprobs": cmd_probe_logprobs,
    "probe metrics": cmd_probe_metrics,
    "deadman arm": lambda a: _deadman("arm", a, _ARM),
    "deadman heartbeat": lambda a: _deadman("beat", a, {"heartbeat_file": _REQUIRED}),
    "deadman status": lambda a: _deadman("status", a, {"heartbeat_file": _REQUIRED}),
    "deadman disarm": lambda a: _deadman("disarm", a, {"heartbeat_file": _REQUIRED}),
}


def _read_stdin() -> Any:
    text = sys.stdin.read() if sys.stdin is not None else ""
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"stdin is not JSON: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["deadman", "run"]:  # internal: the daemon `deadman arm` starts detached
        return deadman.main(argv[2:])
    verb = " ".join(argv[:1] if argv[:1] == ["version"] else argv[:2])
    try:
        handler = VERBS.get(verb) if len(argv) == len(verb.split()) else None
        if handler is None:
            raise UsageError(f"unknown verb {' '.join(argv)!r}; verbs: " + ", ".join(VERBS))
        args = {} if verb == "version" else _read_stdin()
        _remember_env_files(args)
        result = handler(args)
        emit(success(verb, result))
        return EXIT_OK
    except AgentError as exc:
        emit(failure(verb, exc))
        return exc.code
    except KeyboardInterrupt:
        emit(failure(verb, AgentError("interrupted", "interrupted")))
        return EXIT_FAILED
    except Exception as exc:  # a bug: still one envelope, never a bare traceback on stdout
        emit(failure(verb, AgentError("internal", scrub(f"{type(exc).__name__}: {exc}"))))
        return EXIT_FAILED

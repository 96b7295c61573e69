"""The shape every serving-engine adapter shares: a launch plan from a config, facts from a log."""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

from tailpod.errors import ConfigError

# The speculation methods tailpod names, engine-neutral; each adapter maps the ones it serves to its
# own flags (vllm.py, sglang.py, llamacpp.py) and the CLI offers exactly these.
SPEC_METHODS: tuple[str, ...] = ("mtp", "ngram", "draft_model", "eagle", "eagle3")
# The most draft tokens per step tailpod accepts anywhere (`up --spec-k`, `--lanes spec:K`,
# `benchmark --spec-k/--max-k`, a decision's K): acceptance decays geometrically with K, so past
# a handful of tokens every extra one is verify work for nothing; 16 is far beyond any useful K
# and still catches a typo (`spec:99`) before a pod rents.
MAX_SPEC_K = 16


def check_spec_method(method: str) -> str:
    """`--spec-method` checked the same way by up, benchmark and matrix."""
    if method not in SPEC_METHODS:
        raise ConfigError(f"unknown --spec-method {method!r}", hint=", ".join(SPEC_METHODS))
    return method


def check_spec_k(k: int, what: str = "--spec-k") -> int:
    """One K, 0 (plain) to MAX_SPEC_K, checked the same way by up, benchmark, matrix, decisions."""
    if not 0 <= k <= MAX_SPEC_K:
        raise ConfigError(f"{what} must be 0 (plain decode) to {MAX_SPEC_K}, got {k}")
    return k


@dataclass(frozen=True)
class SpecArm:
    """The speculative-decoding arm. k == 0 is plain decode and ignores the rest."""

    k: int = 0
    method: str | None = None  # engine-neutral: one of SPEC_METHODS
    draft_model: str | None = None

    @property
    def plain(self) -> bool:
        return self.k == 0

    def label(self) -> str:
        if self.plain:
            return "plain"
        return f"{self.method or 'spec'}-k{self.k}"


@dataclass(frozen=True)
class EngineConfig:
    engine: str
    model: str
    served_name: str = "tailpod"
    host: str = "127.0.0.1"
    port: int = 8000
    tensor_parallel: int = 1
    context_length: int | None = None
    mem_fraction: float | None = None
    max_running_requests: int | None = None
    spec: SpecArm = field(default_factory=SpecArm)
    version: str | None = None  # engine version the flags are spelled for; None = current
    extra_args: tuple[str, ...] = ()
    enforce_eager: bool = False
    # vLLM's tool-call parser (`--enable-auto-tool-choice --tool-call-parser NAME`), set when the
    # run asks for the tools class (cli/benchmark.py); None: no tool parsing.
    tool_call_parser: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def on_gpus(self, gpu_count: int) -> EngineConfig:
        """This config on a pod of `gpu_count` GPUs: one tensor-parallel rank per GPU, so every
        GPU the pod bills for serves."""
        return replace(self, tensor_parallel=gpu_count)

    def serve_address_args(self) -> list[str]:
        """The name, host and port the OpenAI-compatible server answers at, as vLLM and SGLang
        both spell them (vllm.py and sglang.py launch_plan)."""
        return ["--served-model-name", self.served_name, "--host", self.host,
                "--port", str(self.port)]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineConfig:
        data = dict(data)
        data["spec"] = SpecArm(**(data.get("spec") or {}))
        data["extra_args"] = tuple(data.get("extra_args") or ())
        return cls(**data)


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    health_path: str = "/health"


@dataclass
class StartupFacts:
    """Facts read from an engine's startup log. A fact the log does not state is None."""

    engine: str
    facts: dict[str, Any]
    lines: list[str]  # the raw lines the facts came from, kept verbatim

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "facts": self.facts, "lines": self.lines}


# The startup phases every engine's parser fills in its facts' `startup_phases`, in seconds, in the
# order a start runs them (vllm.py, sglang.py, llamacpp.py say which log line gives each; a phase
# the log does not state stays None). docs/volumes.md has the table per engine.
STARTUP_PHASES: tuple[str, ...] = (
    "weights_load_s",  # the checkpoint's tensors read into memory
    "model_load_s",  # the whole model load (weights, placement, the draft's when it has one)
    "dynamo_transform_s",
    "compile_s",  # compiled from scratch
    "compile_cache_load_s",  # compiled graphs loaded from a cache instead
    "torch_compile_total_s",
    "profile_warmup_s",  # the profiling / warm-up forward pass that sizes the KV cache
    "cuda_graph_capture_s",
    "init_engine_s",  # vLLM: profile, KV cache and warm-up, compile and graphs included
)


def empty_phases() -> dict[str, Any]:
    """Every phase None, and neither a cache hit nor a miss stated."""
    phases: dict[str, Any] = dict.fromkeys(STARTUP_PHASES)
    # True: a compiled graph came from the cache and nothing was compiled; False: compiled from
    # scratch; None: the log says neither (eager mode, or an engine that does not say).
    phases["compile_cache_hit"] = None
    phases["compile_cache_load_error"] = None  # a cache was found but could not be loaded: why
    # Which evidence decided compile_cache_hit: the engine's name (its log) or "inductor" (the
    # Inductor cache's entries, counted by the pod agent: tailpod/engines/compile_cache.py).
    phases["compile_cache_source"] = None
    return phases


def engine_start_s(phases: dict[str, Any]) -> float | None:
    """The engine's own start, in seconds, from its phases: the model load, then either vLLM's
    init engine (which holds profiling, compile and graph capture) or the separate steps that
    follow the load. Phases that nest in another (weights in the model load; dynamo and compile
    in torch.compile's total) are not added twice. None when no phase was stated."""
    def val(key: str) -> float:
        v = phases.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0

    if not any(val(k) for k in STARTUP_PHASES):
        return None
    load = val("model_load_s") or val("weights_load_s")
    if val("init_engine_s"):
        return round(load + val("init_engine_s"), 6)
    compile_s = val("torch_compile_total_s") or (
        val("dynamo_transform_s") + val("compile_s") + val("compile_cache_load_s"))
    return round(load + compile_s + val("profile_warmup_s") + val("cuda_graph_capture_s"), 6)


LogParser = Callable[[str, dict[str, Any], list[str]], None]


def parse_never_raising(engine: str, text: str, facts: dict[str, Any],
                        parse_into: LogParser) -> StartupFacts:
    """Run `parse_into(text, facts, kept)` so that a parser bug is named in the facts
    (`parse_error`) instead of raised: `EngineAdapter.parse_startup` must not raise."""
    kept: list[str] = []
    try:
        parse_into(str(text), facts, kept)
    except Exception as exc:  # a parser bug must not take the caller down; say so instead
        facts["parse_error"] = type(exc).__name__
    return StartupFacts(engine=engine, facts=facts, lines=kept)


def float_or_none(text: str | None) -> float | None:
    """A number a log printed; None when it is absent or not a number."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def extra_args_set(flag: str, extra_args: Sequence[str]) -> bool:
    """Whether the user's extra arguments already set `flag` (or its `--no-` form)."""
    negated = "--no-" + flag.removeprefix("--")
    return any(a.split("=", 1)[0] in (flag, negated) for a in extra_args)


# The parser assumed where a checkpoint's family is not known: both engines read Hermes-style
# <tool_call> blocks under this name (vllm/tool_parsers/__init__.py of the 0.32.0 CPU build;
# sgl-project/sglang python/sglang/srt/function_call/function_call_parser.py @ 00828e5).
DEFAULT_TOOL_PARSER = "hermes"
# one argv word that an engine's argparse cannot read as a flag of its own (no leading '-')
_PARSER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def family_tool_parser(model: str, by_family: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """(the parser, why) for a checkpoint from an engine's (family, parser) table, matched
    against the model's name, first match wins; else Hermes, said as an assumption."""
    name = model.lower()
    for family, parser in by_family:
        if family in name:
            return parser, f"the {family} family's parser"
    return DEFAULT_TOOL_PARSER, (f"no family known from {model!r}; Hermes-style calls assumed "
                                 "(--tool-call-parser picks another)")


def check_tool_parser(name: str) -> None:
    """A `--tool-call-parser` value as one argv word (exit 2 on anything else)."""
    from tailpod.secrets import redact

    if redact(name) != name:  # it would sit in the pod's process list and the run's argv
        raise ConfigError("--tool-call-parser's value is shaped like a credential, not a parser "
                          "name", hint="e.g. hermes, llama3_json, mistral")
    if not _PARSER_NAME.fullmatch(name):
        raise ConfigError(f"--tool-call-parser {name!r} is not a parser name",
                          hint="e.g. hermes, llama3_json, mistral")


class EngineAdapter(abc.ABC):
    name: ClassVar[str]

    def tool_parser_for(self, model: str) -> tuple[str, str] | None:
        """(the tool-call parser, why) that this engine is started with for a checkpoint when a
        run measures the tools class; None where tailpod sets none (the engine takes no such
        flag)."""
        return None

    @abc.abstractmethod
    def launch_plan(self, cfg: EngineConfig, python: str = "python3") -> LaunchPlan:
        """argv and environment that start the server for this config."""

    @abc.abstractmethod
    def parse_startup(self, text: str) -> StartupFacts:
        """Facts from a startup log. Must not raise on any input."""

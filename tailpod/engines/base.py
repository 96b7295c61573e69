"""The shape every serving-engine adapter shares: a launch plan from a config, facts from a log."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

from tailpod.errors import ConfigError

# The speculation methods tailpod names, engine-neutral; each adapter maps the ones it serves to its
# own flags (vllm.py, sglang.py, llamacpp.py) and the CLI offers exactly these.
SPEC_METHODS: tuple[str, ...] = ("mtp", "ngram", "draft_model", "eagle", "eagle3")


def check_spec_method(method: str) -> str:
    """`--spec-method` checked the same way by up, benchmark and matrix."""
    if method not in SPEC_METHODS:
        raise ConfigError(f"unknown --spec-method {method!r}", hint=", ".join(SPEC_METHODS))
    return method

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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def on_gpus(self, gpu_count: int) -> EngineConfig:
        """This config on a pod of `gpu_count` GPUs: one tensor-parallel rank per GPU, so every
        GPU the pod bills for serves."""
        return replace(self, tensor_parallel=gpu_count)

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


class EngineAdapter(abc.ABC):
    name: ClassVar[str]

    @abc.abstractmethod
    def launch_plan(self, cfg: EngineConfig, python: str = "python3") -> LaunchPlan:
        """argv and environment that start the server for this config."""

    @abc.abstractmethod
    def parse_startup(self, text: str) -> StartupFacts:
        """Facts from a startup log. Must not raise on any input."""

"""llama.cpp `llama-server`: launch plan, startup facts, and acceptance from response `timings`.

Follows `/work/shared/reference/engines.md` §4. llama.cpp renamed its speculative flags on
2026-04-28 and the old names now *throw*, so the spelling must match the build. Builds are named by
number (b1234), which is not mapped to dates here: give the build date as `EngineConfig.version`
("2026-03-01") to get the pre-rename spelling; no version means a current build.
"""

from __future__ import annotations

import re
from typing import Any

from tailpod.bootstrap.engines.base import (
    EngineAdapter,
    EngineConfig,
    LaunchPlan,
    StartupFacts,
    parse_never_raising,
)
from tailpod.bootstrap.engines.versions import EngineVersion, parse_version
from tailpod.errors import ConfigError

LLAMA_SERVER = "llama-server"
# Offload every layer; llama.cpp clamps the number to the model's layer count.
ALL_GPU_LAYERS = "999"
_METHODS = {"mtp", "draft_model", "eagle3", "ngram"}


def _is_local_path(model: str) -> bool:
    return model.endswith(".gguf") or model.startswith(("/", "./", "../", "~"))


class LlamaCppAdapter(EngineAdapter):
    name = "llamacpp"

    def launch_plan(
        self, cfg: EngineConfig, python: str = "python3", *, binary: str = LLAMA_SERVER
    ) -> LaunchPlan:
        """argv for `llama-server`; `python` is unused (the server is a native binary)."""
        version = parse_version(cfg.version, self.name)
        warnings: list[str] = []
        model_flag = "--model" if _is_local_path(cfg.model) else "--hf-repo"
        argv = [binary, model_flag, cfg.model, "--alias", cfg.served_name]
        argv += ["--host", cfg.host, "--port", str(cfg.port), "--n-gpu-layers", ALL_GPU_LAYERS]
        if cfg.context_length:
            argv += ["--ctx-size", str(cfg.context_length)]
        if cfg.max_running_requests:
            argv += ["--parallel", str(cfg.max_running_requests)]
        # /metrics is off unless asked for; the probe reads it.
        argv.append("--metrics")
        if cfg.tensor_parallel > 1:
            warnings.append(
                "llama-server has no tensor parallelism; it splits layers across the visible GPUs"
            )
        if cfg.mem_fraction:
            warnings.append("llama-server has no memory-fraction setting; mem_fraction is ignored")
        if cfg.enforce_eager:
            warnings.append("llama-server has no eager-mode switch; enforce_eager is ignored")
        if not cfg.spec.plain:
            argv += _spec_args(cfg, version)
        argv += list(cfg.extra_args)
        return LaunchPlan(argv=argv, warnings=warnings + version.warnings)

    def parse_startup(self, text: str) -> StartupFacts:
        return parse_llamacpp_log(text)


def _spec_args(cfg: EngineConfig, version: EngineVersion) -> list[str]:
    spec = cfg.spec
    if spec.k < 1:
        raise ConfigError(f"speculative k must be >= 1 for a speculative arm, got {spec.k}")
    method = (spec.method or "mtp").lower()
    if method not in _METHODS:
        raise ConfigError(
            f"llama-server has no speculative method {spec.method!r}",
            hint=f"choose one of: {', '.join(sorted(_METHODS))}",
        )
    if method in {"draft_model", "eagle3"} and not spec.draft_model:
        raise ConfigError(f"speculative method {method!r} needs a draft model (GGUF) path")
    new_flags = version.uses("llamacpp_spec_draft_flags")
    draft_model_flag = "--spec-draft-model" if new_flags else "--model-draft"
    draft_max_flag = "--spec-draft-n-max" if new_flags else "--draft-max"

    if method == "ngram":
        _require(version, "llamacpp_spec_type", "n-gram speculation (--spec-type)")
        n_max_flag = "--spec-ngram-mod-n-max" if new_flags else "--draft-max"
        return ["--spec-type", "ngram-mod", n_max_flag, str(spec.k)]
    args: list[str] = []
    if method == "mtp":
        _require(version, "llamacpp_draft_mtp", "MTP drafting (--spec-type draft-mtp)")
        args += ["--spec-type", "draft-mtp"]
    elif method == "eagle3":
        _require(version, "llamacpp_draft_type_names", "EAGLE3 drafting (--spec-type draft-eagle3)")
        args += ["--spec-type", "draft-eagle3"]
    if spec.draft_model:
        args += [draft_model_flag, spec.draft_model]
    args += [draft_max_flag, str(spec.k)]
    return args


def _require(version: EngineVersion, feature: str, what: str) -> None:
    if version.has(feature) is False:
        raise ConfigError(f"llama.cpp build {version.raw} predates {what}")
    version.uses(feature)  # records a warning when the build cannot be placed


# ---------------------------------------------------------------------------------------------
# Acceptance from responses

_TIMING_KEYS = (
    "prompt_n",
    "cache_n",
    "prompt_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
)


def parse_timings(payload: Any) -> dict[str, Any]:
    """Facts from a response's `timings` (or the `timings` object itself). Never raises.

    `draft_n` / `draft_n_accepted` are present only when the server drafted (engines.md §4.2);
    absent stays None. `draft_n_accepted` excludes the bonus token.
    """
    timings: Any = payload
    if isinstance(payload, dict) and isinstance(payload.get("timings"), dict):
        timings = payload["timings"]
    if not isinstance(timings, dict):
        timings = {}
    out: dict[str, Any] = {}
    for key in _TIMING_KEYS:
        value = timings.get(key)
        out[key] = (
            value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        )
    drafted, accepted = out["draft_n"], out["draft_n_accepted"]
    out["acceptance_rate"] = accepted / drafted if drafted and accepted is not None else None
    return out


def sum_timings(items: list[Any]) -> dict[str, Any]:
    """Draft totals over several responses (e.g. one per request of a probe window)."""
    parsed = [parse_timings(item) for item in items]
    drafted = sum(p["draft_n"] or 0 for p in parsed)
    accepted = sum(p["draft_n_accepted"] or 0 for p in parsed)
    predicted = sum(p["predicted_n"] or 0 for p in parsed)
    return {
        "responses": len(parsed),
        "responses_with_drafts": sum(1 for p in parsed if p["draft_n"]),
        "draft_n": drafted,
        "draft_n_accepted": accepted,
        "predicted_n": predicted,
        "acceptance_rate": accepted / drafted if drafted else None,
    }


# ---------------------------------------------------------------------------------------------
# Startup-log parsing

_NUM = r"\d+(?:\.\d+)?"
_KV = re.compile(rf"llama_kv_cache\w*: +size = +({_NUM}) MiB \( *(\d+) cells, +(\d+) layers")
_KV_OLD = re.compile(r"llama_kv_cache\w*: kv_size = (\d+),")
_SLOTS = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+)")
_ACCEPTANCE = re.compile(
    rf"draft acceptance = ({_NUM}) \( *(\d+) accepted / *(\d+) generated\), mean len = +({_NUM})"
)
_DRAFT_LOAD = re.compile(
    r"loading draft model|load_model: loading draft|speculative decoding", re.I
)
_READY = re.compile(r"model loaded|server is listening")
_ERRORS = ("error:", "failed to load", "speculative decoding not supported")
_MAX_LINES = 200


def _empty_facts() -> dict[str, Any]:
    return {
        "kv_tokens": None,
        "kv_size_mib": None,
        "kv_layers": None,
        "n_slots": None,
        "n_ctx_slot": None,
        "spec": False,
        "draft_acceptance": [],
        "accepted": None,
        "drafted": None,
        "ready": False,
        "errors": [],
    }


def parse_llamacpp_log(text: str) -> StartupFacts:
    """Facts from a llama-server log. Never raises; a fact the log does not state stays None."""
    return parse_never_raising("llamacpp", text, _empty_facts(), _parse_into)


def _parse_into(text: str, facts: dict[str, Any], kept: list[str]) -> None:
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        keep = True
        if kv := _KV.search(line):
            if facts["kv_tokens"] is None:
                facts["kv_size_mib"] = float(kv.group(1))
                facts["kv_tokens"] = int(kv.group(2))
                facts["kv_layers"] = int(kv.group(3))
        elif old := _KV_OLD.search(line):
            if facts["kv_tokens"] is None:
                facts["kv_tokens"] = int(old.group(1))
        elif slots := _SLOTS.search(line):
            facts["n_slots"] = int(slots.group(1))
            facts["n_ctx_slot"] = int(slots.group(2))
        elif acc := _ACCEPTANCE.search(line):
            facts["spec"] = True
            if len(facts["draft_acceptance"]) < _MAX_LINES:
                facts["draft_acceptance"].append(
                    {
                        "rate": float(acc.group(1)),
                        "accepted": int(acc.group(2)),
                        "generated": int(acc.group(3)),
                        "mean_len": float(acc.group(4)),
                    }
                )
        elif _DRAFT_LOAD.search(line) and "not supported" not in line:
            facts["spec"] = True
        elif _READY.search(line):
            facts["ready"] = True
        elif any(marker in line for marker in _ERRORS):
            keep = len(facts["errors"]) < _MAX_LINES
            if keep:
                facts["errors"].append(line)
        else:
            keep = False
        if keep and len(kept) < 4 * _MAX_LINES:
            kept.append(line)
    if facts["draft_acceptance"]:
        facts["accepted"] = sum(a["accepted"] for a in facts["draft_acceptance"])
        facts["drafted"] = sum(a["generated"] for a in facts["draft_acceptance"])

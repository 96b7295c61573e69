"""llama.cpp `llama-server`: launch plan, startup facts, and acceptance from response `timings`.

Follows ggml-org/llama.cpp @ 3f545bec (read via the ngxson/llama.cpp mirror): tools/server/README.md,
common/arg.cpp and tools/server/server-common.cpp. llama.cpp renamed its speculative flags on
2026-04-28 and the old names now *throw*, so the spelling must match the build. Builds are named by
number (b1234), which is not mapped to dates here: give the build date as `EngineConfig.version`
("2026-03-01") to get the pre-rename spelling; no version means a current build.

The startup facts tailpod keeps (devices, offloaded layers, KV cache, context, draft settings) are
llama.cpp *library* INFO lines, which llama-server prints only at log verbosity 4 or more
(ggml-org/llama.cpp common/log.cpp @ 0c1e57098: `common_log_get_verbosity` maps GGML INFO to
LOG_LEVEL_TRACE = 4, and the default threshold is 3). So every plan asks for `-lv 4`.
"""

from __future__ import annotations

import re
from typing import Any

from tailpod.engines.base import (
    EngineAdapter,
    EngineConfig,
    LaunchPlan,
    StartupFacts,
    empty_phases,
    parse_never_raising,
)
from tailpod.engines.versions import EngineVersion, parse_version
from tailpod.errors import ConfigError

LLAMA_SERVER = "llama-server"
# Offload every layer; llama.cpp clamps the number to the model's layer count.
ALL_GPU_LAYERS = "999"
LOG_VERBOSITY = "4"
_METHODS = {"mtp", "draft_model", "eagle3", "ngram"}
SPLIT_MODES = ("layer", "row")


def _is_local_path(model: str) -> bool:
    return model.endswith(".gguf") or model.startswith(("/", "./", "../", "~"))


def split_args(gpus: int, extra_args: tuple[str, ...] = ()) -> list[str]:
    """Spread the model over `gpus` GPUs: an even `--tensor-split` and, unless the caller chose
    one in `extra_args`, `--split-mode layer` (llama.cpp's own default, stated so the log and
    argv say which split ran). llama.cpp has no tensor parallelism of the vLLM kind: `layer` puts
    whole layers (and their KV) on each GPU, `row` splits each weight matrix by rows.

    One GPU is `--split-mode none` (the main GPU, device 0 of those visible): by default
    llama-server spreads the layers over every GPU it sees, so `--gpu-count 1` on a box with
    more GPUs would otherwise measure several GPUs and record one."""
    chosen = bool({"--split-mode", "-sm"} & set(extra_args))
    if gpus <= 1:
        return [] if chosen else ["--split-mode", "none"]
    args: list[str] = []
    if not chosen:
        args += ["--split-mode", "layer"]
    if not {"--tensor-split", "-ts"} & set(extra_args):
        args += ["--tensor-split", ",".join(["1"] * gpus)]
    return args


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
        # /metrics is off unless asked for; the probe reads it. -lv 4: see the module docstring.
        argv += ["--metrics", "-lv", LOG_VERBOSITY]
        argv += split_args(cfg.tensor_parallel, cfg.extra_args)
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
    elif version.has("llamacpp_draft_type_names") is not False:
        # Since the draft-* type names, a draft GGUF alone no longer turns speculation on: the
        # type is read from the draft's metadata (MTP/DFlash heads only) and otherwise stays
        # `none` (ggml-org/llama.cpp common/arg.cpp and common/speculative.cpp
        # `common_speculative_types_from_gguf` @ 0c1e57098). An ordinary draft model needs
        # `draft-simple` said explicitly.
        version.uses("llamacpp_draft_type_names")
        args += ["--spec-type", "draft-simple"]
    if spec.draft_model:
        # The draft on the GPU too (`-ngld`: an alias in every build, old and new spelling).
        args += [draft_model_flag, spec.draft_model, "-ngld", ALL_GPU_LAYERS]
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

    `draft_n` / `draft_n_accepted` are present only when the server drafted (tools/server/server-common.cpp
    `server_slot_stats::to_json`);
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


# ---------------------------------------------------------------------------------------------
# Startup-log parsing
#
# Line shapes from ggml-org/llama.cpp @ 0c1e57098 (src/llama-model.cpp, src/llama-kv-cache.cpp,
# src/llama-context.cpp, src/llama.cpp, ggml/src/ggml-cuda/ggml-cuda.cu, common/speculative.cpp,
# tools/server/server-context.cpp); the real H200 logs in tests/fixtures/llamacpp/ show them.
# With a draft model the server loads the target, then the draft: every per-model fact seen after
# "loading draft model" is the draft's (`*_draft`).

_NUM = r"\d+(?:\.\d+)?"
_KV = re.compile(rf"llama_kv_cache\w*: +size = +({_NUM}) MiB \( *(\d+) cells, +(\d+) layers")
_KV_OLD = re.compile(r"llama_kv_cache\w*: kv_size = (\d+),")
_SLOTS = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+)")
_ACCEPTANCE = re.compile(
    rf"draft acceptance = ({_NUM}) \( *(\d+) accepted / *(\d+) generated\), mean len = +({_NUM})"
)
_DRAFT_LOAD = re.compile(r"loading draft model '([^']*)'|load_model: loading draft", re.I)
_SPEC_MISC = re.compile(r"speculative decoding", re.I)
# Plain servers say so too: "no implementations specified for speculative decoding".
_NO_SPEC = re.compile(r"not supported|no implementations specified", re.I)
_SPEC_IMPL = re.compile(r"adding speculative implementation '([\w-]+)'")
_SPEC_PARAMS = re.compile(r"- n_max=(\d+), n_min=(\d+)")
_SPEC_DRAFT_GPU = re.compile(r"- gpu_layers=(-?\d+),.*devices=\[([^\]]*)\]")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_MODEL_BUFFER = re.compile(rf"(\S+) model buffer size = +({_NUM}) MiB")
_N_CTX = re.compile(r"llama_context: n_ctx += (\d+)")
_N_CTX_SEQ = re.compile(r"llama_context: n_ctx_seq += (\d+)")
_CUDA_FOUND = re.compile(r"ggml_cuda_init: found (\d+) CUDA devices")
_CUDA_DEVICE = re.compile(
    r"Device (\d+): (.+?), compute capability (\d+\.\d+), VMM: (\w+)(?:, VRAM: (\d+) MiB)?"
)
_USING_DEVICE = re.compile(r"using device (\S+) \((.+?)\) \((\S+)\) - (\d+) MiB free")
# common_params_print_info's device list (printed at -lv 4 before the model loads).
_DEVICE_INFO = re.compile(r"common_param: +- (\w+?) +: (.+?) \((\d+) MiB, (\d+) MiB free\)")
_BUILD = re.compile(r"common_params_print_info: build (\d+) \(([^)]*)\)")
_MODEL_PARAMS = re.compile(rf"print_info: model params += ({_NUM}) ([KMBT])")
_FILE_SIZE = re.compile(rf"print_info: file size += ({_NUM}) GiB")
_FILE_TYPE = re.compile(r"print_info: file type += (\S+)")
_READY = re.compile(r"model loaded|server is listening")
_ERRORS = ("error:", "failed to load", "speculative decoding not supported")
_MAX_LINES = 200
# Startup phases (engines/base.py STARTUP_PHASES). llama-server states no durations for them, but
# every line carries the time since the server started, M.s.ms.us (ggml-org/llama.cpp common/log.cpp,
# "[M.s.ms.us]"), at every verbosity. A phase is the time between two of its lines:
# weights_load_s from "loading model tensors" to "constructing llama_context" (for the target and
# then the draft, added up: they load one after the other), profile_warmup_s the empty warm-up run
# to the next line, model_load_s server_init's load_model from "loading model '...'" to "model loaded".
_STAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ")
_LOAD_START = re.compile(r"load_model: loading model '")
_TENSORS_START = "load_tensors: loading model tensors"
_CONTEXT_START = "llama_context: constructing llama_context"
_WARMUP_START = "warming up the model with an empty run"
_LOADED = "llama_server: model loaded"
# Facts that exist once per loaded model: the draft's copy is `<name>_draft`.
_PER_MODEL = ("kv_tokens", "kv_size_mib", "kv_layers", "n_ctx", "n_ctx_seq", "gpu_layers",
              "model_layers", "model_buffers_mib", "model_params_b", "file_size_gib",
              "file_type")  # fmt: skip
_PARAM_SCALE = {"K": 1e-6, "M": 1e-3, "B": 1.0, "T": 1e3}


def _empty_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "build": None,
        "cuda_devices": None,
        "devices": [],
        "devices_used": [],
        "n_slots": None,
        "n_ctx_slot": None,
        "spec": False,
        "spec_type": None,
        "spec_n_max": None,
        "spec_n_min": None,
        "draft_model": None,
        "draft_gpu_layers": None,
        "draft_devices": None,
        "draft_acceptance": [],
        "accepted": None,
        "drafted": None,
        "ready": False,
        "errors": [],
        "startup_phases": empty_phases(),
    }
    for name in _PER_MODEL:
        facts[name] = facts[f"{name}_draft"] = None
    return facts


def parse_llamacpp_log(text: str) -> StartupFacts:
    """Facts from a llama-server log. Never raises; a fact the log does not state stays None."""
    return parse_never_raising("llamacpp", text, _empty_facts(), _parse_into)


def _set_once(facts: dict[str, Any], name: str, value: Any, draft: bool) -> None:
    key = f"{name}_draft" if draft else name
    if facts[key] is None:
        facts[key] = value


def _stamp_s(line: str) -> float | None:
    found = _STAMP.match(line)
    if not found:
        return None
    m, sec, ms, us = (int(g) for g in found.groups())
    return m * 60 + sec + ms / 1e3 + us / 1e6


class _PhaseClock:
    """The startup phases from the lines' own times (see _STAMP)."""

    def __init__(self, phases: dict[str, Any]) -> None:
        self.phases = phases
        self.open: dict[str, float] = {}  # phase -> when its first line was printed

    def _add(self, name: str, seconds: float) -> None:
        self.phases[name] = round((self.phases[name] or 0.0) + max(0.0, seconds), 6)

    def line(self, line: str) -> bool:
        at = _stamp_s(line)
        if at is None:
            return False
        if "profile_warmup_s" in self.open:  # the warm-up ends at the next line it prints
            self._add("profile_warmup_s", at - self.open.pop("profile_warmup_s"))
        hit = True
        if _LOAD_START.search(line):
            if self.phases["model_load_s"] is None and "model_load_s" not in self.open:
                self.open["model_load_s"] = at
        elif _TENSORS_START in line:
            self.open["weights_load_s"] = at
        elif _CONTEXT_START in line and "weights_load_s" in self.open:
            self._add("weights_load_s", at - self.open.pop("weights_load_s"))
        elif _WARMUP_START in line:
            self.open["profile_warmup_s"] = at
        elif _LOADED in line and "model_load_s" in self.open:
            self._add("model_load_s", at - self.open.pop("model_load_s"))
        else:
            hit = False
        return hit


def _parse_into(text: str, facts: dict[str, Any], kept: list[str]) -> None:
    draft = False  # past "loading draft model": per-model facts are the draft's
    clock = _PhaseClock(facts["startup_phases"])
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        keep = True
        timed = clock.line(line)
        if kv := _KV.search(line):
            _set_once(facts, "kv_size_mib", float(kv.group(1)), draft)
            _set_once(facts, "kv_tokens", int(kv.group(2)), draft)
            _set_once(facts, "kv_layers", int(kv.group(3)), draft)
        elif old := _KV_OLD.search(line):
            _set_once(facts, "kv_tokens", int(old.group(1)), draft)
        elif off := _OFFLOADED.search(line):
            _set_once(facts, "gpu_layers", int(off.group(1)), draft)
            _set_once(facts, "model_layers", int(off.group(2)), draft)
        elif buf := _MODEL_BUFFER.search(line):
            key = "model_buffers_mib_draft" if draft else "model_buffers_mib"
            facts[key] = {**(facts[key] or {}), buf.group(1): float(buf.group(2))}
        elif ctx := _N_CTX.search(line):
            _set_once(facts, "n_ctx", int(ctx.group(1)), draft)
        elif seq := _N_CTX_SEQ.search(line):
            _set_once(facts, "n_ctx_seq", int(seq.group(1)), draft)
        elif params_b := _MODEL_PARAMS.search(line):
            scale = _PARAM_SCALE[params_b.group(2)]
            _set_once(facts, "model_params_b", round(float(params_b.group(1)) * scale, 3), draft)
        elif size := _FILE_SIZE.search(line):
            _set_once(facts, "file_size_gib", float(size.group(1)), draft)
        elif ftype := _FILE_TYPE.search(line):
            _set_once(facts, "file_type", ftype.group(1), draft)
        elif build := _BUILD.search(line):
            facts["build"] = facts["build"] or f"{build.group(1)} ({build.group(2)})"
        elif info := _DEVICE_INFO.search(line):
            if len(facts["devices"]) < 64:
                facts["devices"].append({
                    "device": info.group(1), "name": info.group(2).strip(),
                    "total_mib": int(info.group(3)), "free_mib": int(info.group(4)),
                })  # fmt: skip
        elif found := _CUDA_FOUND.search(line):
            facts["cuda_devices"] = int(found.group(1))
        elif dev := _CUDA_DEVICE.search(line):
            if len(facts["devices"]) < 64:
                facts["devices"].append({
                    "index": int(dev.group(1)), "name": dev.group(2).strip(),
                    "compute_capability": dev.group(3), "vmm": dev.group(4) == "yes",
                    "vram_mib": int(dev.group(5)) if dev.group(5) else None,
                })  # fmt: skip
        elif used := _USING_DEVICE.search(line):
            entry = {"device": used.group(1), "name": used.group(2), "pci": used.group(3),
                     "free_mib": int(used.group(4)), "model": "draft" if draft else "target"}  # fmt: skip
            if len(facts["devices_used"]) < 64:
                facts["devices_used"].append(entry)
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
        elif load := _DRAFT_LOAD.search(line):
            facts["spec"] = True
            draft = True
            if load.group(1) and facts["draft_model"] is None:
                facts["draft_model"] = load.group(1)
        elif impl := _SPEC_IMPL.search(line):
            facts["spec_type"] = facts["spec_type"] or impl.group(1)
            facts["spec"] = facts["spec"] or impl.group(1) != "none"
        elif params := _SPEC_PARAMS.search(line):
            if facts["spec_n_max"] is None:
                facts["spec_n_max"] = int(params.group(1))
                facts["spec_n_min"] = int(params.group(2))
        elif gpu := _SPEC_DRAFT_GPU.search(line):
            if facts["draft_gpu_layers"] is None:
                facts["draft_gpu_layers"] = int(gpu.group(1))
                facts["draft_devices"] = [d.strip() for d in gpu.group(2).split(",") if d.strip()]
        elif _SPEC_MISC.search(line) and not _NO_SPEC.search(line):
            facts["spec"] = True
        elif _READY.search(line):
            facts["ready"] = True
        elif any(marker in line for marker in _ERRORS):
            keep = len(facts["errors"]) < _MAX_LINES
            if keep:
                facts["errors"].append(line)
        else:
            keep = timed
        if keep and len(kept) < 4 * _MAX_LINES:
            kept.append(line)
    if facts["draft_acceptance"]:
        facts["accepted"] = sum(a["accepted"] for a in facts["draft_acceptance"])
        facts["drafted"] = sum(a["generated"] for a in facts["draft_acceptance"])

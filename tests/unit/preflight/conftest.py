"""One sandbox world for the preflight tests: the sandbox cloud, the Tailscale emulator, the hub and
registry stand-ins, checkpoints whose safetensors headers claim real sizes (no data behind them),
and SSH keys. Started once per session; tests only ever add accounts and keys, never remove."""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tailpod.config import Settings, load_settings
from tailpod.preflight import CHECKS, Plan, PreflightReport, run_preflight
from tailpod.sandbox import Sandbox, start_sandbox
from tailpod.sandbox import hub as hub_standin
from tailpod.sandbox import image_registry as registry_standin
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY
from tailpod.sandbox.tailscale import serve as serve_tailscale

RUNPOD_KEY = "rp_preflight_good_key_0001"
RUNPOD_POOR_KEY = "rp_preflight_poor_key_0002"  # $0.50
RUNPOD_TIGHT_KEY = "rp_preflight_tight_key_0003"  # $1.00
VAST_KEY = "vast_preflight_good_key_0001"
HF_TOKEN = "hf_preflightGoodToken0123456789"
DIGEST = "sha256:" + "ab" * 32
LATEST_DIGEST = "sha256:" + "cd" * 32
IMAGE = "vllm/vllm-openai:v0.11.0"
PASSPHRASE = "correct horse battery"
GB = 1_000_000_000


def header_only_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> None:
    """A safetensors header whose tensors claim their full size; the data is not written (the
    inspector reads headers only), so a '40 GB' checkpoint takes a few hundred bytes."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + count * sizes[dtype]]}
        offset += count * sizes[dtype]
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def _config(**extra: Any) -> dict[str, Any]:
    # Qwen3-style attention: 8 KV heads of 128 over 4 layers = 16 KiB of KV per token in BF16.
    return {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
            "num_hidden_layers": 4, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "mtp_num_hidden_layers": 1, **extra}


def make_checkpoint(root: Path, weight_gb: float, *, mtp: bool = True, trap: bool = False,
                    **config: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cfg = _config(**config)
    rows = int(weight_gb * GB / 2 / 8000)
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {
        "model.embed_tokens.weight": ("BF16", (rows, 8000)),
    }
    if trap:
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                      "ignored_layers": ["lm_head"]}
        tensors["model.layers.0.mlp.down_proj.weight"] = ("F8_E4M3", (4, 4))
        tensors["model.layers.0.mlp.down_proj.weight_scale_inv"] = ("F32", (1, 1))
    if mtp:
        tensors["mtp.fc.weight"] = ("BF16", (8, 8))
        tensors["mtp.layers.0.mlp.down_proj.weight"] = (
            ("F8_E4M3", (4, 4)) if trap else ("BF16", (4, 4)))
        if trap:
            tensors["mtp.layers.0.mlp.down_proj.weight_scale_inv"] = ("F32", (1, 1))
    else:
        cfg.pop("mtp_num_hidden_layers")
    (root / "config.json").write_text(json.dumps(cfg))
    header_only_safetensors(root / "model.safetensors", tensors)
    return root


def ed25519_key(path: Path, passphrase: str | None = None, mode: int = 0o600) -> Path:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode()) if passphrase
        else serialization.NoEncryption())
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, encryption)
    path.write_bytes(pem)
    path.chmod(mode)
    return path


@dataclass
class World:
    sandbox: Sandbox
    hub_url: str
    hub_state: Any
    registry_url: str
    tailscale_url: str
    emulator: Any
    root: Path
    keys: dict[str, Path] = field(default_factory=dict)
    models: dict[str, Path] = field(default_factory=dict)

    def env(self, **overrides: str) -> dict[str, str]:
        """A fully green runpod environment; keyword arguments replace or ('') unset values."""
        env = {
            "TAILPOD_HOME": str(self.root / "home"),
            "TAILPOD_PROVIDER": "runpod",
            "TAILPOD_MODEL": "org/small",
            "TAILPOD_GPUS": "NVIDIA A40,NVIDIA GeForce RTX 4090",
            "TAILPOD_MAX_PRICE": "1.00",
            "TAILPOD_IMAGE": IMAGE,
            "TAILPOD_SSH_KEY": str(self.keys["plain"]),
            "TAILPOD_RUNPOD_URL": self.sandbox.runpod_url,
            "TAILPOD_VAST_URL": self.sandbox.vast_url,
            "TAILPOD_TAILSCALE_URL": self.tailscale_url,
            "TAILPOD_REGISTRY_URL": self.registry_url,
            "TAILPOD_REGISTRY_AUTH_URL": self.registry_url,
            "TAILPOD_HF_URL": self.hub_url,
            "RUNPOD_API_KEY": RUNPOD_KEY,
            "VAST_API_KEY": VAST_KEY,
            "HF_TOKEN": HF_TOKEN,
            "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
            "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY,
        }
        env.update(overrides)
        return {k: v for k, v in env.items() if v != ""}

    def settings(self, **overrides: str) -> Settings:
        return load_settings(env=self.env(**overrides), dotenv_path=self.root / "absent.env")

    def run(self, settings: Settings, plan: Plan | None = None, only: tuple[str, ...] = (),
            **kwargs: Any) -> PreflightReport:
        plan = plan or Plan(hours=2.0, env_file=self.root / "absent.env")
        checks = [c for c in CHECKS if not only or c.name in only]
        return run_preflight(settings, plan, checks=checks, **kwargs)

    def nothing_created(self) -> None:
        meter = self.sandbox.meter()
        assert meter["resources"] == [] and meter["billing_count"] == 0
        assert self.sandbox.billing_now() == []
        assert self.sandbox.cloud.pods_public() == []
        assert self.emulator.devices() == []


def _stop_all(servers: list[Any]) -> None:
    def stop(server: Any) -> None:
        server.shutdown()
        server.server_close()

    threads = [threading.Thread(target=stop, args=(s,), daemon=True) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=5.0)


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("preflight")
    hub_root = root / "hub"
    models = {
        "small": make_checkpoint(hub_root / "org" / "small", 16),
        "big": make_checkpoint(hub_root / "org" / "big", 40),
        "huge": make_checkpoint(hub_root / "org" / "huge", 200),
        "nomtp": make_checkpoint(hub_root / "org" / "nomtp", 2, mtp=False),
        "trap": make_checkpoint(hub_root / "org" / "trap", 2, trap=True),
        "gated": make_checkpoint(hub_root / "org" / "gated", 2),
    }
    hub_server, hub_url = hub_standin.serve(root=hub_root, token=HF_TOKEN, gated={"org/gated"})
    reg_server, reg_url = registry_standin.serve(
        images={"vllm/vllm-openai": {"v0.11.0": DIGEST, "latest": LATEST_DIGEST}})
    ts_server, ts_url = serve_tailscale("127.0.0.1", 0)
    sandbox = start_sandbox(
        start_delay_s=0.05, workdir=root / "sandbox", stand_ins=False,
        runpod_keys={RUNPOD_KEY: 100.0, RUNPOD_POOR_KEY: 0.5, RUNPOD_TIGHT_KEY: 1.0},
        vast_keys={VAST_KEY: 100.0},
    )
    keys_dir = root / "keys"
    keys_dir.mkdir()
    w = World(sandbox, hub_url, hub_server.hub_state, reg_url,  # type: ignore[attr-defined]
              ts_url, ts_server.emulator, root, models=models)  # type: ignore[attr-defined]
    w.keys = {
        "plain": ed25519_key(keys_dir / "id_plain"),
        "locked": ed25519_key(keys_dir / "id_locked", PASSPHRASE),
        "open": ed25519_key(keys_dir / "id_open", mode=0o644),
    }
    try:
        yield w
    finally:
        closer = threading.Thread(target=sandbox.close, daemon=True)
        closer.start()
        _stop_all([hub_server, reg_server, ts_server])
        closer.join(timeout=5.0)


@pytest.fixture()
def env_file(tmp_path: Path) -> Path:
    return tmp_path / "tailpod.env"


@pytest.fixture(autouse=True)
def _no_stray_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys in the developer's environment must not leak into (or mask) what a test sets up."""
    for name in list(os.environ):
        if name.startswith(("TAILPOD_", "RUNPOD_", "VAST_", "TAILSCALE_")) or name == "HF_TOKEN":
            monkeypatch.delenv(name, raising=False)

"""What every demo stands on: the tiny checkpoint, a demo-only SSH key, and the sandbox cloud with
its stand-in registry. `tailpod demo` and `tailpod demo --matrix` both start from here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tailpod.config import Settings, load_settings

DEMO_IMAGE = "vllm/vllm-openai:v0.11.0"
DEMO_DIGEST = "sha256:" + "7a1" * 21 + "d"
DEMO_GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe")


def demo_model(home: Path) -> Path:
    """The tiny checkpoint, built once and reused (building takes a few seconds)."""
    from tailpod.engines.tiny_checkpoint import build_checkpoint, is_checkpoint

    path = home / "models" / "tiny-target"
    if not is_checkpoint(path):
        build_checkpoint(path, "target")
    return path


def demo_ssh_key(home: Path) -> Path:
    """A key for the demo pods only, so the demo never needs the user's own."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = home / "demo" / "id_ed25519"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        path.touch(mode=0o600)
        path.write_bytes(pem)
    return path


@contextmanager
def sandbox_settings(settings: Settings) -> Iterator[tuple[Settings, Any]]:
    """A sandbox cloud with sshd pods, the Tailscale emulator and a stand-in registry."""
    from tailpod.sandbox.server import start_sandbox
    from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY

    repo, tag = DEMO_IMAGE.split(":")
    sandbox = start_sandbox(
        sshd=True,
        workdir=settings.home / "demo" / "sandbox",
        stand_in_config={"registry": {"images": {repo: {tag: DEMO_DIGEST}}}},
    )
    try:
        env = {
            **os.environ,
            **sandbox.env(),
            "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
            "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY,
            "TAILPOD_SSH_KEY": str(demo_ssh_key(settings.home)),
        }
        cloud = load_settings(
            overrides={
                "home": settings.home,
                "results_dir": settings.results_dir,
                "provider": "runpod",
                "image": DEMO_IMAGE,
                "gpus": DEMO_GPUS,
                "max_price": 3.5,
                "ttl_hours": 1.0,
                # the demo is one sandbox account, met once: first contact's probe is shown by
                # `check-requirements --live` and tests/integration/cloud/test_first_contact_up.py
                "first_contact": "off",
                "port": settings.port,
                "engine_python": settings.engine_python,
            },
            env=env,
        )
        yield cloud, sandbox
    finally:
        sandbox.close()

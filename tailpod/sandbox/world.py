"""What `tailpod sandbox serve` adds so the ordinary commands work against it as on a real account:
engine image tags the registry stand-in resolves, a tiny checkpoint the Hub stand-in serves under a
Hub-style id, an SSH key for the pods, and one environment with every credential the emulators
accept (`world_env`, also written by `sandbox serve --env-file`).

The digests are the sandbox's own (a hash of the reference): the stand-in cannot know the real
ones offline, and nothing outside the sandbox ever sees them.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Engine images tailpod's docs use, by version tag (tailpod refuses moving tags like `latest`).
SANDBOX_IMAGE_TAGS: dict[str, tuple[str, ...]] = {
    "vllm/vllm-openai": ("v0.11.0", "v0.10.2", "v0.9.2"),
    "lmsysorg/sglang": ("v0.5.15", "v0.5.2"),
    "runpod/pytorch": ("2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04",),
}
SANDBOX_MODEL_ID = "tailpod-sandbox/tiny-target"
SANDBOX_IMAGE = "vllm/vllm-openai:v0.11.0"


def sandbox_digest(repository: str, tag: str) -> str:
    return "sha256:" + hashlib.sha256(f"tailpod-sandbox:{repository}:{tag}".encode()).hexdigest()


def registry_images() -> dict[str, dict[str, str]]:
    """`{repository: {tag: digest}}` for the registry stand-in."""
    return {repo: {tag: sandbox_digest(repo, tag) for tag in tags}
            for repo, tags in SANDBOX_IMAGE_TAGS.items()}


def hub_repos(workdir: Path) -> dict[str, Path]:
    """`{repo id: directory}` for the Hub stand-in: the tiny checkpoint, built once into
    `workdir/hub/` (a few seconds, offline)."""
    from tailpod.engines.tiny_checkpoint import build_checkpoint, is_checkpoint

    path = Path(workdir) / "hub" / SANDBOX_MODEL_ID
    if not is_checkpoint(path):
        build_checkpoint(path, "target")
    return {SANDBOX_MODEL_ID: path}


def ssh_key(workdir: Path) -> Path:
    """An ed25519 key for sandbox pods only (a new user need not have one)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(workdir) / "ssh" / "id_ed25519"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption())
        path.touch(mode=0o600)
        path.write_bytes(pem)
    return path


def stand_in_config(workdir: Path) -> dict[str, dict[str, Any]]:
    return {"registry": {"images": registry_images()}, "hub": {"repos": hub_repos(workdir)}}


def world_env(sandbox_env: Mapping[str, str], workdir: Path,
              engine_python: str | None = None) -> dict[str, str]:
    """The sandbox's own environment plus what `up` needs beyond credentials: the SSH key, a model
    and an image the stand-ins serve, and (optionally) the engine's Python on the pods."""
    env = dict(sandbox_env)
    env["TAILPOD_SSH_KEY"] = str(ssh_key(workdir))
    env["TAILPOD_MODEL"] = SANDBOX_MODEL_ID
    env["TAILPOD_IMAGE"] = SANDBOX_IMAGE
    if engine_python:
        env["TAILPOD_ENGINE_PYTHON"] = engine_python
    return env


def write_env_file(path: Path, env: Mapping[str, str]) -> Path:
    """`KEY=value` lines, readable by the owner only (they are sandbox keys, but keys)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("# tailpod sandbox serve: load with `set -a; . FILE; set +a`\n")
        fh.writelines(f"{key}={value}\n" for key, value in sorted(env.items()))
    path.chmod(0o600)
    return path

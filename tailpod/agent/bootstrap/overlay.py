"""The MTP ignore-list overlay: a patched model directory the engine loads instead of the checkpoint.
"""


from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .host_facts import OVERLAY_RECORD, _hub_cache_dir
from .start_error import EngineStartError

_SNAPSHOT_DOWNLOAD = (
    "import sys; from huggingface_hub import snapshot_download; "
    "print(snapshot_download(sys.argv[1], revision=sys.argv[2] or None))"
)


def _snapshot_dir(source: str, revision: str | None, python: str, env: dict[str, str]) -> Path:
    """The checkpoint's files on this machine: a directory as is; a Hub id's snapshot from the
    Hub cache, downloaded first (by the engine's Python, with the pod's HF token) when missing."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path.resolve()
    cached = _hub_cache_dir(env) / ("models--" + source.replace("/", "--")) / "snapshots"
    if revision and (cached / revision / "config.json").exists():
        return cached / revision
    out = subprocess.run(
        [python, "-c", _SNAPSHOT_DOWNLOAD, source, revision or ""],
        capture_output=True, text=True, env=env, timeout=3600, check=False,
    )  # fmt: skip
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines or not Path(lines[-1]).is_dir():
        raise EngineStartError(
            f"could not download {source} for the patched model directory", out.stderr.splitlines()
        )
    return Path(lines[-1])


def build_overlay(spec: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Build a model directory that the engine loads instead of the checkpoint: every file of the
    checkpoint symlinked (weights are never copied), the JSON files in `spec["files"]` written
    patched beside them, and the patch record (`spec["record"]`: what was added and why, plus
    where it came from) as tailpod-mtp-ignore-patch.json. Returns the record.

    spec: {"dir": where, "source": Hub id or directory, "revision": commit or null,
    "python": the engine's Python (for a Hub download), "files": {name: JSON document},
    "record": {...}}. The same function serves a local checkpoint and a Hub one on a pod."""
    env = env if env is not None else dict(os.environ)
    source = _snapshot_dir(
        str(spec["source"]), spec.get("revision"), str(spec.get("python") or sys.executable), env
    )
    target = Path(spec["dir"]).expanduser()
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        for entry in target.iterdir():  # an earlier overlay of this arm: links and our own files
            if entry.is_dir() and not entry.is_symlink():
                raise EngineStartError(f"{target} holds a directory; not an overlay of ours", [])
            entry.unlink()
    target.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = dict(spec.get("files") or {})
    for entry in sorted(source.iterdir()):
        if entry.name in files or entry.name == OVERLAY_RECORD:
            continue  # written below; a symlink there would write through into the source
        (target / entry.name).symlink_to(entry.resolve() if entry.is_symlink() else entry)
    for name, document in files.items():
        (target / name).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    record = {
        **dict(spec.get("record") or {}),
        "source": str(spec["source"]),
        "revision": spec.get("revision"),
        "snapshot": str(source),
        "patched_files": sorted(files),
    }
    (target / OVERLAY_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record

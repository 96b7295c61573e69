"""Machine facts (nvidia-smi, CPU, disk) and checkpoint identity: what a result ran on and served.
"""


from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

# Asked of nvidia-smi, newest fields last; a driver too old for compute_cap gets the first three.
_GPU_QUERY = ("index", "name", "memory.total", "driver_version", "compute_cap", "pci.bus_id")
_GPU_QUERY_OLD = ("name", "memory.total", "driver_version")


def _nvidia_smi(args: list[str]) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20,
                             check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def gpu_facts() -> tuple[list[dict[str, Any]], str | None]:
    """Each GPU nvidia-smi lists (index, name, memory, driver, compute capability, PCI bus id)
    and the CUDA version the driver supports; ([], None) where there is no nvidia-smi."""
    gpus: list[dict[str, Any]] = []
    for fields in (_GPU_QUERY, _GPU_QUERY_OLD):
        text = _nvidia_smi([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
        if text is None:
            continue
        for line in text.splitlines():
            values = dict(zip(fields, (x.strip() for x in line.split(","))))
            if len(values) != len(fields):
                continue
            mib = values["memory.total"]
            gpus.append({
                "index": int(values["index"]) if values.get("index", "").isdigit() else len(gpus),
                "name": values["name"],
                "memory": f"{mib} MiB",  # as the csv format with units prints it
                "memory_mib": int(mib) if mib.isdigit() else None,
                "driver": values["driver_version"],
                "compute_cap": values.get("compute_cap"),
                "pci_bus_id": values.get("pci.bus_id"),
            })  # fmt: skip
        break
    cuda = None
    if gpus:
        banner = _nvidia_smi([]) or ""
        found = re.search(r"CUDA Version: *([\d.]+)", banner)
        cuda = found.group(1) if found else None
    return gpus, cuda


def machine_facts() -> dict[str, Any]:
    """What the pod really is: GPUs from nvidia-smi when present (name, memory, driver, compute
    capability, bus id; the CUDA version), else the CPU; plus free disk. Recorded with every
    launch so a result names the hardware it ran on."""
    facts: dict[str, Any] = {"gpus": [], "cpu": None, "disk_free_gb": None}
    facts["gpus"], facts["cuda_version"] = gpu_facts()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    facts["cpu_count"] = os.cpu_count()
    try:
        st = os.statvfs(str(Path.home()))
        facts["disk_free_gb"] = round(st.f_bavail * st.f_frsize / 1e9, 1)
    except OSError:
        pass
    return facts


OVERLAY_RECORD = "tailpod-mtp-ignore-patch.json"  # checkpoint.PATCH_RECORD, for the pod
_FULL_HASH_BYTES = 8 * 1024 * 1024  # files up to this size are hashed whole
_SAMPLE_BYTES = 1024 * 1024  # bigger ones: size, first and last MiB (safetensors header included)


def _hub_cache_dir(env: dict[str, str]) -> Path:
    """Where huggingface_hub keeps snapshots (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache)."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def checkpoint_identity(ref: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Which bytes a checkpoint reference served: a Hub id resolves to the snapshot commit the
    engine downloaded (the cache's refs/main); a directory to a sha256 over its file names, sizes
    and contents (files above 8 MiB contribute their size and first and last MiB, so a multi-GB
    checkpoint is not read whole). Two runs that report different revisions served different
    checkpoints under the same name."""
    path = Path(ref).expanduser()
    overlay = path / OVERLAY_RECORD
    if overlay.is_file():  # a patched overlay (build_overlay): name what it overlays, and the patch
        try:
            record = json.loads(overlay.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
        return {
            "ref": record.get("source") or ref,
            "source": "overlay",
            "revision": record.get("revision") or _directory_digest(path),
            "served_from": ref,
            "patch": record,
        }
    if path.is_dir():
        return {"ref": ref, "source": "directory", "revision": _directory_digest(path)}
    cached = _hub_cache_dir(env or dict(os.environ)) / ("models--" + ref.replace("/", "--"))
    try:
        revision: str | None = (cached / "refs" / "main").read_text().strip() or None
    except OSError:
        revision = None
    return {"ref": ref, "source": "hub", "revision": revision}


def _directory_digest(path: Path) -> str:
    """sha256 over file names, sizes and bytes (big files: size, first and last MiB)."""
    digest = hashlib.sha256()
    for entry in sorted(p for p in path.rglob("*") if p.is_file()):
        if entry.name.startswith("tailpod-") or any(
            part.startswith(".") for part in entry.relative_to(path).parts
        ):
            continue  # tailpod's own notes and download caches are not checkpoint content
        size = entry.stat().st_size
        digest.update(f"{entry.relative_to(path)}\0{size}\0".encode())
        with open(entry, "rb") as fh:
            if size <= _FULL_HASH_BYTES:
                digest.update(fh.read())
            else:
                digest.update(fh.read(_SAMPLE_BYTES))
                fh.seek(size - _SAMPLE_BYTES)
                digest.update(fh.read(_SAMPLE_BYTES))
    return "sha256:" + digest.hexdigest()[:16]


def checkpoint_identities(
    refs: dict[str, str | None], env: dict[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """`checkpoint_identity` of each named reference (model, draft_model) that is set."""
    return {role: checkpoint_identity(ref, env) for role, ref in refs.items() if ref}

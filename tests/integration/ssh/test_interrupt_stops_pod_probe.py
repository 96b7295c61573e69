"""Ctrl-C during a probe call over a real OpenSSH session stops the pod-side processes (issue 38
item 6, adversary F7, scenario 4), the probe's load workers included: the driver reads the call's
process group on the pod and kills it before the interrupt goes on to exit 130."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent_client.driver import SshTransport
from tailpod.config import load_settings
from tailpod.provision.ssh import SshTarget, open_ssh
from tailpod.sandbox.sshd import start_sshd_host

pytestmark = pytest.mark.sshd

# Stands in for `probe run`: a load worker child and the probe itself, each beating a file,
# both gone by themselves after 30 s at the latest.
PROBE = """
import subprocess, sys, time
pids, beat = sys.argv[3], sys.argv[4]  # after the verb: probe run PIDS BEAT
child = subprocess.Popen([sys.executable, "-c",
    "import time,sys\\nend=time.time()+30\\nwhile time.time()<end:\\n"
    " open(sys.argv[1],'a').write('w');time.sleep(0.05)", beat + ".worker"])
open(pids, "w").write(f"{__import__('os').getpid()} {child.pid}")
print("started", file=sys.stderr, flush=True)
end = time.time() + 30
while time.time() < end:
    open(beat, "a").write("p"); time.sleep(0.05)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_ctrl_c_during_a_probe_call_stops_its_processes_on_the_pod(
        need_sshd: None, tmp_path: Path, user_key: Path) -> None:
    pub = (user_key.parent / (user_key.name + ".pub")).read_text()
    host = start_sshd_host(tmp_path / "pod", pub)
    script, pids, beat = tmp_path / "probe.py", tmp_path / "pids", tmp_path / "beat"
    script.write_text(PROBE)
    started: list[int] = []
    try:
        settings = load_settings(env={"TAILPOD_HOME": str(tmp_path / "home"),
                                      "TAILPOD_SSH_KEY": str(user_key)},
                                 dotenv_path=tmp_path / "absent.env")
        session = open_ssh(settings, SshTarget(host.host, host.port, host.user), wait_s=10)
        transport = SshTransport(session, state_dir=str(tmp_path))

        def ctrl_c_once_started(line: str) -> Any:
            if line == "started":
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            transport.execute([sys.executable, "-I", str(script), "probe", "run", str(pids),
                               str(beat)], b"{}", ctrl_c_once_started, 60)
        started = [int(p) for p in pids.read_text().split()]
        deadline = time.monotonic() + 5
        while any(alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p for p in started if alive(p)] == [], "the pod-side probe kept running"
        sent = (beat.read_text(), Path(f"{beat}.worker").read_text())
        time.sleep(0.5)
        assert (beat.read_text(), Path(f"{beat}.worker").read_text()) == sent  # no more load
        session.close()
    finally:
        for pid in started:  # whatever the outcome, nothing of this test is left running
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        host.stop()

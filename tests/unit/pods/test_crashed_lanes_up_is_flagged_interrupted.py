"""A local lanes `up` killed while a lane starts is shown interrupted by `status`, with the line
that settles it (adversary #13: after a SIGKILL during the spec lane's start, `status` showed
`intent` / `health down` with no interrupted flag and no settle line, while the orphan lane
served on its port). pods/lanes.py stamps the operation in progress on its record, as every
cloud step does (ledger.py `operation_stamp`); `status` reads a dead owner as interrupted."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.ledger import Ledger
from tailpod.pods import lanes
from tailpod.provision.local.provider import LocalProvider
from tests import paths

from .test_lanes_haproxy import _free_ports

pytestmark = pytest.mark.skipif(lanes.shutil.which("haproxy") is None
                                and not Path("/usr/sbin/haproxy").exists(),
                                reason="haproxy is not installed (scripts/system-requirements.sh)")

# The child: a lanes `up` whose spec lane starts (says so in a file) and never becomes healthy.
UP = """
import sys
from tailpod.config import load_settings
from tailpod.ledger import Ledger
from tailpod.pods import lanes
ready, front, spec_port, plain_port = sys.argv[1], *map(int, sys.argv[2:])
lane = [sys.executable, "-c", f"open({ready!r}, 'w').close(); import time; time.sleep(120)"]
settings = load_settings()
lanes.up_lanes(settings, Ledger(settings.state_dir),
               [lanes.LaneLaunch(name="spec", argv=lane, port=spec_port),
                lanes.LaneLaunch(name="plain", argv=lane, port=plain_port)],
               admission_limit=1, front_port=front, startup_timeout_s=120)
"""


def _kill_up_in_its_spec_lane(tmp_path: Path) -> None:
    ready = tmp_path / "spec-lane-started"
    child = subprocess.Popen([sys.executable, "-c", UP, str(ready), *map(str, _free_ports(3))],
                             cwd=paths.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60  # against a hang, not a speed claim
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), child.communicate(timeout=10)[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)  # a user's kill -9 of `up`
        child.wait()


def test_status_flags_a_killed_lanes_up_as_interrupted_and_says_how_to_settle(
        tmp_path: Path, tailpod_home: Path) -> None:
    _kill_up_in_its_spec_lane(tmp_path)
    settings = load_settings()
    (record,) = Ledger(settings.state_dir).all()
    tag = record.run_tag
    state = LocalProvider(lanes.lanes_home(settings, tag)).engine_state(f"{tag}-spec")
    assert state is not None
    try:
        result = CliRunner().invoke(app, ["status", "--no-beat"])
        said = " ".join(result.stdout.split())
        assert "interrupted during" in said, result.output
        assert f"settle it with: tailpod down {tag}" in said
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(state["pgid"]), signal.SIGKILL)  # the orphan lane

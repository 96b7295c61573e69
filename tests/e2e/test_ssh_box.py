"""`up --provider ssh --host user@box` → status → benchmark → down, through the CLI: your own box
over SSH, played by a real OpenSSH sshd on loopback, with the same pod agent and the real CPU vLLM
engine it starts there. `down` stops the engine and proves its port closed on the box; the box's
host key stays pinned (it is the same machine next time), and nothing bills."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.sandbox.podhost import free_port
from tailpod.sandbox.sshd import SshdHost, sshd_available, start_sshd_host

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
]
runner = CliRunner()


@pytest.fixture(scope="module")
def box(engine_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("box")
    key = root / "id_box"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True,
                   capture_output=True, timeout=30)
    # The box's own home for tailpod's state, apart from this machine's (TAILPOD_POD_HOME is what
    # a box user sets when its HOME is shared; see tailpod/agent_client/layout.py).
    host: SshdHost = start_sshd_host(root / "sshd", (root / "id_box.pub").read_text(),
                                     session_env={"TAILPOD_POD_HOME": str(root / "box-home")})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TAILPOD_SSH_KEY", str(key))
        try:
            yield {"host": host, "address": f"{host.user}@127.0.0.1:{host.port}",
                   "home": Path(engine_env["TAILPOD_HOME"]), "state": root / "box-home"}
        finally:
            host.stop()


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_up_status_benchmark_down_on_your_own_box(box: dict[str, Any], tiny_models: dict[str, Path],
                                                  leftover_engines: Any) -> None:
    port = free_port()
    bad = runner.invoke(app, ["up", "--provider", "ssh", "--host", "root@box:70000",
                              "--model", str(tiny_models["target"])])
    assert bad.exit_code == 2 and "outside 1-65535" in bad.output
    assert Ledger(box["home"]).all() == []  # refused before the ledger

    up = runner.invoke(app, ["up", "--provider", "ssh", "--host", box["address"],
                             "--model", str(tiny_models["target"]), "--port", str(port),
                             "--context-length", "512", "--enforce-eager", "--json"])
    assert up.exit_code == 0, up.output
    record = json.loads(up.stdout)
    tag = record["run_tag"]
    assert record["provider"] == "ssh" and record["status"] == "running"
    assert record["pod_id"] == f"ssh://{box['address']}/{tag}"
    assert record["price_per_hr"] == 0.0 and record["ttl_expires_at"] is None
    assert record["extra"]["startup"]["facts"]["kv_tokens"] > 0
    # The engine runs on the box (this machine, through its sshd), under the box's state dir.
    assert not _refused(port)
    assert (box["state"] / ".tailpod" / "box-run").read_text() == tag

    status = runner.invoke(app, ["status", "--json"])
    assert status.exit_code == 0, status.output
    (row,) = json.loads(status.stdout)["pods"]
    assert row["provider"] == "ssh" and row["status"] == "running" and row["deadman"] is None

    bench = runner.invoke(app, ["benchmark", "--spec-k", "0", "--concurrency", "1", "--reps", "1",
                                "--max-tokens", "16", "--run-id", "box-run"])
    assert bench.exit_code == 0, bench.output
    results = box["home"] / "results" / "box-run"
    run = json.loads((results / "run.json").read_text())
    assert run["measured_from"] == "pod" and run["provider"] == "ssh"
    cells = [json.loads(line) for line in (results / "rows.jsonl").read_text().splitlines()]
    (cell,) = [c for c in cells if c["kind"] == "cell"]
    assert cell["failed"] == 0 and cell["output_tokens"] == cell["requests"] * 16

    down = runner.invoke(app, ["down", tag, "--json"])
    assert down.exit_code == 0, down.output
    proof = json.loads((box["home"] / "results" / tag / "billing-proof.json").read_text())
    checks = {c["name"]: c["passed"] for c in proof["checks"]}
    assert checks["engine stopped"] and checks["port closed"] and checks["no charges"]
    assert _refused(port)  # independently of the proof: nothing listens on the engine's port
    assert not (box["state"] / ".tailpod" / "box-run").exists()
    known = (box["home"] / "known_hosts").read_text()
    assert f"[127.0.0.1]:{box['host'].port}" in known  # the box stays pinned
    again = runner.invoke(app, ["down", tag])
    assert again.exit_code == 0, again.output  # idempotent, and it asked the box again
    assert leftover_engines(str(tiny_models["target"])) == set()

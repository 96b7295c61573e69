"""The local agent transport: a child that talks a lot on stderr and answers a large envelope on
stdout must not deadlock the driver (it did while `communicate()` and a stderr reader thread
shared the stderr pipe: seen with `probe logprobs` in the KL evaluation)."""

from __future__ import annotations

import sys
from pathlib import Path

from tailpod.agent_client.driver import SubprocessTransport

CHATTY = r"""
import json, sys
payload = json.loads(sys.stdin.read())
for i in range(5000):
    print(f"progress line {i}", file=sys.stderr, flush=True)
sys.stdout.write(json.dumps({"ok": True, "result": "x" * payload["size"]}) + "\n")
for i in range(5000):
    print(f"late line {i}", file=sys.stderr, flush=True)
"""


def test_large_stdout_and_busy_stderr_come_back_whole(tmp_path: Path) -> None:
    transport = SubprocessTransport(tmp_path)
    seen: list[str] = []
    stdin = b'{"size": 4000000, "pad": "' + b"y" * 300_000 + b'"}'  # more than a pipe holds
    done = transport.execute([sys.executable, "-c", CHATTY], stdin, seen.append, timeout_s=60)
    assert done.exit_status == 0
    assert len(done.stdout) > 4_000_000 and done.stdout.rstrip().endswith('"}')
    assert len(seen) == 10_000 and seen[-1] == "late line 4999"
    assert done.stderr_tail[-1] == "late line 4999"

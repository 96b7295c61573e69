#!/usr/bin/env python3
"""Start llama-server once, save its startup log and one response of each API shape tailpod reads.

Standard library only (it runs on a bare GPU machine). What it writes into OUT_DIR, each file
named after `--name`:

  NAME.log                 the server's own log, start-up to shutdown (the parser's fixture)
  NAME.props.json          GET /props (build info, slots, context)
  NAME.stream.txt          a streamed /v1/chat/completions with usage: the raw SSE bytes
                           (the final chunk carries the server's `timings`)
  NAME.tokens.json         POST /completion with return_tokens (the gate's token source)
  NAME.logprobs.json       POST /v1/chat/completions with logprobs (ids per token)
  NAME.metrics.txt         GET /metrics

    python3 llamacpp_capture.py --name plain --out DIR -- llama-server -m model.gguf ...

The server is started in its own process group and stopped with it, on success and on error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

PROMPT = [{"role": "user", "content": "Explain how a bicycle stays upright."}]


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 120.0) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return bytes(resp.read())


def wait_healthy(base: str, proc: subprocess.Popen[bytes], timeout: float) -> float:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited during start-up (code {proc.returncode})")
        try:
            http(base + "/health", timeout=2)
            return time.time() - t0
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"llama-server was not healthy after {timeout:.0f} s")


def capture(base: str, out: Path, name: str, max_tokens: int) -> None:
    (out / f"{name}.props.json").write_bytes(http(base + "/props"))
    chat = {"model": "tailpod", "messages": PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}  # fmt: skip
    stream = {**chat, "stream": True, "stream_options": {"include_usage": True}}
    (out / f"{name}.stream.txt").write_bytes(http(base + "/v1/chat/completions", stream))
    tokens = {"prompt": "Explain how a bicycle stays upright.", "n_predict": max_tokens,
              "temperature": 0, "ignore_eos": True, "return_tokens": True}  # fmt: skip
    (out / f"{name}.tokens.json").write_bytes(http(base + "/completion", tokens))
    logprobs = {**chat, "logprobs": True, "top_logprobs": 1}
    (out / f"{name}.logprobs.json").write_bytes(http(base + "/v1/chat/completions", logprobs))
    (out / f"{name}.metrics.txt").write_bytes(http(base + "/metrics"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("server", nargs=argparse.REMAINDER, help="-- llama-server and its args")
    args = parser.parse_args(argv)
    server = [a for a in args.server if a != "--"]
    if not server:
        parser.error("give the llama-server command after --")
    args.out.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{args.port}"
    argv_full = [*server, "--host", "127.0.0.1", "--port", str(args.port)]
    with open(args.out / f"{args.name}.log", "wb") as log:
        proc = subprocess.Popen(argv_full, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            took = wait_healthy(base, proc, args.timeout)
            print(f"{args.name}: healthy after {took:.1f} s", file=sys.stderr)
            capture(base, args.out, args.name, args.max_tokens)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

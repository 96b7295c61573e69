#!/usr/bin/env python3
"""An independent client for the probe agreement on llama-server: httpx, not the probe's code.

The probe (the pod agent's tailpod/agent/probes/) speaks HTTP over its own asyncio sockets and
parses SSE itself.
This client uses httpx's streaming instead and times the same things the same way: TTFT from
sending to the first content chunk, decode tok/s = (completion_tokens - 1) / (last content chunk
- first content chunk), completion_tokens from the usage chunk. It also keeps llama-server's own
`timings` of each request, so every request is seen three ways.

Same workload as `tailpod benchmark`: the probe's prose prompts in order, one user message each,
temperature 0, ignore_eos, max_tokens, closed loop with c workers, one unmeasured request first.

    python3 llamacpp_peer.py --base-url http://127.0.0.1:8000 --levels 1,2,4,8 --requests 16 \
        --max-tokens 128 --json peer.json

Needs httpx (tailpod's own dependency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

PROMPTS = Path(__file__).resolve().parents[1] / "tailpod" / "agent" / "probes" / "prompts" / "prose.json"


async def one_request(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    t_send = time.perf_counter()
    t_first = t_last = None
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter()
            event = json.loads(line[6:])
            if isinstance(event.get("usage"), dict):
                usage = event["usage"]
            if isinstance(event.get("timings"), dict):
                timings = event["timings"]
            choices = event.get("choices") or []
            delta = (choices[0].get("delta") or {}) if choices else {}
            if delta.get("content"):
                t_first = t_first if t_first is not None else now
                t_last = now
    tokens = usage.get("completion_tokens")
    decode = None
    if tokens and tokens > 1 and t_first is not None and t_last is not None and t_last > t_first:
        decode = (tokens - 1) / (t_last - t_first)
    return {
        "ttft_ms": None if t_first is None else (t_first - t_send) * 1000,
        "decode_tok_s": decode,
        "completion_tokens": tokens,
        "server_prompt_ms": timings.get("prompt_ms"),
        "server_tok_s": timings.get("predicted_per_second"),
    }


async def level(base_url: str, model: str, prompts: list[dict[str, Any]], c: int, n: int,
                max_tokens: int) -> list[dict[str, Any]]:
    def body(i: int) -> dict[str, Any]:
        return {"model": model, "messages": prompts[i % len(prompts)]["messages"],
                "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip

    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:
        await one_request(client, body(0))  # unmeasured, like the probe's warm-up
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(n):
            queue.put_nowait(i)
        results: list[dict[str, Any]] = []

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                results.append(await one_request(client, body(i)))

        await asyncio.gather(*(worker() for _ in range(c)))
    return results


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="tailpod")
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    prompts = json.loads(PROMPTS.read_text())["prompts"]
    out = []
    print(f"{'c':>3} {'n':>4} {'peer TTFT ms':>12} {'server prompt ms':>16} "
          f"{'peer tok/s':>10} {'server tok/s':>12}")  # fmt: skip
    for c in (int(x) for x in args.levels.split(",")):
        rows: list[dict[str, Any]] = []
        for _ in range(args.reps):
            rows += asyncio.run(level(args.base_url, args.model, prompts, c, args.requests,
                                      args.max_tokens))  # fmt: skip
        entry = {"concurrency": c, "requests": len(rows),
                 **{k: _median(rows, k) for k in ("ttft_ms", "server_prompt_ms",
                                                  "decode_tok_s", "server_tok_s")}}  # fmt: skip
        out.append(entry)
        print(f"{c:>3} {len(rows):>4} {entry['ttft_ms'] or 0:>12.2f} "
              f"{entry['server_prompt_ms'] or 0:>16.2f} {entry['decode_tok_s'] or 0:>10.1f} "
              f"{entry['server_tok_s'] or 0:>12.1f}")
    if args.json:
        args.json.write_text(json.dumps({"base_url": args.base_url, "levels": out}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

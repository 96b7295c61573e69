#!/usr/bin/env python3
"""Open-loop figures beside the peers': tailpod's probe, `vllm bench serve --request-rate R
--burstiness B` and guidellm (`--profile kind=poisson,rate=R`) at the same rates against the
same synthetic server (benchmarks/synthetic_server.py: a known per-stream rate and TTFT, no
queue), each rep a fresh schedule of the same process, and the server's own record beside them.

Per rate and client: output tok/s (tokens over the client's own window), achieved req/s, median
TTFT and TPOT, each the median over reps with the client's spread over its reps
((max - min) / median). The server's truth: tokens over its window (first arrival to last
stream end) and its median TTFT (first write - arrival).

The probe runs from its built zipapp as on a pod; the vLLM client in one long-lived worker of
the engine's Python (bench_peer.py: its import is paid once, outside every window); guidellm as
a command (`--guidellm PATH`, installed in a venv of its own) with a local tokenizer, its import
(about a minute here) outside its benchmark window. Schedules are seeded per rep in every tool,
but each tool draws its own: the same process and rate, not the same instants.

Usage: TAILPOD_ENGINE_PYTHON=.venv-engine/bin/python .venv/bin/python \\
         benchmarks/peer_open_loop.py [--rates 8,32,64] [--reps 3] [--seconds 5] [--tokens 64]
         [--burstiness 1.0] [--guidellm /tmp/gl/bin/guidellm] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_peer import BenchServePeer
from probe_capacity import Server, run_probe

from tailpod.engines.tiny_checkpoint import build_tokenizer


def _spread(xs: list[float]) -> dict[str, float] | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    mid = len(xs) // 2
    med = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return {"median": med, "spread": (xs[-1] - xs[0]) / med if med else 0.0}


def _med(s: dict[str, Any], k: str, spec: str) -> str:
    return "-" if s[k] is None else format(s[k]["median"], spec)


def _spr(s: dict[str, Any], k: str) -> str:
    return "" if s[k] is None else f" ({100 * s[k]['spread']:.1f}%)"


def truth(server: Server) -> dict[str, Any]:
    st = server.stats()
    window = (st["last_end"] - st["first_arrival"]) if st["first_arrival"] else None
    return {"tok_s": st["tokens"] / window if window else None,
            "ttft_ms": 1000 * st["ttft_p50_s"] if st["ttft_p50_s"] is not None else None}


def probe(server: Server, rate: float, burst: float, n: int, tokens: int, seed: int,
          workdir: Path) -> dict[str, Any]:
    arrival = {"process": "poisson" if burst == 1.0 else "gamma", "rate": rate,
               "burstiness": burst, "seed": seed, "requests": n}
    out, _ = run_probe("asyncio", server, 0, n, tokens, None, workdir, 1, arrival)
    c = out.cell or {}
    return {"ok": out.ok, "tok_s": c.get("output_tok_s"), "req_s": c.get("achieved_rate_rps"),
            "ttft_ms": _ms(c.get("ttft_p50_s")), "ttft_sched_ms": _ms(c.get("ttft_sched_p50_s")),
            "tpot_ms": _ms(c.get("tpot_p50_s")), "flags": c.get("flags")}


def _ms(v: float | None) -> float | None:
    return None if v is None else 1000 * v


def vllm_bench(peer: BenchServePeer, server: Server, tok_dir: Path, rate: float, burst: float,
               n: int, tokens: int, seed: int) -> dict[str, Any]:
    reply = peer.run([
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url",
        server.url, "--model", "synthetic", "--tokenizer", str(tok_dir), "--dataset-name",
        "random", "--random-input-len", "32", "--random-output-len", str(tokens),
        "--num-prompts", str(n), "--request-rate", str(rate), "--burstiness", str(burst),
        "--seed", str(seed), "--ignore-eos", "--temperature", "0", "--num-warmups", "0",
        "--disable-tqdm"])
    if not reply.get("ok"):
        return {"ok": False, "error": str(reply.get("error"))[:200]}
    r = reply["result"]
    return {"ok": not r.get("failed"), "tok_s": r.get("output_throughput"),
            "req_s": r["completed"] / r["duration"] if r.get("duration") else None,
            "ttft_ms": r.get("median_ttft_ms"), "tpot_ms": r.get("median_tpot_ms")}


def guidellm(cmd: str, server: Server, tok_dir: Path, rates: list[float], burst: float,
             seconds: float, tokens: int, seed: int, workdir: Path) -> dict[float, Any]:
    """One guidellm run over every rate (its profile's rate list); rate -> figures."""
    if burst != 1.0:
        return {}  # its poisson profile has no burstiness
    out = workdir / f"guidellm-{seed}.json"
    argv = [cmd, "run", "--backend", f"kind=openai_http,target={server.url},model=synthetic",
            "--profile", json.dumps({"kind": "poisson", "rate": rates}),
            "--constraint", f"kind=max_duration,seconds={seconds:g}",
            "--data", f"kind=synthetic_text,prompt_tokens=32,output_tokens={tokens}",
            "--tokenizer", f"kind=hf_auto,model={tok_dir}",
            "--seed", f"kind=static,value={seed}",
            "--output", f"kind=json,path={out}", "--disable-progress"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0 or not out.exists():
        sys.stderr.write(f"guidellm failed: {proc.stdout[-400:]} {proc.stderr[-400:]}\n")
        return {}
    got: dict[float, Any] = {}
    for b in json.loads(out.read_text())["benchmarks"]:
        m, dur = b["metrics"], b["duration"]
        ok = m["request_totals"]["successful"]
        got[float(b["config"]["strategy"]["rate"])] = {
            "ok": m["request_totals"]["errored"] == 0,
            "tok_s": m["output_token_count"]["successful"]["total_sum"] / dur if dur else None,
            "req_s": ok / dur if dur else None,
            "ttft_ms": m["time_to_first_token_ms"]["successful"]["median"],
            "tpot_ms": m["time_per_output_token_ms"]["successful"]["median"],
        }
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--rates", default="8,32,64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="schedule length at each rate")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--burstiness", type=float, default=1.0)
    ap.add_argument("--stream-rate", type=float, default=200.0, help="server tok/s per stream")
    ap.add_argument("--ttft", type=float, default=0.02, help="server TTFT (s)")
    ap.add_argument("--guidellm", default=shutil.which("guidellm"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    engine_py = os.environ.get("TAILPOD_ENGINE_PYTHON")
    workdir = Path(tempfile.mkdtemp(prefix="peer-open-loop-"))
    tok = workdir / "tokenizer"
    tok.mkdir()
    build_tokenizer(tok)
    print(f"synthetic server {args.stream_rate:g} tok/s per stream, TTFT {1000 * args.ttft:g} ms;"
          f" {args.tokens} output tokens; {args.seconds:g} s of schedule per rate; burstiness "
          f"{args.burstiness:g}; {args.reps} reps; cpus {os.cpu_count()}; load "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    server = Server(args.stream_rate, args.ttft, 1, None)
    peer = BenchServePeer(engine_py) if engine_py else None
    runs: list[dict[str, Any]] = []
    started = time.time()
    try:
        for rep in range(args.reps):
            if args.guidellm:
                server.reset()
                for rate, fig in guidellm(args.guidellm, server, tok, rates, args.burstiness,
                                          args.seconds, args.tokens, rep, workdir).items():
                    runs.append({"client": "guidellm", "rate": rate, "rep": rep, **fig})
            for rate in rates:
                n = max(8, round(rate * args.seconds))
                order = ["probe", "vllm-bench"] if rep % 2 == 0 else ["vllm-bench", "probe"]
                for client in order:
                    if client == "vllm-bench" and peer is None:
                        continue
                    server.reset()
                    if client == "probe":
                        fig = probe(server, rate, args.burstiness, n, args.tokens, rep, workdir)
                    else:
                        assert peer is not None
                        fig = vllm_bench(peer, server, tok, rate, args.burstiness, n,
                                         args.tokens, rep)
                    t = truth(server)
                    runs.append({"client": client, "rate": rate, "rep": rep, **fig,
                                 "server_tok_s": t["tok_s"], "server_ttft_ms": t["ttft_ms"]})
                    sys.stderr.write(f"  rep {rep} rate {rate:g} {client}: "
                                     f"{fig.get('tok_s') or 0:,.0f} tok/s\n")
    finally:
        server.close()
        if peer is not None:
            peer.close()
    print()
    print("| rate req/s | client | reps | output tok/s (spread) | achieved req/s | TTFT p50 ms "
          "(spread) | TPOT p50 ms | server tok/s | server TTFT p50 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rate in rates:
        for client in ("probe", "vllm-bench", "guidellm"):
            mine = [r for r in runs if r["client"] == client and r["rate"] == rate]
            if not mine:
                continue
            s = {k: _spread([r.get(k) for r in mine]) for k in
                 ("tok_s", "req_s", "ttft_ms", "tpot_ms", "server_tok_s", "server_ttft_ms")}

            print(f"| {rate:g} | {client} | {len(mine)} | {_med(s, 'tok_s', ',.0f')}"
                  f"{_spr(s, 'tok_s')} | {_med(s, 'req_s', '.2f')} | {_med(s, 'ttft_ms', '.2f')}"
                  f"{_spr(s, 'ttft_ms')} | {_med(s, 'tpot_ms', '.2f')} | "
                  f"{_med(s, 'server_tok_s', ',.0f')} | {_med(s, 'server_ttft_ms', '.2f')} |")
    print(f"\nelapsed {time.time() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

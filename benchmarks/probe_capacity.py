#!/usr/bin/env python3
"""How fast can one probe process measure before it becomes the bottleneck?

Starts benchmarks/synthetic_server.py in its own process (a server of known emission rate),
then for each concurrency c runs, one after another against the same server:
  - the probe (the pod agent's `probe run`, run from its built zipapp as on a pod) with its
    asyncio transport,
  - the probe with its http.client-threads transport,
  - the client of `vllm bench serve` (the peer), when vLLM is importable,
and prints a table: what each client reported against what the server emitted, and the
client's CPU per 1k tokens. The server's own record (/_stats) is the truth: tokens emitted,
the window from first request to last stream end, per-stream decode rate at the server, and
how far the server ran behind its schedule (if it lags, the row measures the server).

A client "holds" at a level when its aggregate tok/s and its p50 decode rate are both within
1% of the server's and its CPU / wall stays under 0.8 (the probe's client_bound line). "drive"
is the share of an ideal closed loop it achieved (no gap between requests). CPU is read from
/proc/<pid>/stat over the server's window, the same way for every client.

Usage: .venv/bin/python benchmarks/probe_capacity.py [--levels 1,4,16,64,128,256]
       [--rate 200] [--tokens 128] [--waves 3] [--no-peer] [--no-pin] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_peer import BenchServePeer

from tailpod.agent_client.build import build_agent

REPO = Path(__file__).resolve().parent.parent
SERVER = REPO / "benchmarks" / "synthetic_server.py"
TOLERANCE = 0.01
CLIENT_BOUND = 0.8  # the probe's own client_bound threshold (CPU / wall)


# ---- process CPU over a window ---------------------------------------------------------------


class CpuSampler:
    """Cumulative user+system CPU of a process (all threads) and of its child processes (the
    probe's load workers: live ones read from their own stat, ended ones from the parent's
    cutime/cstime once reaped), sampled every 10 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _fields(pid: int | str) -> list[str] | None:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()
        except OSError:
            return None

    def _children(self) -> list[str]:
        kids: list[str] = []
        try:
            for tid in os.listdir(f"/proc/{self.pid}/task"):
                with open(f"/proc/{self.pid}/task/{tid}/children") as fh:
                    kids += fh.read().split()
        except OSError:
            pass
        return kids

    def _read(self) -> float | None:
        fields = self._fields(self.pid)
        if fields is None:
            return None
        # utime, stime, cutime, cstime (proc(5): fields 14-17, here 11-14 after the name)
        ticks = sum(int(f) for f in fields[11:15])
        for kid in self._children():
            kf = self._fields(kid)
            if kf is not None:
                ticks += int(kf[11]) + int(kf[12])
        return ticks / self._tick

    def _run(self) -> None:
        while not self._stop.is_set():
            cpu = self._read()
            if cpu is None:
                return
            self.samples.append((time.monotonic(), cpu))
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def at(self, t: float) -> float | None:
        s = self.samples
        if not s or t < s[0][0]:
            return None
        for i in range(1, len(s)):
            (t0, c0), (t1, c1) = s[i - 1], s[i]
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return s[-1][1]

    def over(self, start: float | None, end: float | None) -> float | None:
        if start is None or end is None:
            return None
        a, b = self.at(start), self.at(end)
        return None if a is None or b is None else b - a


# ---- the synthetic server ---------------------------------------------------------------------


class Server:
    """`workers` synthetic-server processes sharing one port (SO_REUSEPORT), each pinned to
    its own CPU when `cpus` is given; their records are merged into one truth."""

    def __init__(self, rate: float, ttft: float, workers: int, cpus: list[int] | None) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.controls: list[str] = []
        port = 0
        for i in range(workers):
            cmd = [sys.executable, str(SERVER), "--port", str(port), "--rate", str(rate),
                   "--ttft", str(ttft), "--metrics", "vllm", "--reuse-port", "--control"]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                    preexec_fn=_pinner(cpus[i] if cpus else None))
            self.procs.append(proc)
            assert proc.stdout is not None
            line = proc.stdout.readline().split()
            if len(line) != 4 or line[0] != "PORT":
                self.close()
                raise RuntimeError(f"synthetic server did not start: {line!r}")
            port = int(line[1])
            self.controls.append(f"http://127.0.0.1:{line[3]}")
        self.url = f"http://127.0.0.1:{port}"

    @staticmethod
    def _call(base: str, method: str, path: str) -> dict[str, Any]:
        req = urllib.request.Request(base + path, method=method,
                                     data=b"{}" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"{}")

    def reset(self) -> None:
        for base in self.controls:
            self._call(base, "POST", "/_reset")

    def stats(self) -> dict[str, Any]:
        parts = [self._call(base, "GET", "/_stats/raw") for base in self.controls]
        firsts = [p["first_arrival"] for p in parts if p["first_arrival"] is not None]
        ends = [p["last_end"] for p in parts if p["last_end"] is not None]
        ttft = sorted(x for p in parts for x in p["ttft_list"])
        decode = sorted(x for p in parts for x in p["decode_list"])
        durations = [x for p in parts for x in p["duration_list"]]
        return {
            "tokens": sum(p["tokens"] for p in parts),
            "first_arrival": min(firsts) if firsts else None,
            "last_end": max(ends) if ends else None,
            "max_lag_s": max(p["max_lag_s"] for p in parts),
            "ttft_p50_s": _median(ttft),
            "decode_tok_s_p50": _median(decode),
            "duration_mean_s": sum(durations) / len(durations) if durations else None,
        }

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(10)


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _pinner(cpu: int | list[int] | None) -> Any:
    """Pin the child to one CPU or a set (a probe's load workers inherit the set)."""
    if cpu is None:
        return None
    cpus = {cpu} if isinstance(cpu, int) else set(cpu)
    return lambda: os.sched_setaffinity(0, cpus)


# ---- clients ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    client: str
    c: int
    ok: bool
    agg_tok_s: float | None = None
    decode_p50: float | None = None
    ttft_p50_s: float | None = None
    self_cpu_s: float | None = None
    window_cpu_s: float | None = None
    note: str = ""
    workers: int = 1
    lag_p50_s: float | None = None  # open loop: median send lag behind the schedule
    cell: dict[str, Any] | None = None  # the probe's own cell row


def run_probe(transport: str, server: Server, c: int, n_requests: int, tokens: int,
              cpu: list[int] | None, workdir: Path, workers: int = 1,
              arrival: dict[str, Any] | None = None) -> tuple[Outcome, CpuSampler]:
    """One probe cell: the closed loop of c, or with `arrival` (the agent's) an open loop with
    no in-flight cap; over `workers` load processes. The cell row is kept on the outcome."""
    cell: dict[str, Any] = {"arm": "cap", "concurrency": c, "rep": 0, "prompt_class": "prose"}
    if arrival is not None:
        cell.update(concurrency=None, arrival=arrival)
    request = {"options": {"base_url": server.url, "transport": transport,
                           "requests_per_cell": n_requests, "max_tokens": tokens,
                           "warmup": 0, "engine": "none", "workers": workers},
               "cells": [cell]}
    cmd = [sys.executable, "-I", str(build_agent(workdir).path), "probe", "run"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_pinner(cpu))
    name = "probe-" + transport + (f"-w{workers}" if workers > 1 else "")
    sampler = CpuSampler(proc.pid)
    out, err = proc.communicate(json.dumps(request), timeout=600)
    sampler.stop()
    row = None
    lines = out.strip().splitlines()
    envelope = json.loads(lines[-1]) if lines else {}
    for one in envelope.get("result", {}).get("rows", []):
        if one["kind"] == "cell":
            row = one
    if proc.returncode != 0 or row is None:
        return Outcome(name, c, False, note=err.strip()[-200:], workers=workers), sampler
    return Outcome(
        name, c, row["failed"] == 0, row["output_tok_s"],
        row["decode_tok_s_p50"], row["ttft_p50_s"], row["client_cpu_s"],
        note=",".join(row["flags"]), workers=workers,
        lag_p50_s=row.get("schedule_lag_p50_s"), cell=row,
    ), sampler


class Peer:
    """`vllm bench serve`'s client in one long-lived worker (bench_peer.py), so its import cost
    (tens of seconds on small machines) is paid once and never lands in a measured window."""

    def __init__(self, tokenizer_dir: Path, cpu: int | list[int] | None) -> None:
        self.tokenizer_dir = tokenizer_dir
        self.worker = BenchServePeer(sys.executable, _pinner(cpu))

    def run(
        self, server: Server, c: int, n_requests: int, tokens: int
    ) -> tuple[Outcome, CpuSampler]:
        argv = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
                "--base-url", server.url, "--model", "synthetic", "--tokenizer",
                str(self.tokenizer_dir), "--dataset-name", "random", "--random-input-len", "32",
                "--random-output-len", str(tokens), "--num-prompts", str(n_requests),
                "--max-concurrency", str(c), "--request-rate", "inf", "--ignore-eos",
                "--temperature", "0", "--num-warmups", "0", "--disable-tqdm"]
        sampler = CpuSampler(self.worker.pid)
        reply = self.worker.run(argv)
        sampler.stop()
        if not reply.get("ok"):
            return Outcome("vllm-bench", c, False, note=str(reply.get("error"))[:200]), sampler
        r: dict[str, Any] = reply["result"]
        tpot = r.get("median_tpot_ms")
        return Outcome(
            "vllm-bench", c, not r.get("failed"), r.get("output_throughput"),
            1000.0 / tpot if tpot else None,
            (r.get("median_ttft_ms") or 0) / 1000.0 if r.get("median_ttft_ms") else None,
        ), sampler

    def close(self) -> None:
        self.worker.close()


def start_peer(workdir: Path, cpu: int | list[int] | None) -> tuple[Peer | None, str]:
    try:
        import vllm.benchmarks.serve  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means no peer
        return None, f"vllm.benchmarks.serve not importable: {exc!r}"
    try:
        sys.path.insert(0, str(REPO))
        from tailpod.engines.tiny_checkpoint import build_tokenizer

        tok = workdir / "tokenizer"
        tok.mkdir()
        build_tokenizer(tok)
    except Exception as exc:  # noqa: BLE001
        return None, f"could not build a local tokenizer for the peer: {exc!r}"
    try:
        return Peer(tok, cpu), ""
    except Exception as exc:  # noqa: BLE001
        return None, f"peer failed to start: {exc!r}"


# ---- the sweep --------------------------------------------------------------------------------


def _rel(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b - 1.0


def measure(client: str, run: Any, server: Server, tokens: int,
            offered_tok_s: float | None = None) -> dict[str, Any]:
    """One client's figures against the server's record; `offered_tok_s` for an open loop
    (drive is then the share of the offered token rate the server saw)."""
    server.reset()
    outcome, sampler = run()
    st = server.stats()
    window = (st["last_end"] - st["first_arrival"]) if st["first_arrival"] else None
    server_agg = st["tokens"] / window if window else None
    outcome.window_cpu_s = sampler.over(st["first_arrival"], st["last_end"])
    agg_err = _rel(outcome.agg_tok_s, server_agg)
    dec_err = _rel(outcome.decode_p50, st["decode_tok_s_p50"])
    # Drive: the share of an ideal closed loop the client achieved, i.e. c streams back to
    # back with no gap between one request's end and the next one's arrival, each lasting
    # as long as the server actually took (so the server's own lateness is not counted).
    ideal = offered_tok_s
    if ideal is None and st["duration_mean_s"]:
        ideal = outcome.c * tokens / st["duration_mean_s"]
    drive = server_agg / ideal if server_agg and ideal else None
    cpu = outcome.window_cpu_s
    # per load process (each has a core of its own when there are enough)
    cpu_frac = cpu / window / outcome.workers if cpu is not None and window else None
    # Holds = measures within 1% (aggregate and decode rate) without being client-bound.
    holds = bool(outcome.ok and agg_err is not None and dec_err is not None
                 and abs(agg_err) <= TOLERANCE and abs(dec_err) <= TOLERANCE
                 and cpu_frac is not None and cpu_frac < CLIENT_BOUND)
    return {
        "client": client,
        "c": outcome.c,
        "workers": outcome.workers,
        "offered_tok_s": offered_tok_s,
        "lag_p50_ms": None if outcome.lag_p50_s is None else 1000 * outcome.lag_p50_s,
        "server_tok_s": server_agg,
        "server_lag_ms": 1000 * st["max_lag_s"],
        "client_tok_s": outcome.agg_tok_s,
        "agg_err": agg_err,
        "drive": drive,
        "decode_err": dec_err,
        "ttft_over_ms": (1000 * (outcome.ttft_p50_s - st["ttft_p50_s"])
                         if outcome.ttft_p50_s is not None and st["ttft_p50_s"] is not None
                         else None),
        "cpu_per_1k_tok_ms": 1e6 * cpu / st["tokens"] if cpu is not None and st["tokens"] else None,
        "cpu_frac": cpu_frac,
        "self_cpu_s": outcome.self_cpu_s,
        "holds": holds,
        "note": outcome.note,
    }


def _f(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(rows: list[dict[str, Any]]) -> None:
    head = ("client", "c", "server tok/s", "client tok/s", "agg err", "decode err", "drive",
            "ttft +ms", "cpu ms/1k tok", "cpu/wall", "srv lag ms", "send lag ms", "holds",
            "note")
    widths = (-17, 4, 13, 13, 8, 10, 6, 8, 13, 8, 10, 11, 5, -1)

    def line(cells: tuple[Any, ...]) -> str:
        return " ".join(f"{str(c):<{-w}}" if w < 0 else f"{str(c):>{w}}"
                        for c, w in zip(cells, widths, strict=True))

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:+.2f}%"

    print(line(head))
    for r in rows:
        print(line((
            r["client"], r["c"], _f(r["server_tok_s"], ",.0f"), _f(r["client_tok_s"], ",.0f"),
            pct(r["agg_err"]), pct(r["decode_err"]), _f(r["drive"], ".3f"),
            _f(r["ttft_over_ms"], ".2f"), _f(r["cpu_per_1k_tok_ms"], ".1f"),
            _f(r["cpu_frac"], ".2f"), _f(r["server_lag_ms"], ".1f"), _f(r["lag_p50_ms"], ".1f"),
            "yes" if r["holds"] else "NO", r["note"])))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--levels", default="1,4,16,64,128,256", help="concurrency levels")
    ap.add_argument("--rate", type=float, default=200.0, help="tokens/s per stream at the server")
    ap.add_argument("--tokens", type=int, default=128, help="completion tokens per request")
    ap.add_argument("--ttft", type=float, default=0.02)
    ap.add_argument("--waves", type=int, default=3, help="requests per worker")
    ap.add_argument("--clients", default="probe-asyncio,probe-threads,vllm-bench")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and client to CPUs")
    ap.add_argument("--server-workers", type=int, default=0,
                    help="synthetic server processes [1 on <8 CPUs, else 4]")
    ap.add_argument("--workers", default="1",
                    help="probe load processes to compare, e.g. 1,2 (probe clients only)")
    ap.add_argument("--open-loop", action="store_true",
                    help="constant arrivals, no in-flight cap, at the rate that keeps c streams "
                    "busy by Little's law (c / (ttft + tokens / rate)), instead of a closed loop")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args(argv)

    levels = [int(x) for x in args.levels.split(",")]
    clients = [c for c in args.clients.split(",") if c]
    if args.no_peer and "vllm-bench" in clients:
        clients.remove("vllm-bench")
    ncpu = os.cpu_count() or 1
    workers = args.server_workers or (1 if ncpu < 8 else 4)
    pin = not args.no_pin and ncpu > workers and hasattr(os, "sched_setaffinity")
    server_cpus: list[int] | None = list(range(workers)) if pin else None
    client_cpu: list[int] | None = list(range(workers, ncpu)) if pin else None
    workdir = Path(tempfile.mkdtemp(prefix="probe-capacity-"))
    pinning = f"server cpu0-{workers - 1}, client cpu{workers}-{ncpu - 1}" if pin else "no"
    load_workers = [int(x) for x in args.workers.split(",")]
    print(f"synthetic server: {args.rate:.0f} tok/s per stream, {args.tokens} tokens/request, "
          f"ttft {1000 * args.ttft:.0f} ms; {args.waves} requests per worker; {workers} server "
          f"process(es); pinned: {pinning}; cpus: {ncpu}; "
          f"{'open loop (constant arrivals)' if args.open_loop else 'closed loop'}")
    server = Server(args.rate, args.ttft, workers, server_cpus)
    peer, why = None, ""
    if "vllm-bench" in clients:
        t0 = time.time()
        peer, why = start_peer(workdir, client_cpu)
        if peer is None:
            clients.remove("vllm-bench")
            print("peer (vllm bench serve) NOT run: " + why)
        else:
            print("peer: vllm.benchmarks.serve imported in a worker (%.0f s, not measured)"
                  % (time.time() - t0))
    rows: list[dict[str, Any]] = []
    started = time.time()
    try:
        for c in levels:
            n = c * args.waves
            # Little's law: c requests in flight on average at this arrival rate
            rate = c / (args.ttft + args.tokens / args.rate) if args.open_loop else None
            offered = rate * args.tokens if rate is not None else None
            runs: list[tuple[str, Callable[[], tuple[Outcome, CpuSampler]]]] = []
            for client in clients:
                if client == "vllm-bench":
                    if rate is None:  # its closed loop only (--max-concurrency)
                        assert peer is not None
                        runs.append((client, functools.partial(peer.run, server, c, n,
                                                               args.tokens)))
                    continue
                transport = client.split("-", 1)[1]
                for w in load_workers:
                    if w > 1 and transport != "asyncio":
                        continue  # worker processes drive the asyncio transport only
                    name = client + (f"-w{w}" if w > 1 else "")
                    runs.append((name, functools.partial(
                        run_probe, transport, server, c, n, args.tokens, client_cpu, workdir,
                        w, None if rate is None else {"process": "constant", "rate": rate,
                                                      "requests": n})))
            for client, run in runs:
                row = measure(client, run, server, args.tokens, offered)
                rows.append(row)
                sys.stderr.write(
                    f"  {client} c={c}: client {_f(row['client_tok_s'], ',.0f')} tok/s, "
                    f"server {_f(row['server_tok_s'], ',.0f')} tok/s, "
                    f"cpu/wall {_f(row['cpu_frac'], '.2f')}\n")
    finally:
        server.close()
        if peer is not None:
            peer.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print_table(rows)
    print()
    for client in sorted({r["client"] for r in rows}):
        held = [r for r in rows if r["client"] == client and r["holds"]]
        best = max(held, key=lambda r: r["server_tok_s"] or 0) if held else None
        found = "none" if best is None else f"{best['server_tok_s']:,.0f} tok/s (c={best['c']})"
        print(f"{client:<14} highest aggregate measured within 1%: {found}")
    print("elapsed %.0f s" % (time.time() - started))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

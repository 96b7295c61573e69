#!/usr/bin/env python3
"""Does the probe agree with llama-server's own per-request timings?

Reads a run directory that `tailpod benchmark` wrote against llama-server. For every request the
probe keeps, beside its own measurement, the `timings` the server sent in the stream's final
chunk (`server_timings` in rows.jsonl). The two describe the same request:

  output tok/s   probe `decode_tok_s` = (completion_tokens - 1) / (last token - first token), as
                 the client saw the chunks arrive; server `predicted_per_second` = (predicted_n
                 - 1) / (last token - first token), as the server produced them
                 (ggml-org/llama.cpp tools/server/server-common.h `n_gen_tps` @ 0c1e57098).
  TTFT           probe `ttft_s`, from sending the request to the first content chunk; server
                 `prompt_ms`, from the slot taking the request to the first token. The probe's
                 includes what the server does before a slot takes the request (HTTP, chat
                 template, tokenizing, queueing when every slot is busy) and the network, so it is
                 larger by that much.

Per arm and concurrency it prints the medians over every request of every rep, and the
difference (probe vs server, server as the reference); the target is within 3%.

    python3 llamacpp_agreement.py RESULTS/RUN_ID [--arm plain] [--json out.json]

Standard library only: it runs on the GPU machine beside the benchmark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

TARGET = 0.03


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for line in (run_dir / "rows.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _diff(probe: float | None, server: float | None) -> float | None:
    if probe is None or not server:
        return None
    return probe / server - 1.0


def agreement(rows: list[dict[str, Any]], arm: str | None = None) -> list[dict[str, Any]]:
    """One entry per (arm, concurrency): medians of the probe's and the server's figures."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("kind") != "request" or not row.get("ok"):
            continue
        if str(row.get("cell", "")).endswith("|warm") or (arm and row.get("arm") != arm):
            continue
        if not row.get("server_timings"):
            continue
        groups.setdefault((str(row["arm"]), int(row["concurrency"])), []).append(row)
    out = []
    for (arm_label, c), reqs in sorted(groups.items()):
        timings = [r["server_timings"] for r in reqs]
        probe_tps = _median([r["decode_tok_s"] for r in reqs if r.get("decode_tok_s")])
        server_tps = _median([t["predicted_per_second"] for t in timings
                              if t.get("predicted_per_second")])  # fmt: skip
        probe_ttft = _median([r["ttft_s"] * 1000 for r in reqs if r.get("ttft_s") is not None])
        server_ttft = _median([t["prompt_ms"] for t in timings if t.get("prompt_ms") is not None])
        drafted = sum(t.get("draft_n") or 0 for t in timings)
        accepted = sum(t.get("draft_n_accepted") or 0 for t in timings)
        out.append({
            "arm": arm_label,
            "concurrency": c,
            "requests": len(reqs),
            "reps": len({r.get("rep") for r in reqs}),
            "probe_output_tok_s": probe_tps,
            "server_output_tok_s": server_tps,
            "output_tok_s_diff": _diff(probe_tps, server_tps),
            "probe_ttft_ms": probe_ttft,
            "server_prompt_ms": server_ttft,
            "ttft_diff": _diff(probe_ttft, server_ttft),
            "ttft_gap_ms": None if probe_ttft is None or server_ttft is None
            else probe_ttft - server_ttft,
            # the server's own count: drafted tokens it accepted (the bonus token excluded)
            "draft_acceptance": accepted / drafted if drafted else None,
        })  # fmt: skip
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(entries: list[dict[str, Any]]) -> str:
    head = (f"{'arm':<18} {'c':>3} {'n':>4}  {'probe tok/s':>11} {'server tok/s':>12} "
            f"{'diff':>7}  {'probe TTFT ms':>13} {'server prompt ms':>16} {'diff':>7} {'gap ms':>7}"
            f" {'accepted':>8}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for e in entries:
        lines.append(
            f"{e['arm']:<18} {e['concurrency']:>3} {e['requests']:>4}  "
            f"{_fmt(e['probe_output_tok_s'], '.1f'):>11} {_fmt(e['server_output_tok_s'], '.1f'):>12} "
            f"{_fmt(e['output_tok_s_diff'], '+.2%'):>7}  "
            f"{_fmt(e['probe_ttft_ms'], '.2f'):>13} {_fmt(e['server_prompt_ms'], '.2f'):>16} "
            f"{_fmt(e['ttft_diff'], '+.2%'):>7} {_fmt(e['ttft_gap_ms'], '.2f'):>7}"
            f" {_fmt(e['draft_acceptance'], '.1%'):>8}"
        )
    lines.append(f"target: within {TARGET:.0%} (server as the reference)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--arm", default=None, help="one arm only (default: every arm)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    entries = agreement(read_rows(args.run_dir), args.arm)
    if not entries:
        print("no request rows with server timings (is this a llama-server run?)", file=sys.stderr)
        return 1
    print(render(entries))
    if args.json:
        args.json.write_text(json.dumps({"run_dir": str(args.run_dir), "target": TARGET,
                                         "entries": entries}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

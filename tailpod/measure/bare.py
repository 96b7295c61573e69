#!/usr/bin/env python3
"""Bare engine decode: the engine's own offline API at the served arm's settings, with the probe's
prompts, output length and concurrency. The served endpoint's throughput over this one is the
serve tax (HTTP, the API server, detokenising and streaming).

Run with the engine's Python (it imports the engine), given the pod agent's zipapp, whose prompt
classes it uses, after the served engine has stopped (they would share the accelerator):

    python bare.py --agent agent-<hash>.pyz --serve-argv-file argv.json --concurrency 1,2 \
        --reps 1 --max-tokens 64 --prompt-classes prose --out bare.jsonl

vLLM only (its offline `LLM` API, built from the serve argv through vLLM's own argument parser, so
the arm's flags mean the same). Each concurrency level c runs the cell's requests in waves of c
(ignore-EOS and equal output lengths make a wave end together, as a closed loop at c would keep c
in flight); one untimed warm-up wave goes first. One JSON line per (concurrency, rep, class).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from typing import Any

_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def engine_args_from_serve_argv(argv: list[str]) -> tuple[Any, list[str]]:
    """vLLM EngineArgs from the API server's argv, and the server-only flags left over."""
    # vllm stays lazy: heavy, and only the engine's Python (which runs this script) has it.
    from vllm.engine.arg_utils import EngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM before the utils split
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]

    if _SERVER_MODULE in argv:
        tail = argv[argv.index(_SERVER_MODULE) + 1 :]
    elif "serve" in argv:  # `vllm serve MODEL ...`
        after = argv[argv.index("serve") + 1 :]
        tail = (
            ["--model", after[0], *after[1:]] if after and not after[0].startswith("-") else after
        )
    else:
        raise SystemExit(f"not a vLLM server command line: {argv[:4]}")
    parser = FlexibleArgumentParser()
    EngineArgs.add_cli_args(parser)
    args, unknown = parser.parse_known_args(tail)
    return EngineArgs.from_cli_args(args), unknown


def measure(
    llm: Any, sampling: Any, conversations: list[Any], concurrency: int
) -> tuple[int, float]:
    """Output tokens and wall seconds for the conversations in waves of `concurrency`."""
    tokens = 0
    t0 = time.perf_counter()
    for i in range(0, len(conversations), concurrency):
        outs = llm.chat(conversations[i : i + concurrency], sampling, use_tqdm=False)
        tokens += sum(len(o.outputs[0].token_ids) for o in outs)
    return tokens, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", required=True, help="the pod agent's zipapp (its prompt classes)")
    ap.add_argument("--serve-argv-file", required=True)
    ap.add_argument("--arm", default="arm")
    ap.add_argument("--concurrency", required=True)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--requests-per-cell", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--prompt-classes", default="prose")
    ap.add_argument("--prompts-dir", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--env-file", default=None, help="KEY=VALUE lines (the pod's pod.env)")
    opts = ap.parse_args(argv)
    if opts.env_file:  # the provider-injected environment (HF token), as the agent's engine start reads it
        with open(opts.env_file, encoding="utf-8", errors="replace") as fh:
            for line in fh.read().splitlines():
                key, sep, value = line.partition("=")
                if sep and key and key.replace("_", "").isalnum():
                    os.environ[key] = value
    sys.path.insert(0, opts.agent)  # the same prompt classes and engine settings the served cells used
    # agent.* and vllm are imported below, not at the top: the agent is importable only from the
    # line above, and vllm is heavy and the engine's own.
    if shutil.which("nvidia-smi") is None:
        from agent.bootstrap.engine import CPU_ENGINE_ENV  # type: ignore[import-not-found]

        for key, value in CPU_ENGINE_ENV.items():  # no GPU: as the agent starts the served engine
            os.environ.setdefault(key, value)
    with open(opts.serve_argv_file, encoding="utf-8") as fh:
        serve_argv = json.load(fh)
    from agent.probes.prompt_classes import load_prompt_classes  # type: ignore[import-not-found]

    classes = load_prompt_classes(opts.prompts_dir, opts.prompt_classes.split(","))
    from vllm import LLM, SamplingParams
    from vllm import __version__ as vllm_version

    engine_args, server_only = engine_args_from_serve_argv(serve_argv)
    t0 = time.perf_counter()
    llm = LLM(**{f.name: getattr(engine_args, f.name) for f in dataclasses.fields(engine_args)})
    startup_s = time.perf_counter() - t0
    sampling = SamplingParams(temperature=0.0, max_tokens=opts.max_tokens, ignore_eos=True)
    first = next(iter(classes.values()))["prompts"][0]["messages"]
    llm.chat([first], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)  # warm-up
    levels = [int(c) for c in opts.concurrency.split(",") if c]
    with open(opts.out, "w", encoding="utf-8") as out:
        for rep in range(opts.reps):
            for c in levels:
                n = opts.requests_per_cell or max(4, c)
                for name, pclass in classes.items():
                    prompts = pclass["prompts"]
                    conversations = [prompts[i % len(prompts)]["messages"] for i in range(n)]
                    tokens, wall = measure(llm, sampling, conversations, c)
                    row = {
                        "kind": "bare", "arm": opts.arm, "concurrency": c, "rep": rep,
                        "prompt_class": name, "requests": n, "output_tokens": tokens,
                        "wall_s": round(wall, 6), "output_tok_s": tokens / wall if wall else None,
                        "tool": "vllm offline LLM.chat", "engine_version": vllm_version,
                        "startup_s": round(startup_s, 2), "server_only_flags": server_only,
                    }  # fmt: skip
                    out.write(json.dumps(row) + "\n")
                    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

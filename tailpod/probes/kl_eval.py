"""The KL evaluation, laptop side: serve the reference and each candidate in turn, score them on the
same tokens, and write `kl.json` into a run directory.

Collection happens where the engine runs: `probe.py logprobs` is run on the pod (as every other
measurement), against 127.0.0.1. The reference goes first: its greedy continuation of every prompt,
then its own top-k logprobs on that continuation (teacher forcing). Each candidate is then served
on the same pod (the engine relaunched with `--model` = candidate) and scored on THE SAME token
sequence through the same request path, plus its own greedy continuation for the first greedy
divergence. The math is `tailpod.results.kl`; the format is in docs/kl-eval.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from tailpod import __version__
from tailpod.bootstrap.engines.base import EngineConfig, SpecArm
from tailpod.errors import ConfigError, TailpodError
from tailpod.probes.hosts import PROBE_FILE, ProbeSweepHost
from tailpod.probes.plan import Arm, SweepPlan
from tailpod.probes.sweep import RunContext, RunDirectory, new_run
from tailpod.results import kl
from tailpod.results.kl import KL_FILE
from tailpod.secrets import redact

KL_SCHEMA_VERSION = 1
PROMPTS_FILE = Path(__file__).with_name("prompts") / "kl" / "kl_prompts.json"
# vLLM refuses more logprobs per position than `--max-logprobs` (default 20).
VLLM_DEFAULT_MAX_LOGPROBS = 20
Log = Callable[[str], None]


@dataclass(frozen=True)
class KlArm:
    label: str
    model: str  # the checkpoint served for this arm (or, for an endpoint, what it serves)
    url: str | None = None  # a running endpoint instead of a relaunch on the pod


def label_arms(
    reference: str, candidates: Sequence[str], reference_url: str | None = None,
    candidate_urls: Sequence[str] | None = None,
) -> list[KlArm]:  # fmt: skip
    """"reference" first, then one label per candidate from its checkpoint name, made unique."""
    urls: list[str | None] = [None] * len(candidates)
    if candidate_urls:
        urls = list(candidate_urls)
    if len(urls) != len(candidates):
        raise ConfigError("give one --candidate name per --candidate-url, or none")
    arms = [KlArm("reference", reference, reference_url)]
    seen = {"reference"}
    for model, url in zip(candidates, urls, strict=True):
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model.rstrip("/")).name or model)[:48]
        label, n = base or "candidate", 1
        while label in seen:
            n += 1
            label = f"{base}-{n}"
        seen.add(label)
        arms.append(KlArm(label, model, url))
    return arms


def load_prompts(path: Path | None = None, classes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The shipped prompt set (or another file of the same shape), optionally some classes only."""
    source = Path(path) if path else PROMPTS_FILE
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the prompt set {source}: {exc}") from None
    prompts = data.get("prompts") if isinstance(data, dict) else data
    if not isinstance(prompts, list) or not prompts:
        raise ConfigError(f"{source} holds no prompts")
    if classes:
        prompts = [p for p in prompts if p.get("class") in classes]
        if not prompts:
            raise ConfigError(f"no prompt of class {', '.join(classes)} in {source}")
    return prompts


def with_max_logprobs(cfg: EngineConfig, top_k: int) -> EngineConfig:
    """vLLM answers at most `--max-logprobs` (default 20) logprobs per position: raise it."""
    if cfg.engine != "vllm" or top_k <= VLLM_DEFAULT_MAX_LOGPROBS:
        return cfg
    if any(a.split("=", 1)[0] == "--max-logprobs" for a in cfg.extra_args):
        return cfg
    return replace(cfg, extra_args=(*cfg.extra_args, f"--max-logprobs={top_k}"))


def slim_reference(doc: dict[str, Any]) -> dict[str, Any]:
    """What a candidate needs from the reference: the token sequences to score."""
    return {
        "kind": "logprobs_reference",
        "prompts": [
            {"id": p["id"], "prompt_ids": p["prompt_ids"], "scored_ids": p["scored_ids"]}
            for p in doc.get("prompts", [])
            if not p.get("error")
        ],
    }


def probe_args(
    base_url: str, model: str | None, engine: str, prompts_file: str, out: str, top_k: int,
    max_tokens: int, reference_file: str | None,
) -> list[str]:  # fmt: skip
    args = ["logprobs", "--base-url", base_url, "--prompts-file", prompts_file, "--out", out,
            "--top-k", str(top_k), "--max-tokens", str(max_tokens),
            "--engine", engine if engine in ("vllm", "sglang") else "auto"]  # fmt: skip
    if model:
        args += ["--model", model]
    if reference_file:
        args += ["--reference-file", reference_file]
    return args


class LogprobSource(Protocol):
    """Where logprobs come from. `serve` makes `arm` the model answering; `collect` asks it."""

    measured_from: str

    def config_for(self, arm: KlArm) -> EngineConfig: ...

    def serve(self, arm: KlArm) -> dict[str, Any]: ...

    def collect(
        self, arm: KlArm, prompts: list[dict[str, Any]], top_k: int, max_tokens: int,
        reference: dict[str, Any] | None,
    ) -> dict[str, Any]: ...  # fmt: skip


class PodLogprobSource:
    """One pod, one engine at a time: relaunch per arm, run the probe beside the engine."""

    def __init__(self, host: ProbeSweepHost, base: EngineConfig, top_k: int) -> None:
        self.host = host
        self.base = replace(with_max_logprobs(base, top_k), spec=SpecArm())
        self.measured_from = host.measured_from

    def config_for(self, arm: KlArm) -> EngineConfig:
        return replace(self.base, model=arm.model)

    def serve(self, arm: KlArm) -> dict[str, Any]:
        restart = getattr(self.host, "restart", None)
        if restart is None:
            raise TailpodError("this host cannot restart its engine")
        t0 = time.time()
        start = restart(Arm(arm.label, self.config_for(arm)))
        return {
            "argv": start.argv,
            "startup": start.startup,
            "startup_s": start.startup_s,
            "restart_s": round(time.time() - t0, 2),
        }

    def collect(
        self, arm: KlArm, prompts: list[dict[str, Any]], top_k: int, max_tokens: int,
        reference: dict[str, Any] | None,
    ) -> dict[str, Any]:  # fmt: skip
        tag = uuid.uuid4().hex
        prompts_file, out = self.host._path(f"kl-prompts-{tag}.json"), self.host._path(f"kl-{tag}.json")
        self.host._write(prompts_file, json.dumps({"prompts": prompts}))
        ref_file = None
        if reference is not None:
            ref_file = self.host._path(f"kl-reference-{tag}.json")
            self.host._write(ref_file, json.dumps(reference))
        cfg = self.config_for(arm)
        self.host._probe(
            probe_args(self.host.base_url, cfg.served_name, cfg.engine, prompts_file, out, top_k,
                       max_tokens, ref_file)
        )  # fmt: skip
        try:
            doc: dict[str, Any] = json.loads(self.host._read(out))
        except (OSError, ValueError) as exc:
            raise TailpodError(f"the probe wrote no logprobs for {arm.label}: {exc}") from None
        return doc


class EndpointLogprobSource:
    """Running endpoints, one per arm (`--reference-url`, `--candidate-url`): nothing restarts;
    the probe runs on this machine."""

    def __init__(self, engine: str = "auto") -> None:
        self.engine = engine
        self._tmp = tempfile.TemporaryDirectory(prefix="tailpod-kl-")
        self.measured_from = "pod"

    def config_for(self, arm: KlArm) -> EngineConfig:
        return EngineConfig(engine=self.engine, model=arm.model)

    def serve(self, arm: KlArm) -> dict[str, Any]:
        from tailpod.probes.probe import measured_from

        if arm.url is None:
            raise ConfigError(f"arm {arm.label} has no URL")
        if measured_from(arm.url) != "pod":
            self.measured_from = "off-pod"
        return {"url": arm.url}

    def collect(
        self, arm: KlArm, prompts: list[dict[str, Any]], top_k: int, max_tokens: int,
        reference: dict[str, Any] | None,
    ) -> dict[str, Any]:  # fmt: skip
        assert arm.url is not None
        work = Path(self._tmp.name)
        tag = uuid.uuid4().hex
        prompts_file, out = work / f"prompts-{tag}.json", work / f"out-{tag}.json"
        prompts_file.write_text(json.dumps({"prompts": prompts}), encoding="utf-8")
        ref_file = None
        if reference is not None:
            ref_file = work / f"reference-{tag}.json"
            ref_file.write_text(json.dumps(reference), encoding="utf-8")
        args = probe_args(arm.url, None, self.engine, str(prompts_file), str(out), top_k,
                          max_tokens, str(ref_file) if ref_file else None)  # fmt: skip
        proc = subprocess.run(
            [sys.executable, str(PROBE_FILE), *args], capture_output=True, text=True, timeout=7200
        )
        if proc.returncode != 0 or not out.exists():
            tail = "\n    ".join(proc.stderr.strip().splitlines()[-8:])
            raise TailpodError(f"the probe failed for {arm.label} (exit {proc.returncode}):\n    {tail}")
        doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return doc


def kl_run_id(results_dir: Path, base: str) -> str:
    """`<base>-kl`, then `<base>-kl-2`, … so an earlier evaluation is never overwritten."""
    candidate, n = f"{base}-kl", 1
    while (results_dir / candidate / KL_FILE).exists() or (results_dir / candidate / "run.json").exists():
        n += 1
        candidate = f"{base}-kl-{n}"
    return candidate


def save_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(redact(json.dumps(data, indent=1, default=str)), encoding="utf-8")
    tmp.replace(path)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _arm_entry(arm: KlArm, cfg: EngineConfig, served: dict[str, Any]) -> dict[str, Any]:
    return {
        "label": arm.label,
        "engine_config": cfg.to_json(),
        "argv": served.get("argv") or [],
        "startup": served.get("startup"),
        "starts": [{"at": _now(), "startup_s": served.get("startup_s"), "purpose": "kl"}],
        "gate": None,
        "void": False,
        "void_reason": None,
        "restart_s": served.get("restart_s"),
    }


def _arm_summary(arm: KlArm, served: dict[str, Any], doc: dict[str, Any], file: str) -> dict[str, Any]:
    facts = (served.get("startup") or {}).get("facts") or {}
    return {
        "label": arm.label,
        "model": arm.model,
        "url": arm.url,
        "argv": served.get("argv"),
        "startup_s": served.get("startup_s"),
        "engine_version": facts.get("engine_version") or doc.get("server_version"),
        "served_model": doc.get("model"),
        "logprobs_file": file,
    }


def run_kl_eval(
    source: LogprobSource,
    arms: Sequence[KlArm],
    prompts: list[dict[str, Any]],
    run_dir: RunDirectory,
    ctx: RunContext,
    top_k: int = 20,
    max_tokens: int = 128,
    log: Log = print,
) -> dict[str, Any]:
    """Serve and score the reference (arms[0]), then every candidate; returns kl.json's content.

    kl.json is rewritten after each candidate, so an interruption keeps the finished ones.
    """
    if len(arms) < 2:
        raise ConfigError("the KL evaluation needs a reference and at least one candidate")
    if top_k < 1 or max_tokens < 1:
        raise ConfigError("--top-k and --max-tokens must be at least 1")
    reference_arm, candidates = arms[0], list(arms[1:])
    plan = SweepPlan(
        arms=[Arm(a.label, source.config_for(a)) for a in arms], concurrency=[1], reps=1,
        max_tokens=max_tokens, prompt_classes=sorted({str(p.get("class")) for p in prompts}),
        extend_k=False,
    )  # fmt: skip
    run = new_run(ctx, plan, source.measured_from)
    run["kind"] = "kl_eval"
    run["notes"].append(f"KL evaluation: results in {KL_FILE}; there are no throughput rows")
    doc: dict[str, Any] = {
        "schema_version": KL_SCHEMA_VERSION,
        "kind": "kl_eval",
        "run_id": ctx.run_id,
        "run_tag": ctx.run_tag,
        "tailpod_version": __version__,
        "created_at": run["created_at"],
        "finished_at": None,
        "provider": ctx.provider,
        "pod": run["pod"],
        "image": run["image"],
        "engine": {"name": ctx.engine, "version": ctx.engine_version},
        "measured_from": source.measured_from,
        "top_k": top_k,
        "max_tokens": max_tokens,
        "estimator": kl.ESTIMATOR,
        "method": None,
        "prompts": [{"id": p.get("id"), "class": p.get("class")} for p in prompts],
        "reference": None,
        "candidates": [],
        "notes": [],
    }

    def save() -> None:
        run["measured_from"] = doc["measured_from"] = source.measured_from
        run["engine"]["version"] = doc["engine"]["version"]
        run_dir.save(run)
        save_json(run_dir.path / KL_FILE, doc)

    log(f"serving the reference {reference_arm.model}")
    served = source.serve(reference_arm)
    run["arms"].append(_arm_entry(reference_arm, source.config_for(reference_arm), served))
    ref_doc = source.collect(reference_arm, prompts, top_k, max_tokens, None)
    file = "logprobs-reference.json"
    save_json(run_dir.path / file, ref_doc)
    summary = _arm_summary(reference_arm, served, ref_doc, file)
    positions = sum(len(p.get("positions") or []) for p in ref_doc.get("prompts", []))
    doc["reference"] = {**summary, "positions": positions, **kl.reference_self_agreement(ref_doc)}
    doc["method"] = ref_doc.get("method")
    doc["engine"]["version"] = doc["engine"]["version"] or summary["engine_version"]
    if positions == 0:
        raise TailpodError("the reference produced no tokens to score")
    save()
    slim = slim_reference(ref_doc)
    for arm in candidates:
        log(f"serving candidate {arm.label}: {arm.model}")
        served = source.serve(arm)
        run["arms"].append(_arm_entry(arm, source.config_for(arm), served))
        cand_doc = source.collect(arm, prompts, top_k, max_tokens, slim)
        file = f"logprobs-{arm.label}.json"
        save_json(run_dir.path / file, cand_doc)
        result = {
            **_arm_summary(arm, served, cand_doc, file),
            "top_k": top_k,
            "estimate": "lower bound (top-k coarsened KL; docs/kl-eval.md)",
            **kl.compare(ref_doc, cand_doc),
        }
        if any(d.get("tokenizer_match") is False for d in result["first_divergence"]):
            doc["notes"].append(f"{arm.label}: its tokenizer splits some prompts differently")
        doc["candidates"].append(result)
        save()
        log(f"  {arm.label}: {describe(result)}")
    doc["finished_at"] = run["finished_at"] = _now()
    save()
    return doc


def describe(result: dict[str, Any]) -> str:
    k = result["kl"]
    agree = result["top1_agreement"]
    mean = "—" if k["mean"] is None else f"{k['mean']:.4g}"
    inf = f" (+{k['infinite']} infinite)" if k["infinite"] else ""
    return (
        f"KL mean {mean}{inf}, top-1 agreement "
        f"{'—' if agree is None else f'{agree:.1%}'}, "
        f"{result['diverged_prompts']}/{result['prompts']} prompts diverge greedily"
    )


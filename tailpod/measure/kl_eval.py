"""The KL evaluation, laptop side: serve the reference and each candidate in turn, score them on the
same tokens, and write `kl.json` into a run directory.

Collection happens where the engine runs: the agent's `probe logprobs` is run on the pod (as every other
measurement), against 127.0.0.1. The reference goes first: its greedy continuation of every prompt,
then its own top-k logprobs on that continuation (teacher forcing). Each candidate is then served
on the same pod (the engine relaunched with `--model` = candidate) and scored on THE SAME token
sequence through the same request path, plus its own greedy continuation for the first greedy
divergence. The math is `tailpod.results.kl`; the format is in docs/kl-eval.md.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from tailpod import __version__
from tailpod.agent.probes.basics import PROBE_ENGINES
from tailpod.agent_client.driver import PodAgent
from tailpod.config import Settings, run_path
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.hosts import AgentSweepHost
from tailpod.measure.plan import Arm, SweepPlan
from tailpod.measure.sweep import RunContext, RunDirectory, new_run
from tailpod.results import kl
from tailpod.results.kl import KL_FILE
from tailpod.secrets import redact

KL_SCHEMA_VERSION = 1
PROMPTS_FILE = Path(__file__).with_name("kl_prompts.json")
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


def logprobs_request(
    base_url: str, model: str | None, engine: str, prompts: list[dict[str, Any]], top_k: int,
    max_tokens: int, reference: dict[str, Any] | None,
) -> dict[str, Any]:  # fmt: skip
    """`probe logprobs`'s input (docs/agent.md)."""
    return {
        "base_url": base_url, "model": model, "prompts": prompts, "reference": reference,
        "top_k": top_k, "max_tokens": max_tokens,
        "engine": engine if engine in PROBE_ENGINES else "auto",
    }  # fmt: skip


def collected(agent: PodAgent, label: str, request: dict[str, Any]) -> dict[str, Any]:
    doc = agent.logprobs(request).get("logprobs")
    if not isinstance(doc, dict):
        raise TailpodError(f"the probe returned no logprobs for {label}")
    return doc


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

    def __init__(self, host: AgentSweepHost, base: EngineConfig, top_k: int) -> None:
        self.host = host
        self.base = replace(with_max_logprobs(base, top_k), spec=SpecArm())
        self.measured_from = host.measured_from

    def config_for(self, arm: KlArm) -> EngineConfig:
        return replace(self.base, model=arm.model)

    def serve(self, arm: KlArm) -> dict[str, Any]:
        t0 = time.time()
        start = self.host.restart(Arm(arm.label, self.config_for(arm)))
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
        cfg = self.config_for(arm)
        self.host.keep_alive()
        request = logprobs_request(self.host.base_url, cfg.served_name, cfg.engine, prompts,
                                   top_k, max_tokens, reference)  # fmt: skip
        return collected(self.host.measurer, arm.label, request)


class EndpointLogprobSource:
    """Running endpoints, one per arm (`--reference-url`, `--candidate-url`): nothing restarts;
    the probe runs on this machine (the agent as a child process)."""

    def __init__(self, engine: str = "auto") -> None:
        from tailpod.agent_client.driver import SubprocessTransport

        self.engine = engine
        self._tmp = tempfile.TemporaryDirectory(prefix="tailpod-kl-")
        self.agent = PodAgent(SubprocessTransport(Path(self._tmp.name)))
        self.measured_from = "pod"

    def config_for(self, arm: KlArm) -> EngineConfig:
        return EngineConfig(engine=self.engine, model=arm.model)

    def serve(self, arm: KlArm) -> dict[str, Any]:
        from tailpod.agent.probes.transport import measured_from

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
        request = logprobs_request(arm.url, None, self.engine, prompts, top_k, max_tokens,
                                   reference)  # fmt: skip
        return collected(self.agent, arm.label, request)


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


# -- `eval kl` on a running pod (what the verb calls) ---------------------------------------


def pod_context(record: PodRecord, run_id: str, reference: str) -> RunContext:
    """The run context of a KL evaluation on `record`'s pod (kl.json's provenance)."""
    base = EngineConfig.from_json(record.engine)
    return RunContext(
        run_id=run_id,
        run_tag=record.run_tag,
        provider=record.provider,
        model=reference,
        engine=base.engine,
        engine_version=(record.extra.startup or {}).get("facts", {}).get("engine_version"),
        gpu=record.gpu,
        gpu_count=record.gpu_count,
        price_per_hr=record.price_per_hr,
        image_ref=record.image,
        image_digest=(record.extra.image or {}).get("digest"),
    )


def kl_on_pod(
    settings: Settings,
    ledger: Ledger,
    record: PodRecord,
    reference: str | None,
    candidates: list[str],
    prompt_set: list[dict[str, Any]],
    top_k: int,
    max_tokens: int,
    run_id: str | None,
    restore: bool,
    say: Callable[[str], None],
    progress: Callable[[float, str], None] | None = None,
) -> dict[str, Any]:
    """`eval kl` on a running pod: the reference and each candidate served one after the other
    beside the pod's agent, kl.json written; with `restore`, the pod serves its original arm
    again afterwards (a relaunch, as any arm switch)."""
    from tailpod.measure import hosts

    if record.status != "running":
        raise ConfigError(f"{record.run_tag} is {record.status}, not running", hint="tailpod up")
    original = EngineConfig.from_json(record.engine)
    if original.engine not in PROBE_ENGINES:
        raise ConfigError(f"the KL evaluation needs vLLM or SGLang, not {original.engine}")
    arms = label_arms(reference or original.model, candidates)
    rid = run_id or kl_run_id(settings.results_dir, record.run_tag)
    ctx = pod_context(record, rid, arms[0].model)
    host = hosts.sweep_host(settings, ledger, record, progress, "cold", False)
    try:
        assert isinstance(host, AgentSweepHost)
        source = PodLogprobSource(host, original, top_k)
        doc = run_kl_eval(
            source, arms, prompt_set, RunDirectory(run_path(settings.results_dir, rid)), ctx, top_k,
            max_tokens, say,
        )  # fmt: skip
        if restore and EngineConfig.from_json(
            (ledger.get(record.run_tag) or record).engine
        ) != original:
            say(f"serving {original.model} again (--no-restore skips this)")
            host.restart(Arm(original.spec.label(), original))
    finally:
        host.close()
    return doc

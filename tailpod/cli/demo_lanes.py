"""`tailpod demo --lanes`: from a sweep to a serving decision, and the decision deployed and
measured, with no account (issue 30; docs/decide.md).

On a pod rented from the sandbox cloud (real sshd, the tailnet emulator, the CPU vLLM engine on
the tiny checkpoint): a sweep of plain against one ngram arm, `decide` over it (decision.json),
the two-lane deployment started on the pod (spec lane, plain lane after it, the token-identity
gate, HAProxy in front), measured as the arm `deploy-lanes` with the same cells beside the static
arms, `decide` again for the deployment's gap per band, the report, and `down` with its proof.
The run directory holds decision.json and lanes.json (the admission limit, each lane's request
count from HAProxy). When decide does not choose two lanes on this CPU, the demo still deploys
them, to show the mechanics, and says so: lanes-deployment.json holds what it deployed and why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tailpod.cli.common import console
from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord

FORCED_FILE = "lanes-deployment.json"

# What the numbers of this demo show and do not show (docs/decide.md, "What a CPU can and cannot
# show about lanes on a GPU"): appended to the run's report.md.
CPU_SECTION = """
## Lanes on a CPU: what these numbers do and do not show

This run is the sandbox cloud's pod serving the CPU build of vLLM on a tiny checkpoint built
offline; the GPU and the price the sandbox states were not rented. What it shows: the deployment
works as specified. The spec lane passed the token-identity gate against the plain lane before the
endpoint was served; HAProxy sent requests to the spec lane until it held the admission limit and
the rest to the plain lane (its per-lane counts are in lanes.json and on each `deploy-lanes` cell
row); both engines started one after the other with the KV budget each was given; `down` stopped
all three and proved the pod gone. `decide`'s rule, ties and deployment on these measured bands.

What it does not show: whether the deployment pays. Both lanes share the same few CPU cores, so a
request on one lane slows the other and their throughput does not add up; the crossover measured
here is the CPU's (ngram on a tiny model), not a GPU's; there is no GPU memory to split, so the KV
budget is host RAM and says nothing about two KV caches beside two copies of the weights in HBM;
interference between co-located lanes, a dynamic schedule's costs, and whether two lanes beat one
engine with a schedule are GPU questions. Read the `deploy-lanes` figures as "the deployment runs",
never as "the deployment is faster".
"""


def forced_lanes(decision: dict[str, Any], k: int, limit: int) -> dict[str, Any]:
    """The two-lane deployment the demo stands up when decide chose another one on this CPU."""
    chosen = decision.get("deployment") or {}
    return {
        "kind": "lanes", "admission_limit": limit,
        "admission_basis": f"the demo's choice (the lowest measured concurrency, c={limit})",
        "lanes": [{"name": "spec", "k": k, "method": "ngram", "maxconn": limit},
                  {"name": "plain", "k": 0, "method": None, "maxconn": None}],
        "forced_by_demo": True,
        "reason": (f"decide chose {chosen.get('kind')!r} ({chosen.get('arm') or '-'}: "
                   f"{chosen.get('reason') or 'no reason given'}) on this CPU; the demo deploys "
                   f"spec:{k},plain anyway to show the mechanics, not as the decision"),
    }  # fmt: skip


def _decide(run_dir: Path) -> dict[str, Any]:
    from tailpod.results.analysis import analyze
    from tailpod.results.decide import DECISION_FILE, compute, render
    from tailpod.results.io import load_run

    run = load_run(run_dir)
    dec = compute([run], "throughput", analyses=[analyze(run)])
    (run_dir / DECISION_FILE).write_text(json.dumps(dec, indent=2, sort_keys=True, default=str)
                                         + "\n")
    for line in render(dec):
        console.print(line, markup=False)
    return dec


def lanes_demo(settings: Settings, ledger: Ledger, cfg: EngineConfig, bench: dict[str, Any]
               ) -> Path:
    from tailpod.cli.demo_world import DEMO_GPUS, sandbox_settings

    with sandbox_settings(settings) as (cloud, sandbox):
        sandbox.add_fault("capacity", gpu=DEMO_GPUS[0])
        console.print(f"sandbox cloud: RunPod {sandbox.runpod_url}")
        run_dir = _on_the_pod(cloud, ledger, cfg, bench)
        meter = sandbox.meter()
        console.print(f"sandbox meter: {len(meter['billing_now'])} resources billing; "
                      f"${meter.get('total_accrued_usd', 0):.4f} accrued in total")
    return run_dir


def _on_the_pod(settings: Settings, ledger: Ledger, cfg: EngineConfig,
                bench: dict[str, Any]) -> Path:
    from tailpod.cli.benchmark import summary_table
    from tailpod.cli.pods import requirements_on_refusal, startup_progress
    from tailpod.cli.remote import evidence_table
    from tailpod.measure.deploy import deploy_arm, pod_deploying_host
    from tailpod.measure.hosts import sweep_host
    from tailpod.measure.plan import SweepPlan, spec_arms
    from tailpod.measure.sweep import RunContext, RunDirectory, run_sweep
    from tailpod.pods.base import UpOptions
    from tailpod.pods.kinds import kind_for
    from tailpod.results.report import write_report

    kind = kind_for(settings.provider)
    with startup_progress("up: rent, join the tailnet, start vLLM over SSH") as update, \
            requirements_on_refusal(settings.provider):
        record: PodRecord = kind.up(settings, cfg, ledger, update, UpOptions()).record
    console.print(f"[green]up[/] {record.run_tag}: {record.gpu} (sandbox), engine at "
                  f"{record.endpoint} (tailnet only)")
    k = max(bench["ks"])
    plan = SweepPlan(arms=spec_arms(cfg, sorted(set(bench["ks"]) | {0}), "ngram", None),
                     concurrency=bench["concurrency"], reps=1, max_tokens=bench["max_tokens"],
                     requests_per_cell=bench.get("requests_per_cell"), extend_k=False)
    run_dir = RunDirectory(settings.results_dir / record.run_tag)
    ctx = RunContext.for_pod(record, record.run_tag, cfg)
    log = console.print
    try:
        with startup_progress("sweep beside the engine, then the lanes") as update:
            host = sweep_host(settings, ledger, record, update)
            deploying = None
            try:
                run_sweep(plan, run_dir, host, ctx, log=log)
                console.rule("decide")
                decision = _decide(run_dir.path)
                deployment = decision.get("deployment") or {}
                if deployment.get("kind") != "lanes":
                    deployment = forced_lanes(decision, k, min(bench["concurrency"]))
                    (run_dir.path / FORCED_FILE).write_text(
                        json.dumps(deployment, indent=2, sort_keys=True) + "\n")
                    console.print(f"[bold yellow]note:[/] {deployment['reason']}")
                console.rule(f"the lanes on the pod: spec:{deployment['lanes'][0]['k']},plain, "
                             f"admission limit {deployment['admission_limit']}")
                plan.arms.append(deploy_arm(cfg, deployment, "ngram"))
                deploying = pod_deploying_host(settings, ledger, record, host, deployment)
                run_sweep(plan, run_dir, deploying, ctx, log=log)  # resumes: only deploy-lanes
            finally:
                (deploying or host).close()  # the lanes settled: final counts, each stopped
        console.rule("decide, with the deployment measured")
        _decide(run_dir.path)
        console.print(summary_table(run_dir.path, "demo --lanes (tok/s from server usage)"))
        report = write_report([run_dir.path])
        with report.open("a", encoding="utf-8") as fh:
            fh.write(CPU_SECTION)
        console.print(f"report: {report}")
    finally:
        current = ledger.get(record.run_tag) or record
        # a sweep that failed mid-lanes: the kind's down settles the lanes first
        evidence = kind.down(settings, ledger, current)  # raises unless proven
        console.print(evidence_table(evidence, f"down {record.run_tag}"))
    _print_lanes(run_dir.path)
    return run_dir.path


def _print_lanes(run_dir: Path) -> None:
    from tailpod.pods.lanes import LANES_FILE

    path = run_dir / LANES_FILE
    if not path.exists():
        console.print(f"[bold red]no {LANES_FILE}[/]: the lanes' counts were not recorded")
        return
    doc = json.loads(path.read_text())
    counts = ", ".join(f"{n} {row.get('requests')}" for n, row in doc["lanes"].items())
    console.print(f"lanes.json: admission limit {doc['admission_limit']}, requests per lane: "
                  f"{counts} (HAProxy's counts{'' if doc.get('counts_final') else ', NOT final'})")

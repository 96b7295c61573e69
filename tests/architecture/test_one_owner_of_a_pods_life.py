"""One owner of a pod's life (issue 37 items 1 and 11), checked from the code: a pod is downed one
way, through its kind (pods/base.py `settle_then_teardown`, the `down` of every kind), so nothing
outside pods/ calls the provider-level teardown of a held run itself, and no verb stops a pod or
deletes a run's storage in its own body (cli/ parses flags, calls one function and prints); and
no caller outside pods/ branches on where a kind's engine runs: it asks the kind."""

from __future__ import annotations

import ast
from pathlib import Path

import tailpod

PACKAGE = Path(tailpod.__file__).parent
REPO = PACKAGE.parent


def _files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _called_names(tree: ast.AST) -> list[tuple[str, int]]:
    """Every name a call is made through: `f(...)` and `x.f(...)` both give `f`."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                out.append((func.id, node.lineno))
            elif isinstance(func, ast.Attribute):
                out.append((func.attr, node.lineno))
    return out


def test_only_the_pod_kinds_tear_down_a_held_run() -> None:
    """`down_remote` (provision/teardown.py) is a kind's last step; `down --all` reaches it
    through each kind's `down`, never around it (the provider-level module used to down this
    machine's runs and your boxes itself)."""
    pods = PACKAGE / "pods"
    outside = [f"{path.relative_to(REPO)}:{line}"
               for path in _files() if pods not in path.parents
               for name, line in _called_names(ast.parse(path.read_text(encoding="utf-8")))
               if name == "down_remote"]
    assert outside == []



# What ends a pod or its storage; `volume rm NAME` is the one verb whose whole job is one of them.
STOPS = {"down_remote", "teardown", "teardown_many", "terminate", "terminate_with_retries",
         "delete_volume_proven", "settle_then_teardown", "stop_lanes"}


def test_no_verb_stops_a_pod_or_deletes_storage_in_its_own_body() -> None:
    """`down TAG --volumes` deleted the run's volumes in cli/volume.py's own loop; that loop is
    pods/down.py `down_storage` now, and only `volume rm` calls a delete itself."""
    cli = PACKAGE / "cli"
    calls = sorted((str(path.relative_to(REPO)), name)
                   for path in cli.glob("*.py")
                   for name, _line in _called_names(ast.parse(path.read_text(encoding="utf-8")))
                   if name in STOPS)
    assert calls == [("tailpod/cli/volume.py", "delete_volume_proven")]


# The card matrix's own steps: price the cards, take over a killed run, build and run it.
MATRIX_STEPS = {"MatrixRun", "take_over", "price_cards", "spent_so_far", "write_matrix_report",
                "refuse_cards_past_ttl"}
# A sweep host's arm switch (`eval kl --restore` serving the original arm again, in cli/eval.py
# until measure/kl_eval.py kl_on_pod took it); `up --relaunch` calls pods/arm_switch.py itself.
MEASURE_STEPS = {"restart"}
# How `benchmark` dressed its host, resumed a run and rented a lost spot pod's card again
# (measure/benchmark.py run_benchmark now).
BENCHMARK_STEPS = {"ServedLanesHost", "deploying_host", "StopAwareHost", "regate_on_new_pod",
                   "spot_preemption", "go_on_after_preemption",
                   "measure_through_preemptions", "preemption_entry"}


def test_no_verb_holds_a_step_of_the_matrix_or_of_a_sweep_host() -> None:
    """`tailpod matrix` priced, resumed, created and ran the matrix and wrote its report in
    cli/matrix.py, `eval kl` switched the pod's arm back itself, and `benchmark` built its host
    and regated a resumed run; those are measure/matrix_run.py `run_matrix`, measure/kl_eval.py
    `kl_on_pod` and measure/benchmark.py `run_benchmark` now."""
    cli = PACKAGE / "cli"
    calls = sorted((str(path.relative_to(REPO)), name)
                   for path in cli.glob("*.py")
                   for name, _line in _called_names(ast.parse(path.read_text(encoding="utf-8")))
                   if name in MATRIX_STEPS | MEASURE_STEPS | BENCHMARK_STEPS)
    assert calls == []


def test_no_caller_outside_pods_branches_on_where_the_engine_runs() -> None:
    """No caller chooses by where the engine runs (the kinds' `engine_here` flag, deleted once
    nothing read it): the sweep asks the kind for the
    session it keeps (`pod_session`), `logs` for its engine log (`engine_log`), `up`, `status`
    and the demo read what the record holds (its SSH address) instead of choosing by kind;
    `eval` asks whether it may start an engine itself (`starts_engine_when_none_held`) and
    `benchmark --deploy` where the lanes serve (`deploy_lanes_where`), where each branched on
    `engine_here` (cli/eval.py, measure/deploy.py)."""
    pods = PACKAGE / "pods"
    outside = {str(path.relative_to(REPO))
               for path in _files() if pods not in path.parents
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.Attribute) and node.attr == "engine_here"}
    assert outside == set(), sorted(outside)

"""The GPU the provider claims against what the pod reports: every run compares them, and a
mismatch or an emulated provider is stamped in run.json, `status`, the report header and every plot."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure
from typer.testing import CliRunner

from tailpod.agent.bootstrap.host_facts import machine_facts
from tailpod.cli.main import app
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.sweep import RunContext, RunDirectory, run_sweep
from tailpod.results import plots
from tailpod.results.hardware import hardware_check, recorded_or_computed, same_card
from tailpod.results.io import write_run
from tailpod.results.plots import PLOT_FILES
from tailpod.results.report import write_report
from tailpod.results.schema import PodDescription
from tests.unit.measure.test_sweep import ScriptedHost, make_plan
from tests.unit.results.conftest import build_run

CLAIM = "NVIDIA H100 80GB HBM3"
CPU = "AMD EPYC 7B13 64-Core Processor"


@pytest.fixture()
def pod_with_a_4090(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The pod's own facts as the on-pod runner gathers them, from an `nvidia-smi` that reports an
    RTX 4090 (a stand-in executable on PATH answering the exact query the runner makes)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        '[ "$1" = "--query-gpu=name,memory.total,driver_version" ] || exit 9\n'
        'echo "NVIDIA GeForce RTX 4090, 24564 MiB, 550.54.15"\n'
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    facts = machine_facts()
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA GeForce RTX 4090"]
    return facts


@pytest.mark.parametrize(
    ("claimed", "name", "memory", "same"),
    [
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe", "81920 MiB", True),
        ("RTX 4090", "NVIDIA GeForce RTX 4090", "24564 MiB", True),  # vast.ai's spelling
        ("RTX_4090", "NVIDIA GeForce RTX 4090", "24564 MiB", True),
        ("H100 SXM", "NVIDIA H100 80GB HBM3", "81559 MiB", True),
        ("A100 SXM4", "NVIDIA A100-SXM4-80GB", "81920 MiB", True),
        ("RTX 6000 Ada", "NVIDIA RTX 6000 Ada Generation", "49140 MiB", True),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-40GB", "40960 MiB", False),  # half the memory
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE", "40960 MiB", False),
        ("RTX 4090", "NVIDIA GeForce RTX 4080", "16376 MiB", False),
        ("L40", "NVIDIA L40S", "46068 MiB", False),
        ("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090", "24564 MiB", False),
    ],
)
def test_provider_names_against_nvidia_smi_names(
    claimed: str, name: str, memory: str, same: bool
) -> None:
    assert same_card(claimed, {"name": name, "memory": memory}) is same


def test_verdicts() -> None:
    h100 = {"gpus": [{"name": CLAIM, "memory": "81559 MiB"}], "cpu": CPU}
    assert hardware_check(CLAIM, 1, h100)["verdict"] == "match"
    assert hardware_check(CLAIM, 1, h100)["stamp"] is None
    two = hardware_check(CLAIM, 2, h100)  # billed for two, one is there
    assert two["verdict"] == "mismatch" and "2× NVIDIA H100" in two["stamp"]
    none = hardware_check(CLAIM, 1, {"gpus": [], "cpu": CPU})
    assert none["verdict"] == "mismatch" and f"no GPU (CPU: {CPU})" in none["stamp"]
    # the local provider claims no GPU: nothing to stamp
    assert hardware_check("local CPU", 0, {"gpus": [], "cpu": CPU})["stamp"] is None
    # a run written before the facts were recorded: unverified, said in the header, not stamped
    assert hardware_check(CLAIM, 1, {})["verdict"] == "unverified"


def test_emulated_provider_says_plainly_where_the_engine_ran() -> None:
    endpoint = "http://127.0.0.1:41234"
    check = hardware_check("NVIDIA A100 80GB PCIe", 1, {"gpus": [], "cpu": CPU}, emulated=True,
                           api_endpoint=endpoint)
    assert check["verdict"] == "emulated" and check["api_endpoint"] == endpoint
    assert check["stamp"] == (
        f"non-vendor API endpoint {endpoint}: provider claims unverified (it claimed 1× "
        f"NVIDIA A100 80GB PCIe); the engine ran on {CPU}; the cost figures are illustrative"
    )
    # a run.json written before the endpoint was recorded keeps the wording it was written with
    older = recorded_or_computed({"gpu": "NVIDIA A100 80GB PCIe", "gpu_count": 1,
                                  "machine": {"gpus": [], "cpu": CPU}, "emulated": True})
    assert older["stamp"].startswith("emulated provider (it claimed 1× NVIDIA A100")


def test_a_sweep_on_a_pod_that_is_not_the_claimed_card_is_stamped_in_run_json(
    tmp_path: Path, pod_with_a_4090: dict[str, Any]
) -> None:
    ctx = RunContext(run_id="r1", provider="runpod", model="/m", engine="vllm", gpu=CLAIM,
                     gpu_count=1, price_per_hr=2.99, machine=pod_with_a_4090)
    host = ScriptedHost({0: 10, 1: 15})
    run_sweep(make_plan([0, 1], extend=False), RunDirectory(tmp_path), host, ctx,
              log=lambda *_: None)
    pod = json.loads((tmp_path / "run.json").read_text())["pod"]
    check = pod["hardware_check"]
    assert check["verdict"] == "mismatch"
    assert check["claimed"] == {"gpu": CLAIM, "count": 1}
    assert check["reported"]["gpus"] == ["NVIDIA GeForce RTX 4090"]
    assert check["stamp"].startswith(f"GPU MISMATCH: the provider claims 1× {CLAIM}")


def _run_dir(tmp_path: Path, pod: PodDescription, run_id: str = "run") -> Path:
    run = build_run({"plain": {1: [60.0, 61.0], 2: [110.0, 111.0]},
                     "ngram-k2": {1: [90.0, 91.0], 2: [150.0, 151.0]}}, price=2.99, run_id=run_id)
    run.meta.pod = pod
    return write_run(run, tmp_path / run_id)


@pytest.mark.parametrize("emulated", [False, True])
def test_report_header_and_every_plot_carry_the_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pod_with_a_4090: dict[str, Any],
    emulated: bool,
) -> None:
    # Written without a recorded check (as older runs are): the report makes the comparison itself.
    run_dir = _run_dir(tmp_path, PodDescription(gpu=CLAIM, gpu_count=1, price_per_hr=2.99,
                                                machine=pod_with_a_4090, emulated=emulated))
    # The stamp written out from the claim and the fake nvidia-smi's answer, not by the checker.
    if emulated:
        expected = (f"emulated provider (it claimed 1× {CLAIM}); the engine ran on "
                    "1× NVIDIA GeForce RTX 4090; the cost figures are illustrative")
    else:
        expected = (f"GPU MISMATCH: the provider claims 1× {CLAIM}, the pod reports "
                    "1× NVIDIA GeForce RTX 4090; the throughput and cost figures are not the "
                    "claimed card's")
    figures: list[Figure] = []
    real_close = plt.close

    def keep(fig: Any = None) -> None:
        if isinstance(fig, Figure):
            figures.append(fig)
        real_close(fig)

    monkeypatch.setattr(plots.plt, "close", keep)
    report = write_report([run_dir]).read_text()
    header = report.split("## Arms")[0]
    assert f"> **{expected}**" in header
    assert "NVIDIA GeForce RTX 4090 (" + ("emulated" if emulated else "mismatch") + ")" in header
    assert len(figures) == len(PLOT_FILES)
    for fig in figures:
        assert any(expected in t.get_text() for t in fig.texts), fig


def test_a_comparison_names_the_run_whose_pod_was_not_the_claimed_card(
    tmp_path: Path, pod_with_a_4090: dict[str, Any]
) -> None:
    h100 = {"gpus": [{"name": CLAIM, "memory": "81559 MiB", "driver": "550"}], "cpu": CPU}
    good = _run_dir(tmp_path, PodDescription(gpu=CLAIM, gpu_count=1, machine=h100), "good")
    bad = _run_dir(tmp_path, PodDescription(gpu=CLAIM, gpu_count=1, machine=pod_with_a_4090),
                   "bad")
    header = write_report([good, bad]).read_text().split("|")[0]
    assert "> **bad: GPU MISMATCH" in header and "good:" not in header


def test_a_matching_pod_is_not_stamped(tmp_path: Path) -> None:
    machine = {"gpus": [{"name": CLAIM, "memory": "81559 MiB", "driver": "550"}], "cpu": CPU}
    run_dir = _run_dir(tmp_path, PodDescription(gpu="H100 SXM", gpu_count=1, price_per_hr=2.99,
                                                machine=machine))
    report = write_report([run_dir]).read_text()
    assert "MISMATCH" not in report and "emulated" not in report
    assert f"{CLAIM} (match)" in report


def test_status_marks_a_pod_that_is_not_the_claimed_card(
    tailpod_home: Path, pod_with_a_4090: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The table's GPU column unwrapped. The console read COLUMNS when tailpod.cli.common was first
    # imported (by whichever test came first), so the width is set on the console itself.
    from tailpod.cli import common

    monkeypatch.setattr(common.console, "_width", 300)
    Ledger(tailpod_home).put(PodRecord(
        run_tag="tp-mismatch", provider="local", status="running", gpu=CLAIM, gpu_count=1,
        price_per_hr=2.99, extra={"machine": pod_with_a_4090},
    ))  # fmt: skip
    runner = CliRunner()
    as_json = runner.invoke(app, ["status", "--json", "--no-beat"])
    assert as_json.exit_code == 0, as_json.output
    row = json.loads(as_json.stdout)["pods"][0]
    assert row["hardware"]["verdict"] == "mismatch"
    text = runner.invoke(app, ["status", "--no-beat"])
    assert text.exit_code == 0, text.output
    flat = " ".join(text.output.split())
    assert "(MISMATCH)" in flat and "GPU MISMATCH: the provider claims 1× NVIDIA H100" in flat


def test_status_reads_on_an_80_column_terminal(
    tailpod_home: Path, pod_with_a_4090: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eleven columns do not fit 80: each pod is a block of `key value` lines instead, with the
    run tag and every value whole (the wide table wrapped every header and cut the tag)."""
    from tailpod.cli import common

    monkeypatch.setattr(common.console, "_width", 80)
    Ledger(tailpod_home).put(PodRecord(
        run_tag="tp-20261201-191311-1101f2", provider="local", status="running", gpu=CLAIM,
        gpu_count=1, price_per_hr=2.99, extra={"machine": pod_with_a_4090},
    ))  # fmt: skip
    text = CliRunner().invoke(app, ["status", "--no-beat"])
    assert text.exit_code == 0, text.output
    lines = [line.strip() for line in text.output.splitlines()]
    assert max(len(line) for line in text.output.splitlines()) <= 80
    assert "tailpod pod tp-20261201-191311-1101f2" in lines
    assert ["provider", "local"] in [line.split() for line in lines]
    assert ["$/hr", "2.990"] in [line.split() for line in lines]
    assert any(line.startswith("GPU ") for line in lines)
    assert "(MISMATCH)" in " ".join(text.output.split())

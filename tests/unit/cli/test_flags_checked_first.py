"""Input checked before any wait and any write (issue 26, work item 4): a bad flag of `benchmark`,
`matrix`, `check-requirements` or `report` is refused with exit 2, naming the flag, before the
ledger, an SSH wait, a provider, the registry or a file write is reached."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli import benchmark as benchmark_cli
from tailpod.cli import matrix as matrix_cli
from tailpod.cli.main import app
from tailpod.errors import ConfigError


class Reached(Exception):
    pass


@pytest.fixture()
def no_pod_contact(monkeypatch: pytest.MonkeyPatch, tailpod_home: Path) -> list[str]:
    """Every way `benchmark` reaches the ledger or a pod, recorded (and stopped there)."""
    reached: list[str] = []

    def stop(what: str):  # type: ignore[no-untyped-def]
        def f(*_a: object, **_k: object) -> None:
            reached.append(what)
            raise ConfigError(f"{what} reached: the bad value got past the checks")
        return f

    monkeypatch.setattr(benchmark_cli, "ledger_for", stop("ledger"))
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", stop("ssh wait"))
    monkeypatch.setattr("tailpod.measure.sweep.run_sweep", stop("sweep"))
    return reached


@pytest.mark.parametrize(("flags", "named"), [
    (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", "1,,2"], "--concurrency"),
    (["--concurrency", "1,-4"], "--concurrency"),
    (["--concurrency", ","], "--concurrency"),
    (["--concurrency", "one"], "--concurrency"),
    (["--spec-k", "0,,2"], "--spec-k"),
    (["--prompt-classes", "poetry"], "poetry"),
    (["--prompt-classes", "prose,cod"], "cod"),
    (["--max-k", "0"], "--max-k"),
    (["--requests-per-cell", "0"], "--requests-per-cell"),
])
def test_benchmark_refuses_a_bad_flag_before_the_ledger_and_the_ssh_wait(
        no_pod_contact: list[str], flags: list[str], named: str) -> None:
    result = CliRunner().invoke(app, ["benchmark", "tp-x", *flags])
    assert result.exit_code == 2, result.output
    assert named in result.output
    assert no_pod_contact == [], result.output


def test_benchmark_good_flags_do_reach_the_ledger(no_pod_contact: list[str]) -> None:
    """The fixture really sees the ledger being reached (so the test above can fail)."""
    result = CliRunner().invoke(app, ["benchmark", "tp-x", "--concurrency", "1,2,4",
                                      "--prompt-classes", "prose,code,structured",
                                      "--max-k", "3", "--spec-k", "0,1,"])
    assert no_pod_contact == ["ledger"], result.output


@pytest.mark.parametrize(("flags", "named"), [
    (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", "2,,4"], "--concurrency"),
    (["--prompt-classes", "poetry"], "poetry"),
    (["--budget", "-5"], "--budget"),
    (["--budget", "nan"], "--budget"),
    (["--cell-minutes", "-1"], "--cell-minutes"),
])
def test_matrix_dry_run_refuses_a_bad_flag_before_pricing(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str],
        named: str) -> None:
    priced: list[object] = []
    monkeypatch.setattr(matrix_cli, "run_matrix", lambda *a, **k: priced.append(k))
    base = ["matrix", "--card", "runpod:NVIDIA A40", "--model", "org/m", "--engine", "vllm",
            "--image", "vllm/vllm-openai:v0.11.0", "--budget", "5", "--dry-run"]
    result = CliRunner().invoke(app, base + flags)
    assert result.exit_code == 2, result.output
    assert named in result.output
    assert "projected" not in result.output
    assert priced == []
    # the same command with good flags does get to the projection
    result = CliRunner().invoke(app, base)
    assert result.exit_code == 0, result.output
    assert len(priced) == 1


@pytest.mark.parametrize("price", ["-1", "0", "inf"])
def test_check_requirements_refuses_the_max_price_up_refuses(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch, price: str) -> None:
    import tailpod.preflight as preflight

    ran: list[object] = []
    monkeypatch.setattr(preflight, "run_preflight", lambda *a, **k: ran.append(a))
    result = CliRunner().invoke(app, ["check-requirements", "--provider", "runpod",
                                      "--max-price", price])
    assert result.exit_code == 2, result.output
    assert "--max-price" in result.output
    assert "$-1.00/h" not in result.output
    assert ran == []


def test_check_requirements_and_up_share_one_validator(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A problem the shared validator reports is the one check-requirements refuses with: a
    second, drifting validator would not print it."""
    import tailpod.cli.check as check_cli
    import tailpod.config as config

    monkeypatch.setattr(config, "run_settings_problems",
                        lambda s: ["planted problem from the one validator"])
    result = CliRunner().invoke(app, ["check-requirements", "--provider", "runpod"])
    assert result.exit_code == 2, result.output
    assert "planted problem from the one validator" in result.output
    assert check_cli.check_run_settings is config.check_run_settings

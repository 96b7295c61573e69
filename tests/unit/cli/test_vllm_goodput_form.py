"""vLLM's `--goodput ttft:500 tpot:50` (its `vllm bench serve` form, keys without `_ms`, values in
ms, spaces between) reads the same as tailpod's `--slo ttft_ms=500,tpot_ms=50` (newcomer 4.7)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tailpod.cli.benchmark import slo_spec
from tailpod.cli.main import app
from tailpod.errors import ConfigError


@pytest.mark.parametrize("text", ["ttft:500 tpot:50", "ttft:500,tpot:50", "ttft_ms=500,tpot_ms=50",
                                  " ttft:500  tpot_ms=50 "])
def test_both_forms_give_the_same_targets(text: str) -> None:
    assert slo_spec(text) == {"ttft_ms": 500.0, "tpot_ms": 50.0}


def test_e2el_and_a_refusal_that_names_both_forms() -> None:
    assert slo_spec("e2el:4000") == {"e2el_ms": 4000.0}
    with pytest.raises(ConfigError) as caught:
        slo_spec("itl:5")
    assert "ttft:MS tpot:MS e2el:MS" in caught.value.message
    with pytest.raises(ConfigError, match="names ttft_ms twice"):
        slo_spec("ttft:5 ttft_ms=6")


@pytest.mark.parametrize("command", [["benchmark"], ["decide", "no-such-run"]])
def test_goodput_is_an_option_name_of_the_commands_that_take_slo(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--goodput" in result.output

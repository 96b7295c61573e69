"""Every command's --help at 80 columns: whole option names, metavars a person can type,
groups in long commands, prose paragraphs, -h, completion and `tailpod help`."""

from __future__ import annotations

import re
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from tailpod.cli.main import app

ENV = {"COLUMNS": "80", "TERM": "dumb", "NO_COLOR": "1"}


def _walk(cmd: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    out = [(path, cmd)]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _walk(sub, [*path, name])
    return out


TREE = _walk(get_command(app), [])
PATHS = [path for path, _ in TREE]


def _help(args: list[str]) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env=ENV)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "tailpod")
def test_help_at_80_columns_keeps_every_option_whole(path: list[str]) -> None:
    out = _help(path)
    for line in out.splitlines():
        assert len(line) <= 80, line
    assert not re.search(r"-[\w-]*…", out), "a truncated option name"
    cmd = dict((tuple(p), c) for p, c in TREE)[tuple(path)]
    for param in cmd.params:
        if param.param_type_name != "option" or param.hidden:
            continue
        for name in [*param.opts, *param.secondary_opts]:
            assert re.search(re.escape(name) + r"(?![\w-])", out), f"{name} not shown whole"


PY_TYPES = re.compile(r"<(str|int|float|bool|path|Path|list\[[^\]]*\]|tuple\[[^\]]*\])>")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "tailpod")
def test_metavars_say_what_to_type(path: list[str]) -> None:
    out = _help(path)
    assert not PY_TYPES.search(out), PY_TYPES.search(out)
    usage = next(line for line in out.splitlines() if "Usage:" in line)
    # typer's own placeholders are lower-case parameter names in {} or [] (`{runs}...`)
    assert not re.search(r"[\[{][a-z_]+[\]}]", usage), usage
    assert "{" not in usage, usage


def test_named_metavars() -> None:
    up = _help(["up"])
    assert re.search(r"--max-price\s+USD/h", up)
    assert re.search(r"--gpu\s+GPU\s", up)
    bench = _help(["benchmark"])
    assert re.search(r"--spec-k\s+K,K,…", bench)
    assert "[TAG]" in bench
    assert re.search(r"RUN\.\.\.", _help(["report"]))
    # a flag takes no value: nothing between --json and its help
    assert re.search(r"--json\s{2,}Print", up)


@pytest.mark.parametrize("path", [p for p, c in TREE
                                  if sum(1 for x in c.params if x.param_type_name == "option"
                                         and not x.hidden) > 10],
                         ids=" ".join)
def test_long_commands_have_option_groups(path: list[str]) -> None:
    out = _help(path)
    panels = re.findall(r"╭─ ([^─]+) ─", out)
    option_panels = [p for p in panels if p.strip() not in ("Arguments", "Commands")]
    assert len(option_panels) >= 3, panels


def test_long_commands_exist() -> None:
    # the commands the issue names are the ones the group test above covers
    long = {" ".join(p) for p, c in TREE
            if sum(1 for x in c.params if x.param_type_name == "option") > 10}
    assert {"up", "benchmark", "matrix", "check-requirements"} <= long


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "tailpod")
def test_docstrings_have_no_hard_line_breaks(path: list[str]) -> None:
    cmd = dict((tuple(p), c) for p, c in TREE)[tuple(path)]
    for para in (cmd.help or "").split("\n\n"):
        assert "\n" not in para.strip(), para


def test_dash_h_is_help() -> None:
    for args in (["-h"], ["up", "-h"], ["eval", "kl", "-h"]):
        result = CliRunner().invoke(app, args, env=ENV)
        assert result.exit_code == 0, result.output
        assert "Usage: tailpod" in result.output


def test_completion_can_be_installed() -> None:
    out = _help([])
    assert "--install-completion" in out
    assert "--show-completion" in out


def test_help_command_shows_a_commands_help() -> None:
    result = CliRunner().invoke(app, ["help", "eval", "kl"], env=ENV)
    assert result.exit_code == 0, result.output
    assert result.output.rstrip() == _help(["eval", "kl"]).rstrip()
    bad = CliRunner().invoke(app, ["help", "nope"], env=ENV)
    assert bad.exit_code == 2
    assert "no such command" in bad.output


def test_no_forms_where_a_default_can_be_on() -> None:
    for path, flags in ((["check-requirements"], ["--no-allow-unpinned", "--no-allow-nonephemeral"]),
                        (["benchmark"], ["--no-serve-tax"]),
                        (["up"], ["--no-tailnet", "--no-allow-unpinned"])):
        out = _help(path)
        for flag in flags:
            assert flag in out, (path, flag)


def test_eval_kl_takes_the_tag_as_an_argument() -> None:
    out = _help(["eval", "kl"])
    assert "[TAG]" in out
    assert "--run-tag" not in out  # the old spelling still works, hidden
    cmd = dict((tuple(p), c) for p, c in TREE)[("eval", "kl")]
    assert any("--run-tag" in p.opts for p in cmd.params)
    both = CliRunner().invoke(app, ["eval", "kl", "a-tag", "--run-tag", "b-tag",
                                    "--candidate", "x"], env=ENV)
    assert both.exit_code == 2
    assert "two pods named" in both.output

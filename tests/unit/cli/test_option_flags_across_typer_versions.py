"""Every option keeps its `--name` and `-h` keeps working under the typers pyproject allows.

On the GPU image's typer (0.27.x), `checkpoint build --size gpu` was "No such option: --size
(Possible options: --seed)": typer 0.27's get_default_option_flag_name took the flag from a
metavar equal to the parameter's name (`metavar="SIZE"` made `--SIZE`); 0.28 reverted that.
And before 0.29, typer's TyperArgument had no `display_name_raw`, which helpfmt's panel
renderer read, so `-h` on any command with an argument was a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer import rich_utils
from typer.core import TyperArgument, TyperOption
from typer.main import get_command
from typer.models import OptionInfo
from typer.testing import CliRunner
from typer.utils import get_params_from_function

from tailpod.cli.helpfmt import install_panel_renderer
from tailpod.cli.main import app


def _commands(cmd: Any, path: list[str]) -> list[tuple[str, Any]]:
    out = [(" ".join(path), cmd)]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _commands(sub, [*path, name])
    return out


def test_no_declared_metavar_equals_its_option_name() -> None:
    """Under typer 0.27 such an option's flag is the metavar's spelling (`--SIZE`), not
    `--size`; the metavar belongs in cli/helpfmt.py (set after the flag is made) instead."""
    clashes = []
    for path, cmd in _commands(get_command(app), []):
        callback = getattr(cmd, "callback", None)
        if callback is None:
            continue
        for name, param in get_params_from_function(callback).items():
            info = param.default
            if not isinstance(info, OptionInfo) or info.param_decls or not info.metavar:
                continue
            if info.metavar.replace("_", "-").lower() == name.replace("_", "-").lower():
                clashes.append(f"{path} {name} (metavar {info.metavar!r})")
    assert clashes == []


def test_checkpoint_build_takes_size(tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    result = CliRunner().invoke(
        app, ["checkpoint", "build", str(out), "--kind", "mimo", "--size", "no-such-size"]
    )
    assert result.exit_code == 2, result.output
    assert "unknown size 'no-such-size'" in result.output
    assert not out.exists()


def test_the_checkpoint_help_names_size_with_its_metavar() -> None:
    result = CliRunner().invoke(app, ["checkpoint", "build", "--help"],
                                env={"COLUMNS": "80", "TERM": "dumb", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert "--size" in result.output and "SIZE" in result.output
    assert "--SIZE" not in result.output


def test_our_panels_draw_on_a_typer_without_display_name_raw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """typer before 0.29 has no `display_name_raw` (nor `display_type_rich` on options): the
    panels read only click's public parameter fields (cli/helpfmt.py), so `-h` of a command with
    an argument draws them there too, instead of the traceback it was."""
    monkeypatch.setattr(rich_utils, "_print_options_panel", rich_utils._print_options_panel)
    for cls, attr in ((TyperArgument, "display_name_raw"), (TyperOption, "display_type_rich")):
        owner = next((k for k in cls.__mro__ if attr in vars(k)), None)
        if owner is not None:
            monkeypatch.delattr(owner, attr)
    assert install_panel_renderer() is True
    result = CliRunner().invoke(app, ["down", "-h"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "TAG" in result.output and "--timeout" in result.output

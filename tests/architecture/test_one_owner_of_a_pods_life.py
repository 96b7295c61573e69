"""One owner of a pod's life (issue 37 items 1 and 11), checked from the code: a pod is downed one
way, through its kind (pods/base.py `settle_then_teardown`, the `down` of every kind), so nothing
outside pods/ calls the provider-level teardown of a held run itself."""

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

"""The pod agent runs with only `python3` (3.8+) on a pod image: every module of tailpod/agent/
imports only the standard library or its own package (relative imports), parses as Python 3.8,
and calls no standard-library API newer than 3.8."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests import paths

AGENT = paths.REPO / "tailpod" / "agent"
MODULES = sorted(AGENT.rglob("*.py"))
# Standard-library names that Python 3.8 lacks (3.9+), by attribute or keyword: a module that
# uses one parses on 3.8 and then fails on the pod.
NEWER_ATTRIBUTES = {"removeprefix", "removesuffix", "waitstatus_to_exitcode", "to_thread",
                    "is_relative_to", "with_stem", "randbytes", "lcm",
                    "bit_count", "pairwise", "TaskGroup", "ExceptionGroup"}
NEWER_MODULES = {"zoneinfo", "graphlib", "tomllib"}


def _rel(path: Path) -> str:
    return str(path.relative_to(AGENT.parent.parent))


def test_the_check_sees_the_whole_package() -> None:
    names = {p.relative_to(AGENT).as_posix() for p in MODULES}
    assert {"__main__.py", "verbs.py", "envelope.py", "bootstrap/guard.py",
            "bootstrap/deadman.py", "probes/transport.py", "probes/load.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_imports_only_the_standard_library_or_its_own_package(path: Path) -> None:
    outside = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            outside += [a.name for a in node.names
                        if a.name.split(".")[0] not in sys.stdlib_module_names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            assert node.module is not None
            if node.module.split(".")[0] not in sys.stdlib_module_names:
                outside.append(node.module)  # e.g. `from tailpod.agent import x`: not relative
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
            outside.append("__import__(...)")
    assert outside == []


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_parses_as_python_3_8_and_uses_no_newer_api(path: Path) -> None:
    source = path.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    newer = [n.attr for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and n.attr in NEWER_ATTRIBUTES]
    newer += [f"{n.func.id}(strict=...)" for n in ast.walk(tree)  # type: ignore[union-attr]
              if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "zip"
              and any(k.arg == "strict" for k in n.keywords)]
    newer += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
              if a.name.split(".")[0] in NEWER_MODULES]
    newer += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
              and (n.module or "").split(".")[0] in NEWER_MODULES]
    assert newer == []
    # PEP 604/585 annotations are fine on 3.8 only as strings, which the future import makes them
    if any(isinstance(n, (ast.FunctionDef, ast.AnnAssign, ast.AsyncFunctionDef))
           for n in ast.walk(tree)):
        assert "from __future__ import annotations" in source


def test_the_check_can_fail() -> None:
    bad = "import httpx\nfrom tailpod.config import Settings\nx = 'a'.removeprefix('b')\n"
    tree = ast.parse(bad)
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert [m for m in imported if m not in sys.stdlib_module_names] == ["httpx"]
    assert any(isinstance(n, ast.Attribute) and n.attr in NEWER_ATTRIBUTES for n in ast.walk(tree))
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n case 1: pass\n", feature_version=(3, 8))

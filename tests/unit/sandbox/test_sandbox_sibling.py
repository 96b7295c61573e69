"""The sandbox is a sibling of tailpod's production code, never consulted by it (issue 15 step 4).

Only the sandbox itself, its command (`tailpod sandbox serve`) and the demo, which runs the
lifecycle against it, may import `tailpod.sandbox`; nothing else may import it, name it in an
`importlib` string, or read the environment variable the sandbox once used to announce itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tailpod

PACKAGE = Path(tailpod.__file__).parent
SANDBOX = PACKAGE / "sandbox"
ALLOWED = {PACKAGE / "cli" / "sandbox.py", PACKAGE / "cli" / "demo.py", PACKAGE / "cli" / "demo_world.py",
           PACKAGE / "cli" / "demo_matrix.py"}


def _production_modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py"))
            if not p.is_relative_to(SANDBOX) and p not in ALLOWED]


def sandbox_references(source: str) -> list[int]:
    """Line numbers where `source` imports tailpod.sandbox (any form, at any depth) or names it
    in a string (importlib.import_module, __import__, a lazy-import table)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        if any(n == "tailpod.sandbox" or n.startswith("tailpod.sandbox.") for n in names):
            lines.append(node.lineno)
    return lines


def test_the_check_sees_every_import_form() -> None:
    assert sandbox_references("import tailpod.sandbox.cloud\n") == [1]
    assert sandbox_references("def f():\n    from tailpod.sandbox import world\n") == [2]
    assert sandbox_references("from tailpod import sandbox\n") == [1]
    assert sandbox_references("import importlib\nimportlib.import_module('tailpod.sandbox.x')\n")
    assert sandbox_references("from tailpod.cli import sandbox\nimport tailpod.sandboxes\n") == []


def test_no_production_module_imports_the_sandbox() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for path in _production_modules()
             for line in sandbox_references(path.read_text(encoding="utf-8"))]
    assert not found, f"production modules consult the sandbox: {found}"



def test_no_production_module_branches_on_a_sandbox_flag() -> None:
    found = [str(path.relative_to(PACKAGE.parent)) for path in _production_modules()
             if "TAILPOD_SANDBOX" in path.read_text(encoding="utf-8")]
    assert not found, f"production modules read TAILPOD_SANDBOX: {found}"


def test_no_production_module_recognises_the_sandbox_by_its_urls() -> None:
    """No loopback sniffing: whether tailpod talks to an emulator is never asked in production."""
    found = [str(path.relative_to(PACKAGE.parent)) for path in _production_modules()
             if any(word in path.read_text(encoding="utf-8")
                    for word in ("is_sandbox_url", "resolve_ssh_endpoint", "provider_is_emulated",
                                 "/sandbox/standin"))]
    assert not found, f"production modules recognise the sandbox: {found}"

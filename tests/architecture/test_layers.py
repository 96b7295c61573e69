"""The house plan, checked from the code: every import (function-level ones included) runs down the
layers of docs/architecture.md, no package imports one above it, and no modules import each other
in a circle. A reader can then tell from a file's folder which machine it runs on and what it may
use."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import tailpod

PACKAGE = Path(tailpod.__file__).parent

# Bottom to top. A module may import its own package and anything on a lower rank; the pod agent
# imports nothing of tailpod at all (tests/unit/agent/test_agent_stdlib.py).
RANKS: dict[str, int] = {
    "agent": 0,  # the pod side: stdlib only
    "errors": 0,
    "secrets": 1,
    "config": 2,
    "ledger": 3,
    "engines": 4,  # engine adapters, log parsers, checkpoints, images
    "agent_client": 5,  # the laptop's side of the pod agent: driver, zipapp build, pod layout
    "provision": 6,  # providers (clouds and your own box), tailnet, SSH; create, teardown, reconcile
    "results": 7,  # rows, analysis, reports (no network, no pods)
    "sandbox": 7,  # the emulated clouds; only the CLI (and tests) start them
    "preflight": 8,  # check-requirements
    "pods": 9,  # one pod protocol over cloud, local and SSH boxes; start command, dead-man control
    "measure": 10,  # plan, sweep, hosts, bare decode, KL, the card matrix
    "cli": 11,  # verbs only
}
ONLY_THE_CLI_IMPORTS = {"sandbox"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[tuple[str, int]]]:
    """module → {(imported tailpod module, line)}, every import statement anywhere in the file."""
    out: dict[str, set[tuple[str, int]]] = defaultdict(set)
    known = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    for path in PACKAGE.rglob("*.py"):
        mod = _module_name(path)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".")
                    base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                    parent = ".".join(base + ([node.module] if node.module else []))
                else:
                    parent = node.module or ""
                for alias in node.names:
                    sub = f"{parent}.{alias.name}"
                    targets.append(sub if sub in known else parent)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target.startswith("tailpod.") and target != mod:
                    out[mod].add((target, node.lineno))
    return out


def _package(module: str) -> str:
    return module.split(".")[1]


def test_every_package_has_a_rank() -> None:
    packages = {_package(_module_name(p)) for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or
                p.name != "__init__.py"}
    packages.discard("__main__")
    assert packages - set(RANKS) == set()


def test_imports_run_down_the_layers() -> None:
    upward = []
    for mod, targets in _imports().items():
        src = _package(mod) if mod.count(".") else "__init__"
        if src in ("__init__", "__main__"):
            continue
        for target, line in targets:
            dst = _package(target)
            if dst == src:
                continue
            if dst in ONLY_THE_CLI_IMPORTS and src != "cli":
                upward.append(f"{mod}:{line} -> {target} (only the CLI starts the sandbox)")
            elif RANKS[dst] >= RANKS[src]:
                upward.append(f"{mod}:{line} -> {target}")
    assert sorted(upward) == []


def _runtime_registry_edges() -> dict[str, set[str]]:
    """A package whose __init__ imports each of its modules by name at run time (a registry:
    `pkgutil.iter_modules(__path__)` + `importlib.import_module`, as results/sections does)
    imports every one of them: edges no import statement shows, where a circle can hide."""
    out: dict[str, set[str]] = defaultdict(set)
    for init in PACKAGE.rglob("__init__.py"):
        text = init.read_text(encoding="utf-8")
        if "pkgutil.iter_modules(__path__)" in text and "importlib.import_module" in text:
            pkg = _module_name(init)
            out[pkg] |= {f"{pkg}.{p.stem}" for p in init.parent.glob("*.py")
                         if p.name != "__init__.py"}
    return out


def test_no_modules_import_each_other_in_a_circle() -> None:
    """Run-time registry imports included (issue 37: analysis -> sections -> decision -> decide
    -> analysis hid behind importlib)."""
    graph = {mod: {t for t, _ in targets} for mod, targets in _imports().items()}
    for mod, targets in _runtime_registry_edges().items():
        graph.setdefault(mod, set()).update(targets)
    assert graph.get("tailpod.results.sections", set()) >= {"tailpod.results.sections.decision"}
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            # A package's __init__ only hands names on; importing it is importing those.
            if state.get(nxt) == 1:
                circles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod)
    assert circles == []

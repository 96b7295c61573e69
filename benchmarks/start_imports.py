#!/usr/bin/env python3
"""Which top-level packages an engine's start path imports, read from unpacked wheels (no import).

  start_imports.py TREE ROOT[,ROOT...] [--via PACKAGE...]

TREE holds the wheels of an engine's full resolve, unpacked side by side (`for w in *.whl; do
unzip -qo "$w" -d TREE; done`). From each ROOT module it follows the module-level imports (`import
a.b`, `from . import c`, `from a import submodule`) through every module found in TREE, and prints:

  needed    the top-level packages of TREE reached: the start path imports them
  guarded   those of TREE reached only through a guarded import
  outside   the top-level modules reached that TREE does not hold (the stdlib's are left out):
            the image's packages, or another platform's

An import does not count as needed inside a function or a class body's method, under `try` whose
`except` catches ImportError, ModuleNotFoundError, Exception or OSError (or in that `except`), under `with
contextlib.suppress(...)`, under `if TYPE_CHECKING`, or under an `if` whose test names another
platform (ROCm/HIP, NPU, MUSA, XPU, MPS, CPU, Blackwell/SM100, MLX), an `is_..._available()` check
or an environment variable (`envs.`, `get_bool_env_var`). An `if __name__ == "__main__"` body is
skipped. Other `if` branches count, both ways. It is a reading, not an import: a module that a
function imports while the server starts is not seen, so the roots should name the modules the
start reaches that way (the server, the scheduler, the model, the attention backend...).
benchmarks/gpu_sglang_wheels.txt was chosen with it; the device's import check settles it.

--via PACKAGE prints the chain of modules through which PACKAGE was first reached.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

OTHER_PLATFORM = re.compile(
    r"available|get_bool_env_var|envs\.|hip|npu|musa|xpu|mps|_cpu|is_cpu|blackwell|sm100|sm120|"
    r"mlx|rocm|aiter|hpu|gfx|amd|sagemaker",
    re.I,
)
GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError"}


class Tree:
    def __init__(self, root: Path) -> None:
        self.root = root

    def file(self, module: str) -> Path | None:
        base = self.root / module.replace(".", "/")
        for f in (base / "__init__.py", base.with_suffix(".py")):
            if f.is_file():
                return f
        return None

    def holds(self, top: str) -> bool:
        return (self.root / top).exists() or (self.root / f"{top}.py").exists()


def _elsewhere(test: ast.expr) -> bool:
    """An `if` test true only on another platform, with an optional package or a set variable."""
    if isinstance(test, ast.BoolOp):
        parts = [_elsewhere(v) for v in test.values]
        return all(parts) if isinstance(test.op, ast.Or) else any(parts)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return False
    return bool(OTHER_PLATFORM.search(ast.unparse(test)))


def _catches_import_errors(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(getattr(t, "id", getattr(t, "attr", "")) in GUARDS for t in types):
            return True
    return False


def imports_of(tree: Tree, module: str) -> list[tuple[str, bool]]:
    """(imported module, guarded) for each module-level import of MODULE."""
    f = tree.file(module)
    if f is None:
        return []
    try:
        body = ast.parse(f.read_text(errors="replace"), str(f)).body
    except SyntaxError:
        return []
    package = module if f.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(nodes: list[ast.stmt], guarded: bool) -> None:
        for n in nodes:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(n, ast.ClassDef):
                visit(n.body, guarded)
            elif isinstance(n, ast.Try):
                inner = guarded or _catches_import_errors(n)
                visit(n.body, inner)
                visit(n.orelse, inner)
                for h in n.handlers:  # a fallback runs only when the guarded import failed
                    visit(h.body, inner)
                visit(n.finalbody, guarded)
            elif isinstance(n, ast.If):
                test = ast.unparse(n.test)
                if "TYPE_CHECKING" in test or "__name__" in test:
                    continue
                if not _elsewhere(n.test):
                    visit(n.body, guarded)
                visit(n.orelse, guarded)
            elif isinstance(n, ast.With):
                visit(n.body, guarded or "suppress" in ast.unparse(n.items[0]))
            elif isinstance(n, ast.Import):
                found.extend((a.name, guarded) for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    anchor = package
                    for _ in range(n.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                found.append((base, guarded))
                found.extend((f"{base}.{a.name}", guarded) for a in n.names
                             if tree.file(f"{base}.{a.name}"))

    visit(body, False)
    return found


def walk(tree: Tree, roots: list[str]) -> tuple[dict[str, bool], dict[str, str], dict[str, bool]]:
    """Modules of TREE reached (name -> reached only guarded), how each was first reached, and
    the top-level modules outside TREE (name -> only guarded)."""
    reached: dict[str, bool] = {}
    via: dict[str, str] = {}
    outside: dict[str, bool] = {}
    stack = [(r, False, "") for r in roots]
    while stack:
        module, guarded, parent = stack.pop()
        top = module.split(".")[0]
        if not top:
            continue
        if not tree.holds(top):
            outside[top] = outside.get(top, True) and guarded
            continue
        parts = module.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            name = ".".join(parts[:i])
            if name in reached and (not reached[name] or guarded):
                continue
            if tree.file(name) is None:
                continue
            reached[name] = guarded
            via[name] = parent  # the path that settled it (an unguarded one wins)
            stack.extend((m, guarded or g, name) for m, g in imports_of(tree, name))
    return reached, via, outside


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree", type=Path)
    ap.add_argument("roots", help="comma-separated modules the start path imports")
    ap.add_argument("--via", nargs="*", default=[], help="print how these packages were reached")
    args = ap.parse_args(argv)
    if not args.tree.is_dir():
        print(f"{args.tree} is not a directory", file=sys.stderr)
        return 2
    tree = Tree(args.tree)
    reached, via, outside = walk(tree, [r.strip() for r in args.roots.split(",") if r.strip()])
    needed = sorted({m.split(".")[0] for m, g in reached.items() if not g})
    guarded = sorted({m.split(".")[0] for m in reached} - set(needed))
    print("needed: " + " ".join(needed))
    print("guarded: " + " ".join(guarded))
    stdlib = sys.stdlib_module_names
    print("outside: " + " ".join(sorted(t for t, g in outside.items()
                                        if not g and t not in stdlib and t != "__main__")))
    for package in args.via:
        first = min((m for m in reached if m.split(".")[0] == package), key=len, default=None)
        chain = []
        while first:
            chain.append(first)
            first = via.get(first, "")
        print(f"{package}: " + (" <- ".join(chain) if chain else "not reached"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

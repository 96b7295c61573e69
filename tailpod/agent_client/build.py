"""Laptop side of the pod agent: build `tailpod/agent/` into one deterministic zipapp, and minify
the agent's stage-0 guard into source for the pod's start command.

The zipapp is byte-for-byte a function of the agent's sources (sorted entries, fixed 1980-01-01
timestamps, fixed permissions, stored uncompressed so no zlib version can change a byte, no
__pycache__), so its sha256 names it: the driver uploads `agent-<sha256[:16]>.pyz` to a pod only
when that name is absent there. Run it as `python3 -I agent-<hash>.pyz <verb> ...`
(docs/agent.md).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import tempfile
import threading
import tokenize
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tailpod.agent.bootstrap.terminate import ALIASES, PROVIDERS, TERMINATE_ROUTES

AGENT_SOURCE = Path(__file__).resolve().parent.parent / "agent"
GUARD_SOURCE = AGENT_SOURCE / "bootstrap" / "guard.py"
PACKAGE = "agent"  # the package's name inside the archive
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
_SHEBANG = b"#!/usr/bin/env python3\n"
# CPython 3.11 keeps the AST constructor's recursion depth in state that threads share: two
# threads parsing at once (matrix cards renting in parallel, each minifying its guard) can fail
# with "SystemError: AST constructor recursion depth mismatch" (seen here on 3.11.7; see
# https://github.com/python/cpython/issues/106905). tailpod's own AST work takes turns.
_AST_LOCK = threading.Lock()
_MAIN = b"""import sys
from agent.verbs import main
sys.exit(main())
"""


@dataclass(frozen=True)
class AgentArchive:
    path: Path
    sha256: str

    @property
    def name(self) -> str:
        """The file name on the pod: the content hash, so an upload is needed only once."""
        return f"agent-{self.sha256[:16]}.pyz"


def _sources(source: Path) -> list[tuple[str, bytes]]:
    """(name in the archive, bytes) of every package file, sorted; no caches, no dotfiles."""
    entries = []
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
            continue
        if any(part.startswith(".") for part in rel.parts):
            continue
        entries.append((f"{PACKAGE}/{rel.as_posix()}", path.read_bytes()))
    return entries


def agent_zip_bytes(source: Path = AGENT_SOURCE) -> bytes:
    """The zipapp's bytes: the same sources give the same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in [("__main__.py", _MAIN), *_sources(source)]:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = (0o100644 << 16)  # a regular file, rw-r--r--
            info.create_system = 3  # Unix, whatever the building machine
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, data)
    return _SHEBANG + buffer.getvalue()


def build_agent(cache_dir: Path | None = None, source: Path = AGENT_SOURCE) -> AgentArchive:
    """Build the zipapp into `cache_dir` (default: the system temp dir's tailpod-agent/) under
    its content hash; an archive already there with that name is reused."""
    data = agent_zip_bytes(source)
    sha = hashlib.sha256(data).hexdigest()
    directory = cache_dir or Path(tempfile.gettempdir()) / "tailpod-agent"
    directory.mkdir(parents=True, exist_ok=True)
    archive = AgentArchive(directory / f"agent-{sha[:16]}.pyz", sha)
    if not archive.path.is_file() or hashlib.sha256(archive.path.read_bytes()).hexdigest() != sha:
        tmp = archive.path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o644)
        tmp.replace(archive.path)
    return archive


# -- the stage-0 guard ------------------------------------------------------------------------------
class _StripDocstrings(ast.NodeTransformer):
    def _strip(self, node: ast.AST) -> ast.AST:
        body = getattr(node, "body", None)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
        self.generic_visit(node)
        return node

    visit_Module = visit_FunctionDef = _strip  # noqa: N815 - ast.NodeTransformer's names


def _shorten_names(tree: ast.Module) -> None:
    """Rename every name the source binds itself (functions, parameters, variables, constants)
    to one or two letters; imported modules, builtins and attributes keep theirs."""
    bound: list[str] = []

    def bind(name: str) -> None:
        if name not in bound and not (name.startswith("__") and name.endswith("__")):
            bound.append(name)

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            bind(node.name)
            for arg in node.args.args:
                bind(arg.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bind(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bind(node.name)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    short = [*letters, *(a + b for a in letters for b in letters)]
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(bound)
    taken |= {alias.asname or alias.name.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, (ast.Import, ast.ImportFrom)) for alias in n.names}
    free = (s for s in short if s not in taken)
    rename = {name: next(free) for name in bound}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in rename:
            node.id = rename[node.id]
        elif isinstance(node, ast.FunctionDef):
            node.name = rename.get(node.name, node.name)
            for arg in node.args.args:
                arg.arg = rename.get(arg.arg, arg.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            node.name = rename.get(node.name, node.name)


def minify(source: str, constants: dict[str, object]) -> str:
    """`source` with each module-level `NAME = ...` in `constants` set to its value, without
    docstrings, comments, annotations of the future import, and with one-space indentation."""
    with _AST_LOCK:
        return _minify(source, constants)


def _minify(source: str, constants: dict[str, object]) -> str:
    tree = ast.parse(source)
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            node = ast.Assign([node.target], node.value or ast.Constant(None), lineno=node.lineno)
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in constants:
            node.value = ast.parse(repr(constants[node.targets[0].id]), mode="eval").body
        body.append(node)
    tree.body = body
    for any_node in ast.walk(tree):  # annotations cost characters and mean nothing at run time
        if isinstance(any_node, ast.FunctionDef):
            any_node.returns = None
            for arg in any_node.args.args:
                arg.annotation = None
    tree = ast.fix_missing_locations(_StripDocstrings().visit(tree))
    _shorten_names(tree)
    _shorten_statements(tree)
    return _tight(ast.unparse(tree))


def _shorten_statements(tree: ast.Module) -> None:
    """One `import` line with dotted modules aliased (`urllib.request as U`), `while 1`, and the
    `if __name__ == "__main__":` body unwrapped (`python -c` always runs as __main__)."""
    imports = [n for n in tree.body if isinstance(n, ast.Import)]
    aliases: dict[str, str] = {}
    for alias in [a for n in imports for a in n.names]:
        if "." in alias.name and not alias.asname:
            alias.asname = aliases[alias.name] = "U" if not aliases else f"U{len(aliases)}"
    rest = [n for n in tree.body if not isinstance(n, ast.Import)]
    last = rest[-1] if rest else None
    if isinstance(last, ast.If) and "__main__" in ast.unparse(last.test):
        rest = rest[:-1] + last.body
    tree.body = ([ast.Import([a for n in imports for a in n.names])] if imports else []) + rest

    class Rewrite(ast.NodeTransformer):
        def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
            dotted = ast.unparse(node)
            if dotted in aliases:
                return ast.Name(aliases[dotted], ast.Load())
            self.generic_visit(node)
            return node

        def visit_While(self, node: ast.While) -> ast.AST:
            if isinstance(node.test, ast.Constant) and node.test.value is True:
                node.test = ast.Constant(1)
            self.generic_visit(node)
            return node

    ast.fix_missing_locations(Rewrite().visit(tree))


def _tight(code: str) -> str:
    """Python source with one-space indentation and a space between two tokens only where two
    words would otherwise run together."""
    out: list[str] = []
    prev = ""
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type in (tokenize.NEWLINE, tokenize.NL):
            out.append("\n")
            prev = ""
        elif tok.type == tokenize.INDENT or tok.type == tokenize.DEDENT:
            continue
        elif tok.type == tokenize.ENDMARKER:
            break
        else:
            if not prev:
                out.append(" " * (tok.start[1] // 4))
            elif (prev[-1].isalnum() or prev[-1] == "_") and (
                    tok.string[0].isalnum() or tok.string[0] in "_'\""):
                out.append(" ")
            out.append(tok.string)
            prev = tok.string
    return "".join(out)


def provider_name(provider: str) -> str:
    """The pod side's provider name for tailpod's ("vast" is accepted too)."""
    name = ALIASES.get(provider.lower())
    if name is None:
        raise ValueError(f"no pod-side termination for provider {provider!r}")
    return name


@functools.cache  # the same guard for every card of a matrix: built once
def guard_code(provider: str, poll_s: float = 30.0, retry_s: float = 5.0) -> str:
    """guard.py for `provider`, minified: its credential variables and termination routes from
    the agent's one termination table (terminate.py)."""
    name = provider_name(provider)
    facts = PROVIDERS[name]
    return minify(GUARD_SOURCE.read_text(encoding="utf-8"), {
        "CREDENTIAL_ENV": (facts["id_env"], facts["key_env"]),
        "ROUTES": [list(route) for route in TERMINATE_ROUTES[name]],
        "POLL_S": float(poll_s),
        "RETRY_S": float(retry_s),
    })

"""benchmarks/start_imports.py, which chose benchmarks/gpu_sglang_wheels.txt: a package counts as
needed only when a module-level import on the start path reaches it unguarded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import paths

SCRIPT = paths.REPO / "benchmarks" / "start_imports.py"

ENGINE = {
    "eng/__init__.py": "",
    "eng/server.py": """
import sys
import plainpkg
from . import helpers
from eng.models import llama

try:
    import trypkg
except ImportError:
    import fallbackpkg

import contextlib
with contextlib.suppress(ImportError):
    import suppresspkg

if _is_hip or _use_aiter:
    import rocmpkg
if _is_cuda and not _is_npu:
    import cudapkg
if _is_hip or _is_cuda:
    import orpkg
if is_fancy_available():
    import fancypkg
if envs.SGLANG_USE_MODELSCOPE.get():
    import envpkg
if TYPE_CHECKING:
    import typingpkg
if __name__ == "__main__":
    import mainpkg

def start():
    import lazypkg

class Server:
    import classpkg
    def run(self):
        import methodpkg
""",
    "eng/helpers.py": "import chainpkg\n",
    "eng/models/__init__.py": "",
    "eng/models/llama.py": "import imagepkg\n",
    "eng/unreached.py": "import neverpkg\n",
    "chainpkg/__init__.py": "from .deep import x\n",
    "chainpkg/deep.py": "import deeppkg\nx = 1\n",
}
PACKAGES = ["plainpkg", "orpkg", "trypkg", "fallbackpkg", "suppresspkg", "rocmpkg", "cudapkg", "fancypkg",
            "envpkg", "typingpkg", "mainpkg", "lazypkg", "classpkg", "methodpkg", "deeppkg",
            "neverpkg"]


def _walk(tmp_path: Path, roots: str) -> dict[str, list[str]]:
    for rel, text in ENGINE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for name in PACKAGES:  # every imported package is in the tree, except imagepkg
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), roots, "--via", "deeppkg",
                          "trypkg"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    return {k: v.split(" <- ") if k.endswith("pkg") else v.split() for k, v in lines.items()}


def test_needed_guarded_and_outside_packages_of_a_start_path(tmp_path: Path) -> None:
    found = _walk(tmp_path, "eng.server")
    assert found["needed"] == sorted(["eng", "plainpkg", "chainpkg", "deeppkg", "cudapkg",
                                      "orpkg", "classpkg"])
    assert found["guarded"] == sorted(["trypkg", "fallbackpkg", "suppresspkg"])
    assert found["outside"] == ["imagepkg"]  # `sys` is the stdlib's, left out
    assert found["deeppkg"] == ["deeppkg", "chainpkg.deep", "chainpkg", "eng.helpers", "eng.server"]


def test_an_unguarded_path_wins_over_a_guarded_one(tmp_path: Path) -> None:
    ENGINE["eng/other.py"] = "import trypkg\n"
    try:
        found = _walk(tmp_path, "eng.other,eng.server")  # eng.server, with its `try`, walks first
    finally:
        del ENGINE["eng/other.py"]
    assert "trypkg" in found["needed"] and "trypkg" not in found["guarded"]
    assert found["trypkg"] == ["trypkg", "eng.other"]

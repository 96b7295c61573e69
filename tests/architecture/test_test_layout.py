"""The tests' tree says which package a unit test belongs to (docs/testing.md, "Where a test lives")."""

from __future__ import annotations

from tests import paths

UNIT = paths.TESTS / "unit"
KINDS = {"unit", "integration", "e2e", "architecture", "fixtures", "helpers", "__pycache__"}


def test_every_unit_folder_mirrors_a_tailpod_package() -> None:
    folders = [d for d in UNIT.rglob("*") if d.is_dir() and d.name != "__pycache__"]
    assert folders, "tests/unit has no package folders"
    strays = [str(d.relative_to(paths.TESTS)) for d in folders
              if not (paths.REPO / "tailpod" / d.relative_to(UNIT) / "__init__.py").exists()]
    assert strays == [], f"tests/unit folders with no tailpod package of that path: {strays}"


def test_tests_holds_only_the_four_kinds_of_test_folder() -> None:
    folders = {d.name for d in paths.TESTS.iterdir() if d.is_dir()}
    assert folders <= KINDS, f"test folders outside the layout: {sorted(folders - KINDS)}"


def test_no_folder_name_of_tailpod_is_used_twice() -> None:
    """A folder's name says which room it is; two folders of one name (as `prompts/` was, once on
    the pod and once on the laptop) make a reader guess which machine a file runs on."""
    seen: dict[str, list[str]] = {}
    for d in (paths.REPO / "tailpod").rglob("*"):
        if d.is_dir() and d.name != "__pycache__":
            seen.setdefault(d.name, []).append(str(d.relative_to(paths.REPO)))
    twice = {name: where for name, where in seen.items() if len(where) > 1}
    assert twice == {}, f"folder names used twice: {twice}"


def test_no_module_of_the_pod_agent_shares_a_name_with_one_of_the_laptop() -> None:
    """The agent (tailpod/agent, the pod side) and the laptop's packages name their modules apart
    (agent/cli.py beside the laptop's cli/ was one), so a file's name says which machine runs it."""
    tailpod = paths.REPO / "tailpod"
    agent = tailpod / "agent"
    generic = {"__init__", "__main__"}
    pod = {p.stem for p in agent.rglob("*.py")} - generic
    laptop = {p.stem for p in tailpod.rglob("*.py") if agent not in p.parents} - generic
    laptop |= {d.name for d in tailpod.rglob("*") if d.is_dir() and agent not in d.parents
               and d != agent}
    assert sorted(pod & laptop) == [], "pod and laptop modules of one name"

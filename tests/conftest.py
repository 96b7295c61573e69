from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _find_shared() -> Path | None:
    for candidate in (REPO.parent / "shared", REPO / "shared"):
        if (candidate / "reference").is_dir() or (candidate / "fixtures").is_dir():
            return candidate
    return None


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ../shared folder CI places beside the clone; tests that need it skip without it."""
    found = _find_shared()
    if found is None:
        pytest.skip("../shared is not beside this checkout")
    return found


@pytest.fixture()
def tailpod_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "tailpod-home"
    monkeypatch.setenv("TAILPOD_HOME", str(home))
    monkeypatch.setenv("TAILPOD_ENV_FILE", str(tmp_path / "absent.env"))
    return home

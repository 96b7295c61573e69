"""Each TAILPOD_HOME has an identity, generated once and kept in the home (or TAILPOD_HOME_ID),
carried in its run tags so a team's shared provider listing tells whose pod each is."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from tailpod.errors import ConfigError
from tailpod.ledger import HOME_ID_FILE, another_homes, home_id, new_run_tag, tag_home


def test_a_home_gets_one_id_generated_once_and_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert home_id(home, create=False) is None
    first = home_id(home)
    assert first is not None and re.fullmatch(r"[0-9a-f]{6}", first)
    assert home_id(home) == first and home_id(home, create=False) == first
    stored = home / HOME_ID_FILE
    assert stored.read_text().strip() == first
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert home_id(tmp_path / "another") != first


def test_tailpod_home_id_overrides_the_stored_id_and_is_checked(tmp_path: Path) -> None:
    assert home_id(tmp_path, "ci7") == "ci7"
    assert not (tmp_path / HOME_ID_FILE).exists()
    for bad in ("A", "has-dash", "x", "toolongforanid1"):
        with pytest.raises(ConfigError, match="TAILPOD_HOME_ID"):
            home_id(tmp_path, bad)


def test_a_damaged_home_id_file_is_refused_with_its_fix(tmp_path: Path) -> None:
    (tmp_path / HOME_ID_FILE).write_text("not an id!\n")
    with pytest.raises(ConfigError) as err:
        home_id(tmp_path)
    assert str(tmp_path / HOME_ID_FILE) in err.value.message


def test_a_run_tag_carries_its_home_and_an_old_tag_none() -> None:
    tag = new_run_tag("alice")
    assert re.fullmatch(r"tp-alice-\d{8}-\d{6}-[0-9a-f]{6}", tag)
    assert tag_home(tag) == "alice"
    assert tag_home(new_run_tag()) is None  # no id given: the old form
    assert tag_home("tp-20261201-120000-cccccc") is None
    assert tag_home("tp-orphan-1") is None and tag_home(None) is None
    assert tag_home("tp-20261201-20261201-120000-cccccc") == "20261201"


def test_only_a_tag_with_another_homes_id_is_anothers() -> None:
    assert another_homes("tp-bob-20261206-150100-bbbbbb", "alice")
    assert not another_homes("tp-alice-20261206-150100-bbbbbb", "alice")
    assert not another_homes("tp-20261206-150100-bbbbbb", "alice")  # older: this home's
    assert another_homes("tp-bob-20261206-150100-bbbbbb", None)  # this home has no id yet


def test_a_bad_tailpod_home_id_is_a_run_settings_problem_before_anything_rents(
        tmp_path: Path) -> None:
    from tailpod.config import Settings, run_settings_problems

    bad = run_settings_problems(Settings(home=tmp_path, home_id="Bad-Id"))
    assert any("TAILPOD_HOME_ID" in p and "'Bad-Id'" in p for p in bad)
    assert not any("TAILPOD_HOME_ID" in p
                   for p in run_settings_problems(Settings(home=tmp_path, home_id="ci7")))


def test_a_home_id_is_never_seen_empty_while_it_is_made(tmp_path, monkeypatch) -> None:
    """Clean-clone run at 843788f: two matrix cards made the home id at once, and one read the
    file between the other's create and its write: "home-id does not hold a home id ('')". The
    file now appears whole or not at all: a reader running at the moment it appears reads the
    id that is finally kept."""
    import os as _os

    import tailpod.ledger as ledger_mod

    home = tmp_path / "home"
    seen: list[str | None] = []
    real_link = _os.link

    def link_then_read(src: str, dst: str) -> None:
        real_link(src, dst)
        seen.append(ledger_mod.home_id(home, create=False))  # a second command, right then

    monkeypatch.setattr(ledger_mod.os, "link", link_then_read)
    made = ledger_mod.home_id(home)
    assert seen == [made]
    assert sorted(p.name for p in home.iterdir()) == ["home-id"]  # no temporary file left

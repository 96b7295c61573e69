"""Which first-contact fact decides (issue 37 item 10; preflight/first_contact.py): the image's
own result, whatever newer result another image of the same start form has; without one, the
newest result of an image sent the same form (never one of the other form); for the pod key's
self-kill, the newest result that learned it. Each case is built so that the wrong fact gives the
other verdict."""

from __future__ import annotations

import time
from pathlib import Path

from tailpod.config import load_settings
from tailpod.preflight.base import Status
from tailpod.preflight.first_contact import assess, met_for
from tailpod.provision.runpod import first_contact as fc

KEY = "rp_first_contact_key_0001"
IMAGE = "vllm/vllm-openai:v0.11.0"
NOW = time.time()


def _settings(home: Path):  # type: ignore[no-untyped-def]
    env = {"TAILPOD_HOME": str(home), "RUNPOD_API_KEY": KEY, "TAILPOD_PROVIDER": "runpod",
           "TAILPOD_IMAGE": IMAGE, "TAILPOD_TTL_HOURS": "4"}
    return load_settings(env=env, dotenv_path=home / "absent.env")


def _facts(image: str, age_s: float, form: str = "json", ran: bool | None = True,
           self_kill: bool | None = None) -> fc.FirstContactFacts:
    return fc.FirstContactFacts(account=fc.account_id(KEY), image=image,
                                checked_at=NOW - age_s, start_form=form,
                                start_command_ran=ran, pod_key_self_kill=self_kill)


def _newest_first(*facts: fc.FirstContactFacts) -> list[fc.FirstContactFacts]:
    return sorted(facts, key=lambda f: -f.checked_at)  # as facts_for gives them


def test_the_images_own_result_decides_over_a_newer_one_of_the_same_form(
        tailpod_home: Path) -> None:
    known = _newest_first(_facts("other/json-image:1", 10, ran=False), _facts(IMAGE, 3600))
    assert [f.image for f in met_for(known, IMAGE, "json")] == [IMAGE]
    found = assess(_settings(tailpod_home), known, IMAGE, "json")
    assert [s for s, _, _ in found.items] == [Status.PASS]


def test_without_its_own_the_newest_result_of_the_same_form_decides(tailpod_home: Path) -> None:
    known = _newest_first(_facts("a/json:1", 10, ran=False), _facts("b/json:1", 3600),
                          _facts("c/plain:1", 5, form="plain"))
    assert [f.image for f in met_for(known, IMAGE, "json")] == ["a/json:1", "b/json:1"]
    found = assess(_settings(tailpod_home), known, IMAGE, "json")
    ((status, text, fix),) = [i for i in found.items if i[0] is Status.FAIL]
    assert "seen with a/json:1, the same form" in text
    assert "b/json:1" in fix and "c/plain:1" in fix  # the images that ran here
    # a result of the other form never speaks for this image's form
    assert met_for(_newest_first(_facts("c/plain:1", 5, form="plain", ran=False)),
                   IMAGE, "json") == []
    # nor does any other image when the form is not known
    assert met_for(known, IMAGE) == []


def test_the_newest_self_kill_result_decides(tailpod_home: Path) -> None:
    settings = _settings(tailpod_home)
    # the newest that learned it refused the self-kill; an older one allowed it; the newest of
    # all learned nothing of it (its start command never ran)
    refused = _newest_first(_facts(IMAGE, 5, ran=None), _facts("a/json:1", 60, self_kill=False),
                            _facts("b/json:1", 3600, self_kill=True))
    statuses = [(s, t) for s, t, _ in assess(settings, refused, IMAGE, "json").items]
    assert any(s is Status.FAIL and "cannot delete its own pod" in t for s, t in statuses)
    allowed = _newest_first(_facts(IMAGE, 5, ran=None), _facts("a/json:1", 60, self_kill=True),
                            _facts("b/json:1", 3600, self_kill=False))
    statuses = [(s, t) for s, t, _ in assess(settings, allowed, IMAGE, "json").items]
    assert (Status.PASS, "the pod key deleted its own pod over REST v2") in statuses
    assert not any(s is Status.FAIL for s, _ in statuses)

"""Which first-contact fact decides (issue 37 item 10; preflight/first_contact.py): the image's
own result, whatever newer result another image of the same start form has; without one, the
newest result of an image sent the same form (never one of the other form); for the pod key's
self-kill, the newest result that learned it. Each case is built so that the wrong fact gives the
other verdict."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

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


# --- what each verdict says, word for word (what `up` and `check-requirements` print) -----------

W, P, F = Status.WARN, Status.PASS, Status.FAIL


def _settings_ttl(home: Path, ttl: str):  # type: ignore[no-untyped-def]
    env = {"TAILPOD_HOME": str(home), "RUNPOD_API_KEY": KEY, "TAILPOD_PROVIDER": "runpod",
           "TAILPOD_IMAGE": IMAGE, "TAILPOD_TTL_HOURS": ttl}
    return load_settings(env=env, dotenv_path=home / "absent.env")


def test_no_result_at_all_says_what_is_unverified(tailpod_home: Path) -> None:
    assert assess(_settings(tailpod_home), [], IMAGE).items == [(
        W, "the start form and the pod key's self-kill are not verified on this account (no "
           "vendor text settles them)",
        "`up` checks them itself before renting (a CPU pod, under a cent), or run "
        "`tailpod check-requirements --live` now")]


def test_the_words_of_a_start_form_that_ran_and_one_that_did_not(tailpod_home: Path) -> None:
    settings = _settings(tailpod_home)
    ran = [_facts(IMAGE, 10, form="plain"), _facts("b/plain:1", 20, form="plain")]
    # one verdict for the image even with two results of its form: its own, the newest
    assert assess(settings, ran, IMAGE, "plain").items == [
        (P, f"{IMAGE}: the plain start form ran (first contact within the hour)", "")]
    other = assess(settings, [_facts("b/plain:1", 20, form="plain")], IMAGE, "plain").items
    assert other == [(P, f"{IMAGE}: the plain start form ran (seen with b/plain:1, the same "
                         "form) (first contact within the hour)", "")]
    refused = assess(settings, [_facts(IMAGE, 10, ran=False)], IMAGE, "json").items
    assert refused == [(
        F, f"RunPod did not run tailpod's json start form with {IMAGE} on this account (first "
           "contact within the hour): a pod would bill until the boot wait ran out",
        "an image without an ENTRYPOINT (lmsysorg/sglang, runpod/pytorch) is started by a "
        "plain command line instead")]
    two_ran = [_facts(IMAGE, 10, ran=False), _facts("a/x:1", 20, form="plain"),
               _facts("b/y:1", 30, form="plain")]
    ((_, _, fix),) = assess(settings, two_ran, IMAGE, "json").items
    assert fix == "images that ran here: a/x:1, b/y:1"
    unnamed = assess(settings, [_facts("", 10, ran=False)], "", "json").items
    assert unnamed[0][1].startswith("RunPod did not run tailpod's json start form with this "
                                    "image on this account")


def test_the_words_of_an_image_first_contact_has_not_met(tailpod_home: Path) -> None:
    settings = _settings(tailpod_home)
    known = [_facts("a/x:1", 10, form="plain"), _facts("b/y:1", 20, form="plain")]
    assert assess(settings, known, IMAGE, "json").items == [(
        W, f"{IMAGE} has not met first contact on this account (verified: a/x:1, b/y:1)",
        "`up` checks it itself unless the same start form was verified; or run "
        "`tailpod check-requirements --live` with this image")]
    none_ran = [_facts("a/x:1", 10, form="plain", ran=False)]
    ((status, text, _),) = assess(settings, none_ran, "", "json").items
    assert (status, text) == (W, "this image has not met first contact on this account")


@pytest.mark.parametrize(("ttl", "status"), [("4", F), ("0.5", F), ("0", W)])
def test_the_words_of_a_refused_self_kill(tailpod_home: Path, ttl: str, status: Status) -> None:
    known = [_facts(IMAGE, 10, ran=None, self_kill=False)]
    known[0].self_kill_answers = ["DELETE /v2/pods/x 403", "POST /v2/pods/x/stop 403"]
    text = ("the pod-scoped key cannot delete its own pod over REST v2 (DELETE /v2/pods/x 403, "
            "POST /v2/pods/x/stop 403): the dead-man switch has no self-kill on this account")
    items = assess(_settings_ttl(tailpod_home, ttl), known, IMAGE, "json").items
    if status is F:
        assert items == [(F, text, "pass `--ttl-hours 0` to rent without a self-kill, knowing "
                                   "only `tailpod down` ends the pod")]
    else:
        assert items == [(W, text + "; accepted with --ttl-hours 0", "")]
    known[0].self_kill_answers = []
    (item,) = assess(_settings_ttl(tailpod_home, ttl), known, IMAGE, "json").items
    assert "over REST v2 (no answer):" in item[1]


def test_the_meter_line_of_the_newest_result_that_measured_it(tailpod_home: Path) -> None:
    known = [_facts(IMAGE, 10, ran=None), _facts("a/x:1", 20, ran=None),
             _facts("b/y:1", 30, ran=None)]
    known[1].meter_delay_s, known[1].meter_bound_s = 12.0, 30.0
    known[2].meter_delay_s, known[2].meter_bound_s = 99.0, 120.0
    items = assess(_settings(tailpod_home), known, IMAGE, "json").items
    assert items == [(P, "the meter showed spend 12 s after create", "")]


def test_two_results_of_the_same_form_give_one_verdict(tailpod_home: Path) -> None:
    known = [_facts("a/x:1", 10, form="plain"), _facts("b/y:1", 20, form="plain")]
    assert assess(_settings(tailpod_home), known, IMAGE, "plain").items == [
        (P, f"{IMAGE}: the plain start form ran (seen with a/x:1, the same form) (first "
            "contact within the hour)", "")]

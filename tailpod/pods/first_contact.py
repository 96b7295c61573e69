"""`up` meets first contact: the first time a RunPod account meets an image's start form, the
facts no vendor text settles are checked live on a CPU pod before any GPU rents (issue 25).

The start form follows the image's ENTRYPOINT (`json` where it must be replaced, `plain`
otherwise: provision/runpod/provider.py `start_form`); an account with a stored result for the
image, or for another image sent the same form, is not checked again. The check itself is
provision/runpod/first_contact.py (bounded, cost said before and after, the pod proven down);
what its results mean for this rent is preflight/first_contact.py `assess`, so `up` and
`check-requirements` refuse the same things with the same words.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tailpod.config import Settings
from tailpod.errors import ConfigError, TailpodError
from tailpod.preflight.base import Status
from tailpod.preflight.first_contact import assess, met_for
from tailpod.provision.providers import canonical_name

Say = Callable[[str], None]

SKIPPED = ("first contact skipped (--no-first-contact / TAILPOD_FIRST_CONTACT=off): whether "
           "RunPod runs tailpod's start form with this image and whether the pod key can "
           "delete its own pod stay unverified on this account; a start command the image "
           "swallows is caught only from the container log while the pod bills, a refused pod "
           "key leaves the dead-man switch without its self-kill, and the run records "
           "first_contact verified: false")


class FirstContactRefused(ConfigError):
    """What first contact found refuses this rent; nothing but the CPU probe was rented."""


def ensure_first_contact(settings: Settings, image: str, say: Say,
                         run: Callable[..., object] | None = None) -> str | None:
    """Before any GPU rents: run first contact when this account has no result for `image`'s
    start form, then refuse what the results refuse. Returns the start form; None when first
    contact is off or does not concern the provider."""
    if canonical_name(settings.provider) != "runpod":
        return None
    from tailpod.provision.runpod.first_contact import (
        FirstContactTimings,
        facts_for,
        image_entrypoint,
        run_first_contact,
    )
    from tailpod.provision.runpod.provider import start_form

    label = settings.image.strip() or image
    if settings.first_contact == "off":
        # Nothing is read or rented; a refusal stored for this image still fails the preflight's
        # first-contact row, which `up` ran just before.
        if not met_for(facts_for(settings), label):
            say("warning: " + SKIPPED)
        return None
    notes: list[str] = []
    entrypoint = image_entrypoint(settings, image, notes)
    form = start_form(entrypoint)
    for note in notes:
        say(f"first contact: {note}")
    known = facts_for(settings)
    met = met_for(known, label, form)
    if not met:
        say(f"first contact: this account has no result for the {form} start form; checking "
            "it on a CPU pod before any GPU rents (`up --no-first-contact` skips it)")
        try:
            (run or run_first_contact)(
                settings, image, say=say, image_label=label, entrypoint=entrypoint,
                timings=FirstContactTimings.from_env(os.environ))
        except TailpodError as exc:
            say(f"first contact did not finish ({exc.message.splitlines()[0]}); no GPU was "
                "rented")
            raise
        known = facts_for(settings)
    else:
        say(f"first contact: {met[0].summary()} ({met[0].image})")
    found = assess(settings, known, label, form)
    refused = [(text, fix) for status, text, fix in found.items if status is Status.FAIL]
    if refused:
        raise FirstContactRefused(
            "first contact refuses this rent, no GPU was rented: "
            + "; ".join(text for text, _ in refused),
            hint="; ".join(fix for _, fix in refused if fix) or None)
    return form

"""Check: what first contact (`check-requirements --live`, or `up` the first time an account meets
an image's start form) learned about this RunPod account.

The facts are read from TAILPOD_HOME (provision/runpod/first_contact.py); nothing is rented
here. A refused fact fails the check, so `up` acts on it before any GPU rents: a start form the
account did not run refuses the image it was seen with, and every image that needs the same form
(pods/first_contact.py knows the image's form from its config), naming images that did run; a pod
key that cannot delete its own pod over REST v2 means the dead-man switch has no self-kill, which
`up` accepts only with `--ttl-hours 0`.
"""

from __future__ import annotations

import time

from tailpod.config import Settings
from tailpod.preflight.base import CheckSkipped, Context, Findings, Outcome
from tailpod.preflight.cloud import remote_provider
from tailpod.provision.runpod.first_contact import FirstContactFacts, facts_for


def _age(t: float) -> str:
    hours = max(0.0, time.time() - t) / 3600.0
    return f"{hours:.0f} h ago" if hours >= 1 else "within the hour"


def met_for(known: list[FirstContactFacts], image: str,
            shape: str | None = None) -> list[FirstContactFacts]:
    """The facts that speak for `image`: its own (newest first), else, with its start form
    `shape` known ("json" or "plain"), those of any image sent the same form."""
    mine = [f for f in known if f.image == image]
    if mine or shape is None:
        return mine
    return [f for f in known if f.start_form == shape]


def assess(settings: Settings, known: list[FirstContactFacts], image: str,
           shape: str | None = None) -> Findings:
    """What the recorded facts (newest first) mean for renting `image` on this account."""
    found = Findings()
    if not known:
        found.warn("the start form and the pod key's self-kill are not verified on this "
                   "account (no vendor text settles them)",
                   "`up` checks them itself before renting (a CPU pod, under a cent), or run "
                   "`tailpod check-requirements --live` now")
        return found
    ran = sorted({f.image for f in known if f.start_command_ran})
    mine = met_for(known, image, shape)
    for facts in mine[:1]:
        seen = "" if facts.image == image else f" (seen with {facts.image}, the same form)"
        if facts.start_command_ran is False:
            works = ("images that ran here: " + ", ".join(ran)) if ran else \
                "an image without an ENTRYPOINT (lmsysorg/sglang, runpod/pytorch) is started " \
                "by a plain command line instead"
            found.fail(f"RunPod did not run tailpod's {facts.start_form} start form with "
                       f"{image or 'this image'} on this account{seen} (first contact "
                       f"{_age(facts.checked_at)}): a pod would bill until the boot wait ran "
                       "out", works)
        elif facts.start_command_ran:
            found.ok(f"{image}: the {facts.start_form} start form ran{seen} "
                     f"(first contact {_age(facts.checked_at)})")
    if not mine:
        found.warn(f"{image or 'this image'} has not met first contact on this account"
                   + (f" (verified: {', '.join(ran)})" if ran else ""),
                   "`up` checks it itself unless the same start form was verified; or run "
                   "`tailpod check-requirements --live` with this image")
    killed = [f for f in known if f.pod_key_self_kill is not None]
    if killed and killed[0].pod_key_self_kill is False:
        answers = ", ".join(killed[0].self_kill_answers) or "no answer"
        text = ("the pod-scoped key cannot delete its own pod over REST v2 "
                f"({answers}): the dead-man switch has no self-kill on this account")
        if settings.ttl_hours > 0:
            found.fail(text, "pass `--ttl-hours 0` to rent without a self-kill, knowing only "
                             "`tailpod down` ends the pod")
        else:
            found.warn(text + "; accepted with --ttl-hours 0")
    elif killed:
        found.ok("the pod key deleted its own pod over REST v2")
    meters = [f for f in known if f.meter_bound_s]
    if meters:
        found.ok(meters[0].meter_line())
    return found


def check_first_contact(ctx: Context) -> Outcome:
    if remote_provider(ctx) != "runpod":
        raise CheckSkipped("first contact is a RunPod check")
    known = facts_for(ctx.settings)
    found = assess(ctx.settings, known, ctx.settings.image.strip())
    return found.outcome({"facts": [f.summary() for f in known[:3]]} if known else None)

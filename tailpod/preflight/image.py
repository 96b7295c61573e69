"""Check 6: the image tag resolves to a digest, and a tag that moves is refused unless allowed.

`tailpod.engines.image.pin_image` does the work (Docker Hub token service + manifest HEAD);
this check only decides pass / warn / fail and says how to fix it.
"""

from __future__ import annotations

from tailpod.engines.image import is_mutable_tag, parse_image_ref, pin_image
from tailpod.preflight.base import Context, Findings, Outcome
from tailpod.preflight.cloud import remote_provider


def check_image(ctx: Context) -> Outcome:
    remote_provider(ctx)  # the local provider runs the engine from TAILPOD_ENGINE_PYTHON
    ref = ctx.settings.image.strip()
    found = Findings()
    if not ref:
        found.fail("no image set", "pass --image REPO:VERSION (e.g. vllm/vllm-openai:v0.11.0) or "
                                   "set TAILPOD_IMAGE")
        return found.outcome()
    parsed = parse_image_ref(ref)
    pinned = pin_image(ref, ctx.settings, allow_unpinned=ctx.plan.allow_unpinned, timeout=10.0,
                       attempts=2)
    data = {"image": ref, "pinned": pinned.pinned_ref, "digest": pinned.digest}
    if parsed.digest:
        found.ok(f"{ref} is already pinned to its digest")
    elif is_mutable_tag(parsed.tag):
        found.warn(f"{ref} resolves to {pinned.digest} today, but its tag moves "
                   "(allowed by --allow-unpinned); `up` pins whatever it is at rent time",
                   "use a version tag or REPO@sha256:DIGEST for reproducible runs")
    else:
        found.ok(f"{ref} -> {pinned.pinned_ref}")
    return found.outcome(data)

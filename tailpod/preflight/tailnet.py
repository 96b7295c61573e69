"""Check 7: the Tailscale API token works and the auth key is ephemeral, pre-authorized, tagged
and unexpired (`tailpod.provision.tailnet.check_tailnet_requirements` reads the key by its id,
so the key's secret never leaves this machine)."""

from __future__ import annotations

from tailpod.preflight.base import CheckSkipped, Context, Findings, Outcome
from tailpod.preflight.cloud import remote_provider
from tailpod.provision.tailnet import check_tailnet_requirements


def check_tailnet(ctx: Context) -> Outcome:
    remote_provider(ctx)  # only rented pods join the tailnet
    if not ctx.plan.use_tailnet:
        raise CheckSkipped("--no-tailnet: the pod joins no tailnet (SSH to the provider's endpoint)")
    allow = ctx.plan.allow_nonephemeral
    key = check_tailnet_requirements(ctx.settings, allow_nonephemeral=allow)
    found = Findings()
    if not key.verified:
        for warning in key.warnings:
            found.warn(warning, "make the auth key with the same user as TAILSCALE_API_KEY, or "
                                "check it in the Tailscale admin console (Settings > Keys)")
        return found.outcome({"key_id": key.key_id, "verified": False})
    found.ok(f"API token accepted; auth key {key.key_id}: "
             + ", ".join(part for part in (
                 "ephemeral" if key.ephemeral else "",
                 "pre-authorized" if key.preauthorized else "",
                 "reusable" if key.reusable else "single-use",
                 "tags " + ",".join(key.tags)) if part)
             + (f", expires {key.expires}" if key.expires else ""))
    if not key.ephemeral:
        found.warn(f"auth key {key.key_id} is not ephemeral (allowed by --allow-nonephemeral): "
                   "a pod that dies without logging out stays in the tailnet",
                   "use an ephemeral key; `down` deletes the device either way")
    for warning in key.warnings:
        found.warn(warning, "create a fresh ephemeral, pre-approved, tagged auth key")
    data = {"key_id": key.key_id, "ephemeral": key.ephemeral, "reusable": key.reusable,
            "preauthorized": key.preauthorized, "tags": list(key.tags), "expires": key.expires}
    return found.outcome(data)

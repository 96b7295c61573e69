"""Checks 2, 9 and 10: the provider key and account, the GPU offers, and the cost of the run.

Only read-only calls: RunPod's GPU catalog and GraphQL `myself`, vast.ai's offer search and
`users/current`. The expected card is the one `up` would try first: the first card of the
preference list that has capacity within the price cap (both adapters fall back in that order).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tailpod.config import Settings
from tailpod.engines.image import read_image_facts
from tailpod.errors import ConfigError, TailpodError
from tailpod.preflight.base import (
    CheckSkipped,
    Context,
    Fact,
    Findings,
    Outcome,
    dollars,
)
from tailpod.provision.apiclient import ApiTimings
from tailpod.provision.base import (
    AccountFacts,
    Offer,
    Provider,
    SupportsAccount,
    SupportsGpuNames,
    SupportsHiddenOffers,
    hidden_words,
)
from tailpod.provision.gpu_names import cuda_floor, family_matches
from tailpod.provision.providers import LOCAL, SSH_BOX, canonical_name, get_provider

# Preflight asks, it does not insist: short time-outs and one retry, so a dead API is a fast fail.
PREFLIGHT_TIMINGS = ApiTimings(request_timeout_s=10.0, attempts=2, backoff_s=0.3,
                               backoff_max_s=1.0, max_retry_after_s=3.0)


def remote_provider(ctx: Context) -> str:
    """The canonical cloud provider name; CheckSkipped for `local` or an unknown name."""
    try:
        name = canonical_name(ctx.settings.provider)
    except ConfigError:
        raise CheckSkipped(f"unknown provider {ctx.settings.provider!r} (see env)") from None
    if name == LOCAL:
        raise CheckSkipped("provider local rents nothing")
    if name == SSH_BOX:
        raise CheckSkipped("your own box rents nothing: no account, image or tailnet")
    return name


@dataclass(frozen=True)
class OfferSummary:
    offers: list[Offer]
    cap: float | None
    expected: Offer | None  # what `up` would try first
    cheapest: Offer | None  # cheapest with capacity within the cap
    cheapest_any: Offer | None  # cheapest with capacity, cap ignored

    def within_cap(self, offer: Offer) -> bool:
        if self.cap is None:
            return True
        return offer.price_per_hr is not None and offer.price_per_hr <= self.cap


def summarize(offers: list[Offer], cap: float | None) -> OfferSummary:
    def price(o: Offer) -> float:
        return o.price_per_hr if o.price_per_hr is not None else float("inf")

    available = [o for o in offers if o.available]
    probe = OfferSummary(offers, cap, None, None, None)
    within = [o for o in available if probe.within_cap(o)]
    return OfferSummary(
        offers, cap,
        expected=within[0] if within else None,
        cheapest=min(within, key=price) if within else None,
        cheapest_any=min(available, key=price) if available else None,
    )


def offer_json(offer: Offer | None) -> dict[str, Any] | None:
    if offer is None:
        return None
    return {"gpu": offer.gpu_type, "count": offer.gpu_count, "price_per_hr": offer.price_per_hr,
            "available": offer.available, "gpu_memory_gb": offer.gpu_memory_gb}


def _card(offer: Offer) -> str:
    count = f"{offer.gpu_count}x " if offer.gpu_count > 1 else ""
    return f"{count}{offer.gpu_type} at {dollars(offer.price_per_hr)}/h"


def image_cuda(settings: Settings, timeout: float = 10.0) -> tuple[str | None, str]:
    """The CUDA version the configured image states (what `up` asks hosts to reach,
    pods/cloud.py follow_image), and where that came from; None when there is no image or its
    config could not be read, as `up` then asks for none."""
    ref = settings.image.strip()
    if not ref:
        return None, "no image set (--image or TAILPOD_IMAGE), so no CUDA bound from one"
    try:
        facts = read_image_facts(ref, settings, timeout=max(timeout, 0.1))
    except TailpodError as exc:
        return None, f"could not read {ref}'s config ({exc.message}), so no CUDA bound from it"
    version = facts.cuda_version
    return version, (f"{ref} states CUDA {version}" if version
                     else f"{ref} states no CUDA version")


def offer_settings(settings: Settings, cuda: str | None) -> Settings:
    """The settings every offer query runs under: TAILPOD_MIN_CUDA raised to the image's CUDA,
    so `gpus`, `check-requirements` and `matrix` filter hosts as `up`'s create does."""
    return dataclasses.replace(settings, min_cuda=cuda_floor(settings.min_cuda, cuda) or "")


# -- facts ----------------------------------------------------------------------------------------
def _provider(ctx: Context) -> Provider:
    name = remote_provider(ctx)
    options: dict[str, Any] = {"timings": PREFLIGHT_TIMINGS, **ctx.provider_options}
    settings = offer_settings(ctx.settings, image_cuda(ctx.settings)[0])
    return get_provider(name, settings, **options)


def _account(ctx: Context) -> AccountFacts:
    provider: Provider = ctx.fact("provider")
    if not isinstance(provider, SupportsAccount):
        raise CheckSkipped(f"{provider.name} shows no account")
    return provider.account()  # RunPod: balance, spend rate and limit; vast.ai: the balance


def _offers(ctx: Context) -> OfferSummary:
    ctx.need("account")  # a rejected key is reported once, by the provider check
    provider: Provider = ctx.fact("provider")
    prefs = [g for g in ctx.settings.gpus if g.strip()]
    if not prefs:
        raise ConfigError("no GPU preference list",
                          hint="pass --gpu NAME (repeatable, in preference order) or set "
                               "TAILPOD_GPUS")
    cap = ctx.settings.max_price
    offers = provider.offers(prefs, ctx.settings.gpu_count, cap)
    missing = [o.gpu_type for o in offers
               if not o.available and o.detail.get("error") in (None, "no matching offer")]
    if missing and isinstance(provider, SupportsGpuNames):
        # a family (`H100`) the provider sells under other names: name them, as `gpus` lists
        try:
            known = {k: (v,) for k, v in provider.gpu_names(ctx.settings.gpu_count).items()}
        except TailpodError:
            known = {}
        families = {m: found for m in missing
                    if (found := [f for f in family_matches(m, known) if f != m])}
        offers = [dataclasses.replace(o, detail={**o.detail, "matches": families[o.gpu_type]})
                  if o.gpu_type in families else o for o in offers]
    if missing and isinstance(provider, SupportsHiddenOffers):
        # what the host filters hid, so the failure names the filter, not the spelling
        try:
            hidden = provider.hidden(missing, ctx.settings.gpu_count)
            filters = provider.filters()
        except TailpodError:
            hidden, filters = {}, {}
        offers = [dataclasses.replace(o, detail={**o.detail, "hidden": hidden_words(
                      hidden[o.gpu_type], filters)}) if o.gpu_type in hidden else o
                  for o in offers]
    return summarize(offers, cap)


FACTS = (
    Fact("provider", "the provider adapter", "provider", _provider),
    Fact("account", "the provider account", "provider", _account),
    Fact("offers", "the GPU offers", "offers", _offers),
)


# -- checks ---------------------------------------------------------------------------------------
def check_provider(ctx: Context) -> Outcome:
    """Key accepted by a read-only call; the account can start and pay for the planned run."""
    name = remote_provider(ctx)
    account: AccountFacts = ctx.fact("account")
    found = Findings()
    if account.unavailable:
        found.warn(f"{name} accepted the key (REST v2); account balance and spend limit "
                   f"unavailable: {account.unavailable}",
                   "check the balance in the provider's console")
        return found.outcome({"provider": name, "account": "unavailable", "balance": None,
                              "spend_per_hr": None, "spend_limit": None})
    parts = [f"{name} accepted the key", f"balance {dollars(account.balance)}"]
    if account.spend_per_hr is not None:
        limit = f" of a {dollars(account.spend_limit)}/h limit" if account.spend_limit else ""
        parts.append(f"spending {dollars(account.spend_per_hr)}/h{limit}")
    found.ok(", ".join(parts))
    data: dict[str, Any] = {"provider": name, "balance": account.balance,
                            "spend_per_hr": account.spend_per_hr,
                            "spend_limit": account.spend_limit}
    summary, why = ctx.optional("offers")
    card = summary.expected if summary is not None else None
    if card is None or card.price_per_hr is None:
        found.ok("affordability not checked: " + (why or "no card has capacity within the cap"))
        return found.outcome(data)
    hours = ctx.plan.duration_h(ctx.settings)
    rate = card.price_per_hr
    cost = rate * hours
    data["planned_cost"] = round(cost, 4)
    if account.balance is None:
        found.warn(f"{name} did not report a balance, so the planned {dollars(cost)} could not "
                   "be compared with it", "check the balance in the provider's console")
    elif account.balance < max(cost, rate):
        found.fail(f"the balance {dollars(account.balance)} does not cover the planned run: "
                   f"{hours:g} h of {_card(card)} = {dollars(cost)}"
                   + (" (RunPod needs an hour of the pod's cost to deploy)" if name == "runpod"
                      else ""),
                   "add credit, or plan fewer hours (--hours) or a cheaper card")
    elif account.balance < cost + rate:
        found.warn(f"the balance {dollars(account.balance)} covers the planned {dollars(cost)} "
                   "with less than an hour to spare; pods are stopped when credit runs out",
                   "add credit before a long run")
    else:
        found.ok(f"covers {hours:g} h of {_card(card)} ({dollars(cost)})")
    if account.spend_limit is not None and account.spend_per_hr is not None \
            and account.spend_per_hr + rate > account.spend_limit:
        found.fail(f"another {dollars(rate)}/h would take the account over its spend limit "
                   f"({dollars(account.spend_per_hr)}/h now, limit "
                   f"{dollars(account.spend_limit)}/h)",
                   "stop other pods or ask the provider to raise the spend limit")
    return found.outcome(data)


def check_offers(ctx: Context) -> Outcome:
    """Capacity right now within the cap, in preference order; the expected and cheapest card."""
    remote_provider(ctx)
    summary: OfferSummary = ctx.fact("offers")
    found = Findings()
    cap = summary.cap
    unknown = [o.gpu_type for o in summary.offers if o.detail.get("error") == "unknown GPU type"]
    if unknown:
        found.fail(f"unknown GPU type(s) {', '.join(unknown)}: `up` refuses the whole list",
                   "use names from the provider's catalog (RunPod: 'NVIDIA A40' or 'A40')")
    for o in summary.offers:
        if o.detail.get("error") == "several GPU types":
            found.fail(f"{o.gpu_type!r} names several GPU types ("
                       + ", ".join(map(repr, o.detail.get("matches") or [])) + "): `up` "
                       "refuses the whole list", "name the ones you want, in preference order")

    def state(o: Offer) -> str:
        if not o.available:
            why = o.detail.get("error") or "no capacity"
            if o.detail.get("matches"):
                why += " (" + ", ".join(map(repr, o.detail["matches"])) + "): name one"
            if o.detail.get("hidden"):
                why += f" ({o.detail['hidden']})"
            return f"{o.gpu_type}: {why}"
        if not summary.within_cap(o):
            return f"{o.gpu_type}: {dollars(o.price_per_hr)}/h is above the cap {dollars(cap)}/h"
        return f"{o.gpu_type}: {dollars(o.price_per_hr)}/h"

    data = {"expected": offer_json(summary.expected), "cheapest": offer_json(summary.cheapest),
            "offers": [offer_json(o) for o in summary.offers], "max_price": cap}
    if summary.expected is None:
        cheapest = summary.cheapest_any
        found.fail("no GPU in the list has capacity within the cap now: "
                   + "; ".join(state(o) for o in summary.offers)
                   + (f" (cheapest with capacity: {_card(cheapest)})" if cheapest else ""),
                   "raise --max-price, add GPU types (--gpu), or retry later")
        return found.outcome(data)
    expected = summary.expected
    first = summary.offers[0]
    if expected is not first:
        skipped = [state(o) for o in summary.offers[: summary.offers.index(expected)]]
        found.warn(f"expected card {_card(expected)} is a fallback: " + "; ".join(skipped),
                   "reorder --gpu, raise --max-price, or retry later for the first choice")
    else:
        found.ok(f"expected card {_card(expected)} (first choice)")
    cheapest = summary.cheapest
    if cheapest is not None and cheapest is not expected:
        found.ok(f"cheapest within the cap: {_card(cheapest)}")
    elif cheapest is expected:
        found.ok("it is also the cheapest within the cap")
    if cap is not None:
        found.ok(f"cap {dollars(cap)}/h")
    return found.outcome(data)


def check_cost(ctx: Context) -> Outcome:
    """Expected duration x $/h of the expected card, against the cap and the TTL."""
    remote_provider(ctx)
    settings = ctx.settings
    hours = ctx.plan.duration_h(settings)
    found = Findings()
    if hours <= 0:
        found.fail(f"the planned duration must be positive, got {hours:g} h", "pass --hours N")
        return found.outcome()
    summary: OfferSummary = ctx.need("offers")
    card = summary.expected or summary.cheapest_any
    if card is None or card.price_per_hr is None:
        raise CheckSkipped("no card has capacity or a price (see offers)")
    rate = card.price_per_hr
    cost = rate * hours
    cap = settings.max_price
    worst = rate * max(hours, settings.ttl_hours)  # no TTL (0): no worst case (None below)
    data = {"gpu": card.gpu_type, "price_per_hr": rate, "hours": hours,
            "estimate_usd": round(cost, 4), "cap_per_hr": cap,
            "cap_usd": round(cap * hours, 4) if cap is not None else None,
            "ttl_hours": settings.ttl_hours, "worst_case_usd": round(worst, 4) if settings.ttl_hours > 0 else None}
    line = f"{hours:g} h x {_card(card)} = {dollars(cost)}"
    if cap is None:
        found.warn(f"{line}; no price cap, so a fallback may land on any price",
                   "set --max-price (or TAILPOD_MAX_PRICE)")
    elif rate > cap:
        found.fail(f"{line}, above the cap of {dollars(cap)}/h ({dollars(cap * hours)} for "
                   f"{hours:g} h): nothing in the list is that cheap now",
                   "raise --max-price or add cheaper GPU types")
    else:
        found.ok(f"{line}, within the cap of {dollars(cap)}/h ({dollars(cap * hours)} for "
                 f"{hours:g} h)")
    if settings.ttl_hours == 0:  # --ttl-hours 0: no TTL, accepted explicitly
        found.warn(f"no TTL (--ttl-hours 0): a forgotten pod bills {dollars(rate)}/h until the "
                   "heartbeat timeout or `tailpod down` ends it",
                   "set --ttl-hours N unless the pod key cannot end its own pod")
    elif hours > settings.ttl_hours:
        found.warn(f"the TTL ends pods after {settings.ttl_hours:g} h, before the planned "
                   f"{hours:g} h", f"set TAILPOD_TTL_HOURS={hours:g} or plan fewer hours")
    else:
        found.ok(f"at most {dollars(worst)} if left running until the {settings.ttl_hours:g} h "
                 "TTL")
    return found.outcome(data)

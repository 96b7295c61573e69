"""`tailpod gpus`: the GPU types each provider offers, with price, memory, availability and the
name `up --gpu` accepts (what `sky show-gpus`, `dstack offer` and `runpodctl get cloud` show)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.table import Table

from tailpod.cli.common import console, err_console, handle_errors, print_json, settings_from
from tailpod.config import Settings, gpu_flags, offer_filter_problems
from tailpod.errors import AuthError, ConfigError, TailpodError
from tailpod.preflight.cloud import image_cuda, offer_settings
from tailpod.provision.apiclient import call_deadline
from tailpod.provision.base import (
    Offer,
    Provider,
    SupportsGpuNames,
    SupportsHiddenOffers,
    filter_words,
    hidden_words,
)
from tailpod.provision.gpu_names import family_matches, near_names
from tailpod.provision.providers import (
    CLOUD_PROVIDERS,
    LOCAL,
    canonical_name,
    cloud_key_envs,
    get_provider,
    provider_class,
)
from tailpod.provision.providers import api_key as provider_key
from tailpod.secrets import redact

# The offer filters, the same flags on `gpus`, `check-requirements` and `up` (one query).
MIN_RELIABILITY = typer.Option(
    None, "--min-reliability", help="vast.ai: only hosts at or above this reliability score "
    "(env TAILPOD_MIN_RELIABILITY, default 0.95).")
MIN_CUDA = typer.Option(
    None, "--min-cuda", help="Only hosts whose driver reaches this CUDA version (12.8); the "
    "image's own version applies too (env TAILPOD_MIN_CUDA).")
DISK_GB = typer.Option(
    None, "--disk-gb", help="The pod's disk in GB, which vast.ai prices and filters hosts by "
    "(env TAILPOD_DISK_GB, default 80).")
GPUS_TIMEOUT_S = 30.0  # every provider call of `gpus` together (adversary 30: 128 s of silence)


def _names(provider: Provider, gpu_count: int) -> dict[str, str]:
    """Every GPU name the provider sells now (RunPod: its catalog, stocked or not; vast.ai: its
    market) -> its other name; {} for a provider with no such list."""
    return provider.gpu_names(gpu_count) if isinstance(provider, SupportsGpuNames) else {}


def resolve(provider: Provider, wanted: list[str], gpu_count: int
            ) -> tuple[list[str], list[str], dict[str, str]]:
    """(the names `wanted` resolve to on this provider, the wanted names it has none of, each
    name's other name). A family (`H100`) resolves to every variant the provider sells."""
    known = _names(provider, gpu_count)
    if not known:  # nothing to resolve against: ask for the names as given
        return list(wanted), [], {}
    aliases = {k: (v,) for k, v in known.items()}
    resolved: list[str] = []
    missing: list[str] = []
    for name in wanted:
        found = family_matches(name, aliases)
        if not found:
            missing.append(name)
        resolved += [f for f in found if f not in resolved]
    return resolved, missing, known


def offer_rows(provider: Provider, gpus: list[str], gpu_count: int,
               max_price: float | None, short: dict[str, str] | None = None
               ) -> list[dict[str, Any]]:
    """One row per GPU type: what `up --gpu` takes, its price for `gpu_count`, memory, stock."""
    short = dict(short or {})
    listing = not gpus
    if listing:
        short = _names(provider, gpu_count)
        gpus = list(short)
    offers: list[Offer] = provider.offers(gpus, gpu_count, max_price) if gpus else []
    unknown = [o.gpu_type for o in offers if (o.detail or {}).get("error") == "unknown GPU type"]
    if unknown:
        known = {k: (v,) for k, v in (short or _names(provider, gpu_count)).items()}
        near = near_names(unknown, known)
        raise ConfigError(f"{provider.name} has no GPU type {', '.join(map(repr, unknown))}",
                          hint=("did you mean " + ", ".join(map(repr, near))) if near
                          else f"tailpod gpus --provider {provider.name} lists them")
    rows = []
    for o in offers:
        if listing and (o.detail or {}).get("error") == "no matching offer":
            continue  # a name on the market whose every offer a filter hides: see `hidden`
        detail = o.detail or {}
        rows.append({
            "provider": o.provider,
            "gpu": o.gpu_type,  # the name `tailpod up --gpu` accepts
            "also": short.get(o.gpu_type) or None,  # RunPod's short name, accepted too
            "gpu_count": o.gpu_count,
            "memory_gb": o.gpu_memory_gb,
            "price_per_hr": o.price_per_hr,
            "available": bool(o.available),
            "stock": detail.get("stock"),
            "offers": detail.get("offers"),
            "error": detail.get("error"),
        })
    return rows


def _providers(settings: Settings, names: list[str]) -> list[str]:
    if names:
        return list(dict.fromkeys(canonical_name(n) for n in names))
    keyed = [n for n in CLOUD_PROVIDERS if provider_key(settings, n)]
    if not keyed:
        raise ConfigError("no cloud API key is set, so there is no catalog to ask",
                          hint=f"set {' or '.join(cloud_key_envs())} (.env), or pass "
                               "--provider local for this machine")
    return keyed


def _price(row: dict[str, Any]) -> float:
    value = row.get("price_per_hr")
    return float(value) if isinstance(value, (int, float)) else math.inf


def select_rows(rows: list[dict[str, Any]], max_price: float | None, available_only: bool
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the rows `gpus` lists, in stock first, then cheapest; the rows above `max_price`). The
    cap is inclusive, as `up`'s is: a row priced exactly at it is listed; an unpriced row is
    above any cap. A top-level function, not the command's body, so `make mutate` reaches it
    (mutmut skips decorated functions)."""
    above = [r for r in rows if max_price is not None and _price(r) > max_price]
    listed = [r for r in rows if r not in above and (r["available"] or not available_only)]
    listed.sort(key=lambda r: (not r["available"], _price(r), r["provider"], r["gpu"]))
    return listed, above


def _dollars(price: float) -> str:
    """Cents, or the 4 decimals an offer states: a price shown is one `--max-price` admits."""
    text = f"{price:.4f}".rstrip("0")
    return text if len(text.split(".")[1]) >= 2 else f"{price:.2f}"


def _table(rows: list[dict[str, Any]], gpu_count: int, spot: bool = False) -> Table:
    table = Table(title=f"GPU offers ({gpu_count} GPU{'s' if gpu_count > 1 else ''} per pod)",
                  title_justify="left")
    table.add_column("provider", no_wrap=True)
    table.add_column("--gpu (also)", overflow="fold")
    table.add_column("GB", justify="right", no_wrap=True)
    table.add_column("USD/h", justify="right", no_wrap=True)
    if spot:  # beside the on-demand price: what `up --spot` bills at the minimum bid
        table.add_column("spot USD/h", justify="right", no_wrap=True)
    table.add_column("available", no_wrap=True)
    for r in rows:
        name = r["gpu"] + (f" ({r['also']})" if r["also"] and r["also"] != r["gpu"] else "")
        mem = "—" if r["memory_gb"] is None else f"{r['memory_gb']:g}"
        price = "—" if r["price_per_hr"] is None else _dollars(r["price_per_hr"])
        if r["error"]:
            avail = r["error"]
        elif r["available"]:
            avail = "yes" + (f" ({r['stock'].lower()})" if r["stock"] else "") + (
                f" ({r['offers']} offer{'s' if r['offers'] > 1 else ''})" if r["offers"] else "")
        else:
            avail = "no"
        spot_price = r.get("spot_price_per_hr")
        spot_cell = [] if not spot else [
            "—" if spot_price is None else _dollars(spot_price)]
        table.add_row(r["provider"], name, mem, price, *spot_cell, avail)
    return table


def _hidden(provider: Provider, gpus: list[str], gpu_count: int
            ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """What the provider's host filters hid (one row per GPU) and the filters, or ([], None)."""
    if not isinstance(provider, SupportsHiddenOffers):
        return [], None
    filters = provider.filters()
    rows = [{"provider": provider.name, "gpu": name, "offers": row["offers"],
             "by": {k: v for k, v in row.items() if k != "offers"},
             "words": hidden_words(row, filters)}
            for name, row in sorted(provider.hidden(gpus, gpu_count).items())]
    return rows, filters


@dataclass
class Answers:
    """What the providers answered `gpus`, and which could not be asked."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    hidden: list[dict[str, Any]] = field(default_factory=list)
    filters: dict[str, dict[str, Any]] = field(default_factory=dict)  # provider -> its filters
    errors: list[dict[str, str]] = field(default_factory=list)  # refused (a key)
    unasked: list[dict[str, str]] = field(default_factory=list)  # no answer by the deadline
    missing: dict[str, list[str]] = field(default_factory=dict)  # wanted -> who sells none
    near: dict[str, list[str]] = field(default_factory=dict)  # wanted -> close names


def ask_providers(names: list[str], settings: Settings, wanted: list[str], gpu_count: int,
                  max_price: float | None, deadline: float, spot: bool = False) -> Answers:
    """Each provider's offers for `wanted` (every GPU when empty), resolved and filtered as `up`
    rents, every call ending by `deadline` (a time.monotonic() value)."""
    got = Answers()
    with call_deadline(deadline):
        for name in names:
            try:
                adapter = get_provider(name, settings)
                asked, short = list(wanted), None
                if wanted:
                    asked, lacking, short = resolve(adapter, wanted, gpu_count)
                    for w in lacking:
                        got.missing.setdefault(w, []).append(name)
                        got.near.setdefault(w, []).extend(
                            near_names([w], {k: (v,) for k, v in short.items()}))
                    if not asked:
                        continue
                rows = offer_rows(adapter, asked, gpu_count, max_price, short)
                if spot:  # each row's spot price beside its on-demand one (None: none sold)
                    sold = adapter.spot_prices([r["gpu"] for r in rows], gpu_count) \
                        if rows and adapter.spot_route else {}
                    for r in rows:
                        r["spot_price_per_hr"] = sold.get(r["gpu"])
                got.rows += rows
                more, used = _hidden(adapter, asked, gpu_count)
                got.hidden += more
                if used is not None:
                    got.filters[name] = used
            except (ConfigError, AuthError) as exc:
                if isinstance(exc, ConfigError) and len(names) == 1:
                    raise
                got.errors.append({"provider": name, "error": redact(exc.message)})
            except TailpodError as exc:  # no answer, a time-out, an outage
                got.unasked.append({"provider": name, "error": redact(exc.message)})
    return got


def register(app: typer.Typer) -> None:
    @app.command("gpus")
    @handle_errors
    def gpus(
        provider: list[str] = typer.Option(
            None, "--provider", help="runpod, vastai or local, repeatable (default: every cloud "
                                     "whose API key is set)."),
        gpu: list[str] = typer.Option(
            None, "--gpu", help="Only these GPU types, repeatable: a name `up` takes, a family "
                                "(H100: every variant), or NAME:N for N GPUs (A40:2)."),
        gpu_count: int = typer.Option(None, min=1, help="GPUs per pod (prices are per pod; "
                                                        "default TAILPOD_GPU_COUNT, or 1)."),
        max_price: float = typer.Option(None, help="Only offers at or below this price per pod."),
        available: bool = typer.Option(False, "--available", help="Only types in stock now."),
        spot: bool = typer.Option(
            False, "--spot", help="Show each type's spot (interruptible) price at its minimum "
                                  "bid beside the on-demand price, where the provider sells spot."),
        min_reliability: float = MIN_RELIABILITY,
        min_cuda: str = MIN_CUDA,
        disk_gb: int = DISK_GB,
        image: str = typer.Option(
            None, help="The engine image `up` would run: hosts must reach the CUDA version its "
                       "config states (env TAILPOD_IMAGE; '' for none)."),
        timeout: float = typer.Option(
            GPUS_TIMEOUT_S, "--timeout", min=1.0,
            help="Stop asking the providers after this many seconds, every call included; a "
                 "provider that did not answer is named (exit 3)."),
        json_out: bool = typer.Option(False, "--json", help="Print the offers as JSON."),
    ) -> None:
        """The GPU types on offer, cheapest first: price per hour, memory, availability, and
        the name `tailpod up --gpu` accepts. The offers are filtered as `up` filters them (host
        reliability, disk, the image's CUDA), and what the filters hide is counted. Rents
        nothing."""
        deadline = time.monotonic() + timeout
        if max_price is not None and not (math.isfinite(max_price) and max_price > 0):
            raise ConfigError("--max-price must be a positive number of USD/h")
        wanted, count = gpu_flags(gpu, gpu_count)
        settings = settings_from(image=image, min_reliability=min_reliability,
                                 min_cuda=min_cuda, disk_gb=disk_gb)
        problems = offer_filter_problems(settings)
        if settings.disk_gb <= 0:
            problems.append(f"--disk-gb must be positive, got {settings.disk_gb}")
        if problems:
            raise ConfigError("; ".join(problems))
        gpu_count = count or settings.gpu_count  # TAILPOD_GPUS=A40:2 / TAILPOD_GPU_COUNT, as `up`
        names = _providers(settings, list(provider or []))
        cuda: str | None = None
        cuda_note = ""
        if any(n != LOCAL for n in names):
            cuda, cuda_note = image_cuda(settings, timeout=min(10.0, timeout))
        query_settings = offer_settings(settings, cuda)
        got = ask_providers(names, query_settings, list(wanted or []), gpu_count, max_price,
                            deadline, spot)
        rows, hidden, filters = got.rows, got.hidden, got.filters
        errors, unasked = got.errors, got.unasked
        if wanted and not unasked:
            nowhere = [w for w in wanted if len(got.missing.get(w, [])) == len(names)]
            if nowhere:
                hints = sorted({m for w in nowhere for m in got.near.get(w, [])})
                raise ConfigError(
                    f"no provider asked ({', '.join(names)}) sells a GPU named "
                    + ", ".join(map(repr, nowhere)),
                    hint=("did you mean " + ", ".join(map(repr, hints))) if hints
                    else "tailpod gpus lists every name `up --gpu` takes")
        rows, above = select_rows(rows, max_price, available)
        if json_out:
            print_json({"gpu_count": gpu_count, "max_price": max_price, "offers": rows,
                        "above_max_price": len(above), "hidden": hidden, "filters": filters,
                        "cuda_source": cuda_note or None, "errors": errors,
                        "not_asked": unasked})
        else:
            if rows:
                console.print(_table(rows, gpu_count, spot))
            else:
                console.print("no GPU offers match")
            if above:
                console.print(f"{len(above)} more above --max-price {max_price:g} USD/h")
            for name, used in filters.items():
                words = filter_words(used)
                if words:
                    console.print(f"{name} filters, as `up` rents: " + ", ".join(words.values())
                                  + (f" ({cuda_note})" if cuda_note and "cuda" in words else ""))
            for h in hidden:
                console.print(f"  {h['provider']} {h['gpu']}: {h['words']}")
            if spot:
                for name in names:
                    cls = provider_class(name)
                    if cls.spot_route is None and name != LOCAL:
                        console.print(f"{name}: no spot price ({cls.no_spot})")
            if any(r["provider"] == LOCAL for r in rows):
                console.print("local: this machine, no rent")
        for e in errors:
            err_console.print(f"[bold red]error:[/] {e['provider']}: {e['error']}")
        for u in unasked:
            err_console.print(f"[bold red]unknown:[/] could not ask {u['provider']} for its "
                              f"offers ({u['error']}); they are not listed")
        if unasked:
            raise typer.Exit(code=3)
        if errors:
            raise typer.Exit(code=1)

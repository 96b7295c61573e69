"""`tailpod gpus`: the GPU types each provider offers, with price, memory, availability and the
name `up --gpu` accepts (what `sky show-gpus`, `dstack offer` and `runpodctl get cloud` show)."""

from __future__ import annotations

import math
from typing import Any

import typer
from rich.table import Table

from tailpod.cli.common import console, err_console, handle_errors, print_json, settings_from
from tailpod.config import Settings
from tailpod.errors import ConfigError, TailpodError
from tailpod.provision.base import Offer, Provider
from tailpod.provision.providers import (
    CLOUD_PROVIDERS,
    LOCAL,
    canonical_name,
    cloud_key_envs,
    get_provider,
)
from tailpod.provision.providers import api_key as provider_key
from tailpod.secrets import redact


def _names(provider: Provider, gpu_count: int) -> tuple[list[str], dict[str, str]]:
    """Every GPU type the provider lists now (its ids) and each id's short name."""
    catalog = getattr(provider, "catalog", None)
    if callable(catalog):  # RunPod: the catalog names every type, stocked or not
        entries: dict[str, dict[str, Any]] = catalog(gpu_count)
        return list(entries), {k: str(v.get("name") or "") for k, v in entries.items()}
    search = getattr(provider, "search", None)
    if callable(search):  # vast.ai: the types of the offers on the market now
        found = search([], gpu_count)  # priced with the disk `up` would rent
        names = sorted({str(o.get("gpu_name")) for o in found if o.get("gpu_name")})
        return names, {}
    return [], {}


def offer_rows(provider: Provider, gpus: list[str], gpu_count: int,
               max_price: float | None) -> list[dict[str, Any]]:
    """One row per GPU type: what `up --gpu` takes, its price for `gpu_count`, memory, stock."""
    short: dict[str, str] = {}
    if not gpus:
        gpus, short = _names(provider, gpu_count)
    offers: list[Offer] = provider.offers(gpus, gpu_count, max_price)
    unknown = [o.gpu_type for o in offers if (o.detail or {}).get("error") == "unknown GPU type"]
    if unknown:
        import difflib

        known, short = _names(provider, gpu_count)
        choices = known + [n for n in short.values() if n]
        near = sorted({m for u in unknown for m in difflib.get_close_matches(u, choices, 3)})
        raise ConfigError(f"{provider.name} has no GPU type {', '.join(map(repr, unknown))}",
                          hint=("did you mean " + ", ".join(map(repr, near))) if near
                          else f"tailpod gpus --provider {provider.name} lists them")
    rows = []
    for o in offers:
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


def _table(rows: list[dict[str, Any]], gpu_count: int) -> Table:
    table = Table(title=f"GPU offers ({gpu_count} GPU{'s' if gpu_count > 1 else ''} per pod)",
                  title_justify="left")
    table.add_column("provider", no_wrap=True)
    table.add_column("--gpu (also)", overflow="fold")
    table.add_column("GB", justify="right", no_wrap=True)
    table.add_column("USD/h", justify="right", no_wrap=True)
    table.add_column("available", no_wrap=True)
    for r in rows:
        name = r["gpu"] + (f" ({r['also']})" if r["also"] and r["also"] != r["gpu"] else "")
        mem = "—" if r["memory_gb"] is None else f"{r['memory_gb']:g}"
        price = "—" if r["price_per_hr"] is None else f"{r['price_per_hr']:.2f}"
        if r["error"]:
            avail = r["error"]
        elif r["available"]:
            avail = "yes" + (f" ({r['stock'].lower()})" if r["stock"] else "") + (
                f" ({r['offers']} offer{'s' if r['offers'] > 1 else ''})" if r["offers"] else "")
        else:
            avail = "no"
        table.add_row(r["provider"], name, mem, price, avail)
    return table


def register(app: typer.Typer) -> None:
    @app.command("gpus")
    @handle_errors
    def gpus(
        provider: list[str] = typer.Option(
            None, "--provider", help="runpod, vastai or local, repeatable (default: every cloud "
                                     "whose API key is set)."),
        gpu: list[str] = typer.Option(None, "--gpu", help="Only these GPU types, repeatable."),
        gpu_count: int = typer.Option(1, min=1, help="GPUs per pod (prices are per pod)."),
        max_price: float = typer.Option(None, help="Only offers at or below this price per pod."),
        available: bool = typer.Option(False, "--available", help="Only types in stock now."),
        json_out: bool = typer.Option(False, "--json", help="Print the offers as JSON."),
    ) -> None:
        """The GPU types on offer, cheapest first: price per hour, memory, availability, and
        the name `tailpod up --gpu` accepts. Rents nothing."""
        if max_price is not None and not (math.isfinite(max_price) and max_price > 0):
            raise ConfigError("--max-price must be a positive number of USD/h")
        settings = settings_from()
        names = _providers(settings, list(provider or []))
        rows: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []
        for name in names:
            try:
                rows += offer_rows(get_provider(name, settings), list(gpu or []), gpu_count,
                                   max_price)
            except TailpodError as exc:
                if len(names) == 1:
                    raise
                errors.append({"provider": name, "error": redact(exc.message)})
        above = [r for r in rows if max_price is not None and _price(r) > max_price]
        rows = [r for r in rows if r not in above and (r["available"] or not available)]
        rows.sort(key=lambda r: (not r["available"], _price(r), r["provider"], r["gpu"]))
        if json_out:
            print_json({"gpu_count": gpu_count, "max_price": max_price, "offers": rows,
                        "above_max_price": len(above), "errors": errors})
        else:
            if rows:
                console.print(_table(rows, gpu_count))
            else:
                console.print("no GPU offers match")
            if above:
                console.print(f"{len(above)} more above --max-price {max_price:g} USD/h")
            if any(r["provider"] == LOCAL for r in rows):
                console.print("local: this machine, no rent")
        for e in errors:
            err_console.print(f"[bold red]error:[/] {e['provider']}: {e['error']}")
        if errors:
            raise typer.Exit(code=1)

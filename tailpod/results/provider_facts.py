"""How a report says a run's `provider_facts` (run.json): what the provider's account was seen
to do. The stamp's keys are written by tailpod/provision/runpod/facts.py `run_stamp` (first
contact) and tailpod/pods/cloud.py `follow_image` (start form, CUDA)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


def _said(value: Any, yes: str, no: str) -> str:
    return "not checked" if value is None else (yes if value else no)


def provider_facts_line(facts: Mapping[str, Any] | None) -> str:
    """One line for a report: what a run's `provider_facts` (run.json) say of the account."""
    if not facts:
        return "not recorded (not a rented pod, or a run from before they were kept)"
    parts = [f"start form {facts.get('start_form') or 'unknown'}"]
    if "min_cuda" in facts:
        parts.append(f"CUDA asked ≥ {facts.get('min_cuda') or 'none'}")
    if facts.get("host_cuda"):
        parts.append(f"host CUDA {facts['host_cuda']}")
    stamp = facts.get("first_contact")
    if isinstance(stamp, Mapping):
        if not stamp.get("verified"):
            parts.append(f"first contact: NOT VERIFIED ({stamp.get('why') or 'never ran'})")
        else:
            seen = time.strftime("%Y-%m-%d", time.gmtime(float(stamp.get("checked_at") or 0)))
            image = "this image" if stamp.get("same_image") else f"another image ({stamp.get('image')})"
            delay = stamp.get("meter_delay_s")
            meter = (f"meter showed spend {delay:.0f} s after create" if delay is not None
                     else f"meter showed no spend within {stamp.get('meter_bound_s') or 0:.0f} s")
            parts.append(
                f"first contact {seen} with {image}: start command "
                + _said(stamp.get("start_command_ran"), "ran", "did NOT run")
                + ", pod-key self-kill "
                + _said(stamp.get("pod_key_self_kill"), "works", "REFUSED")
                + f", {meter}")
    return "; ".join(parts)


def start_billed_line(cold: Mapping[str, Any]) -> str:
    """One line for a report: what the pod's start billed (run.json `cold_start`)."""
    def secs(key: str) -> str:
        v = cold.get(key)
        return f"{v:.0f} s" if isinstance(v, (int, float)) else "unknown"

    usd = cold.get("usd_to_first_token")
    hit = cold.get("compile_cache_hit")
    cache = ("compile cache hit" if hit is True else "compiled (no cache hit)" if hit is False
             else "compile cache: unknown")
    return (f"{secs('billed_s_to_ready')} to serving, {secs('billed_s_to_first_token')} to the first "
            f"measured token" + (f" (${usd:.4f})" if isinstance(usd, (int, float)) else "")
            + f"; {cache}" + (f"; volume {cold['volume']}" if cold.get("volume") else ""))

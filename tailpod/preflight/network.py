"""The root of preflight's dependency graph: can this machine reach the hosts the run calls?

One TCP connect per host (the provider's API, the Hugging Face hub, the image registry, the
Tailscale API), each with a short deadline, all at once. A host that does not answer makes
this check fail, transient (a network fault is not a setting to fix), and every check that
would call it is skipped with this one reason (runner.py `NEEDS`), instead of six rows each
failing on its own time-out.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tailpod.config import Settings
from tailpod.errors import ConfigError
from tailpod.preflight.base import Context, Outcome, Status
from tailpod.provision.providers import CLOUD_PROVIDERS, LOCAL, api_url, canonical_name

CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Host:
    role: str  # "provider", "hf", "registry", "tailscale"
    url: str

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return parts.hostname or "", port

    @property
    def label(self) -> str:
        host, port = self.address
        return f"{host}:{port}"


def hub_model(settings: Settings) -> bool:
    """The model is fetched from the hub (a Hub id, not a directory on this machine)."""
    model = (settings.model or "").strip()
    return bool(model) and not Path(model).expanduser().exists()


def hosts_for(settings: Settings, use_tailnet: bool = True) -> list[Host]:
    """The hosts the planned run calls, by role; a role the run does not use is left out (the
    Tailscale API under --no-tailnet, and for a box that rents nothing)."""
    out: list[Host] = []
    try:
        provider = canonical_name(settings.provider)
    except ConfigError:
        provider = None
    if provider and provider != LOCAL:
        out.append(Host("provider", api_url(settings, provider)))
    if provider in CLOUD_PROVIDERS and use_tailnet:
        out.append(Host("tailscale", settings.tailscale_url))
    if hub_model(settings):
        out.append(Host("hf", settings.hf_url))
    if (settings.image or "").strip() and provider != LOCAL:
        out.append(Host("registry", settings.registry_url))
    return out


Connect = Callable[[tuple[str, int], float], None]


def tcp_connect(address: tuple[str, int], timeout: float) -> None:
    with socket.create_connection(address, timeout=timeout):
        pass


def _why(exc: BaseException) -> str:
    if isinstance(exc, socket.gaierror):
        return "name does not resolve (DNS)"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"no answer within {CONNECT_TIMEOUT_S:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return exc.__class__.__name__


def probe(hosts: list[Host], connect: Connect = tcp_connect,
          timeout: float = CONNECT_TIMEOUT_S) -> dict[str, str]:
    """role -> why its host cannot be reached, for every role whose host cannot (each distinct
    host is tried once, all at once)."""
    failed: dict[tuple[str, int], str] = {}
    lock = threading.Lock()
    addresses = list(dict.fromkeys(h.address for h in hosts))

    def one(address: tuple[str, int]) -> None:
        try:
            connect(address, timeout)
        except Exception as exc:
            with lock:
                failed[address] = _why(exc)

    threads = [threading.Thread(target=one, args=(a,), daemon=True) for a in addresses]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 1.0)
    with lock:
        for address, t in zip(addresses, threads, strict=True):
            if t.is_alive():
                failed.setdefault(address, f"no answer within {timeout:g} s")
        return {h.role: f"{h.label}: {failed[h.address]}" for h in hosts if h.address in failed}


def check_network(ctx: Context, connect: Connect = tcp_connect) -> Outcome:
    hosts = hosts_for(ctx.settings, ctx.plan.use_tailnet)
    if not hosts:
        return Outcome(Status.PASS, "nothing to reach: this run calls no remote host")
    unreachable = probe(hosts, connect)
    data = {"hosts": {h.role: h.label for h in hosts}, "unreachable": unreachable}
    if not unreachable:
        return Outcome(Status.PASS, f"{len(hosts)} host(s) answer: "
                       + ", ".join(h.label for h in hosts), data=data)
    reasons = "; ".join(dict.fromkeys(unreachable.values()))  # one line per host
    if len(unreachable) == len(hosts):
        detail = f"no host answers (is this machine offline?): {reasons}"
    else:
        detail = f"unreachable: {reasons}"
    return Outcome(Status.FAIL, detail,
                   "check the network (VPN, proxy, DNS), then run it again",
                   {**data, "transient": True})

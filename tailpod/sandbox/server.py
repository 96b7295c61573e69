"""Compose the sandbox: one loopback server per emulator, the admin API, and optional stand-ins.

`start_sandbox()` is the Python API (tests, `tailpod demo`); `tailpod sandbox serve` wraps it.
The registry, hub and tailscale stand-ins are written by other modules with the shape
`serve(host, port, **config) -> (server, url)`; they are mounted when importable.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import tempfile
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailpod.sandbox.admin import AdminApi
from tailpod.sandbox.cloud import DEFAULT_RUNPOD_KEY, DEFAULT_VAST_KEY, SandboxCloud
from tailpod.sandbox.faults import Fault
from tailpod.sandbox.http import serve_router
from tailpod.sandbox.podhost import PodHost
from tailpod.sandbox.runpod_api import RunPodEmulator
from tailpod.sandbox.vast_api import VastEmulator

# name -> module with `serve(host, port, **config) -> (server, url)`
STAND_INS = {
    "registry": "tailpod.sandbox.image_registry",
    "hub": "tailpod.sandbox.hub",
    "tailscale": "tailpod.sandbox.tailscale",
}


@dataclass
class Sandbox:
    cloud: SandboxCloud
    runpod_url: str
    vast_url: str
    admin_url: str
    extra_urls: dict[str, str] = field(default_factory=dict)
    runpod_key: str = DEFAULT_RUNPOD_KEY
    vast_key: str = DEFAULT_VAST_KEY
    _servers: list[Any] = field(default_factory=list, repr=False)
    _tmpdir: Path | None = field(default=None, repr=False)
    closed: bool = False
    # the SSH client config the Tailscale stand-in keeps (tailpod reads it as TAILPOD_SSH_CONFIG)
    ssh_config: Path | None = None

    def meter(self) -> dict[str, Any]:
        """Billing snapshot: `billing_count`, `billing_now` rows, `total_accrued_usd`, …"""
        return self.cloud.meter.snapshot()

    def billing_now(self) -> list[dict[str, Any]]:
        return list(self.meter()["billing_now"])

    def add_fault(self, kind: str, **fields: Any) -> Fault:
        """Add a fault; the returned object counts its hits in `fired` (tests assert on it)."""
        return self.cloud.faults.add({"kind": kind, **fields})

    def clear_faults(self) -> None:
        self.cloud.faults.clear()

    def set_account(self, provider: str, key: str, balance: float = 100.0,
                    restricted: bool = False) -> None:
        self.cloud.set_account(provider, key, balance, restricted)

    def urls(self) -> dict[str, str]:
        return {"runpod": self.runpod_url, "vast": self.vast_url, "admin": self.admin_url,
                **self.extra_urls}

    def env(self) -> dict[str, str]:
        """Environment that points tailpod (and the vendors' clients) at this sandbox."""
        env = {
            "TAILPOD_RUNPOD_URL": self.runpod_url,
            "TAILPOD_VAST_URL": self.vast_url,
            "RUNPOD_API_BASE_URL": self.runpod_url,
            "VAST_URL": self.vast_url,
            "RUNPOD_API_KEY": self.runpod_key,
            "VAST_API_KEY": self.vast_key,
            # First contact's bounds (provision/runpod/first_contact.py): the emulated meter
            # accrues from create, so a two-second hold measures it; the live default is 90 s.
            "TAILPOD_FIRST_CONTACT_BOOT_S": "60",
            "TAILPOD_FIRST_CONTACT_HOLD_S": "2",
            "TAILPOD_FIRST_CONTACT_GONE_S": "30",
            "TAILPOD_FIRST_CONTACT_POLL_S": "0.5",
        }
        names = {"registry": "TAILPOD_REGISTRY_URL", "hub": "TAILPOD_HF_URL",
                 "tailscale": "TAILPOD_TAILSCALE_URL"}
        for name, url in self.extra_urls.items():
            if name in names:
                env[names[name]] = url
        if "registry" in self.extra_urls:
            # The stand-in registry issues its own tokens (Docker Hub uses auth.docker.io).
            env["TAILPOD_REGISTRY_AUTH_URL"] = self.extra_urls["registry"]
        if "tailscale" in self.extra_urls:
            # Every credential the emulators accept: the Tailscale stand-in's API token and its
            # seeded auth key (ephemeral, pre-approved, tag:tailpod).
            from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY

            env["TAILSCALE_API_KEY"] = DEFAULT_API_TOKEN
            env["TAILSCALE_AUTH_KEY"] = DEFAULT_AUTH_KEY
            if self.ssh_config is not None:
                # where each device's sshd really listens: tailpod's general SSH client config
                env["TAILPOD_SSH_CONFIG"] = str(self.ssh_config)
        return env

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.cloud.shutdown()
        finally:
            # the servers stop even when a pod's stop failed; shutdown() waits for each
            # server's poll loop: stop them side by side.
            stoppers = [threading.Thread(target=_stop_server, args=(s,), daemon=True)
                        for s in self._servers]
            for t in stoppers:
                t.start()
            for t in stoppers:
                t.join(timeout=5.0)
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()


def _stop_server(server: Any) -> None:
    with contextlib.suppress(Exception):
        server.shutdown()
    with contextlib.suppress(Exception):
        server.server_close()


def _mount_stand_ins(host: str, config: dict[str, dict[str, Any]], servers: list[Any],
                     urls: dict[str, str], skipped: dict[str, str]) -> None:
    for name, module_name in STAND_INS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                skipped[name] = "not installed"
                continue
            raise
        serve = getattr(module, "serve", None)
        if serve is None:
            skipped[name] = "module has no serve()"
            continue
        options = dict(config.get(name, {}))
        port = int(options.pop("port", 0))
        server, url = serve(host, port, **options)
        servers.append(server)
        urls[name] = url


def start_sandbox(
    host: str = "127.0.0.1",
    *,
    runpod_port: int = 0,
    vast_port: int = 0,
    admin_port: int = 0,
    runpod_keys: dict[str, float] | None = None,
    vast_keys: dict[str, float] | None = None,
    start_delay_s: float = 0.3,
    workdir: Path | None = None,
    pod_host: PodHost | None = None,
    run_commands: bool = True,
    stand_ins: bool = True,
    stand_in_config: dict[str, dict[str, Any]] | None = None,
    pod_host_factory: Callable[[Path, dict[str, str]], PodHost] | None = None,
    sshd: bool = False,
    graphql_retired: bool = False,
) -> Sandbox:
    """Start the sandbox cloud on loopback ports (0 = pick free ones) and return its handle.

    `runpod_keys` / `vast_keys` map accepted API keys to starting balances; by default one key
    each (`DEFAULT_RUNPOD_KEY`, `DEFAULT_VAST_KEY`) with $100.
    `pod_host_factory(workdir, urls)` builds the PodHost once the stand-ins' URLs are known (how
    pods become real hosts); `sshd=True` uses the SSH layer's sshd-per-pod host when installed.
    `graphql_retired=True` removes RunPod's GraphQL endpoint (404), as its retirement will.
    """
    tmpdir = None
    if workdir is None:
        tmpdir = Path(tempfile.mkdtemp(prefix="tailpod-sandbox-"))
        workdir = tmpdir
    cloud = SandboxCloud(workdir, start_delay_s=start_delay_s, pod_host=pod_host,
                         run_commands=run_commands)
    cloud.graphql_retired = graphql_retired
    rp_keys = runpod_keys if runpod_keys is not None else {DEFAULT_RUNPOD_KEY: 100.0}
    va_keys = vast_keys if vast_keys is not None else {DEFAULT_VAST_KEY: 100.0}
    for key, balance in rp_keys.items():
        cloud.set_account("runpod", key, balance)
    for key, balance in va_keys.items():
        cloud.set_account("vast", key, balance)
    servers: list[Any] = []
    try:
        rp_server, runpod_url = serve_router(RunPodEmulator(cloud).router, host, runpod_port,
                                             "runpod")
        servers.append(rp_server)
        va_server, vast_url = serve_router(VastEmulator(cloud).router, host, vast_port, "vast")
        servers.append(va_server)
        urls: dict[str, str] = {"runpod": runpod_url, "vast": vast_url}
        extra: dict[str, str] = {}
        skipped: dict[str, str] = {}
        config = {name: dict(options) for name, options in (stand_in_config or {}).items()}
        ssh_config = Path(config.setdefault("tailscale", {}).setdefault(
            "ssh_config", Path(workdir) / "tailnet_ssh_config"))
        if stand_ins:
            _mount_stand_ins(host, config, servers, extra, skipped)
        if sshd and pod_host_factory is None:
            pod_host_factory = _sshd_factory(run_commands)
        if pod_host_factory is not None:
            cloud.host = pod_host_factory(workdir, {**urls, **extra})
        admin = AdminApi(cloud, urls)
        ad_server, admin_url = serve_router(admin.router, host, admin_port, "admin")
        servers.append(ad_server)
        urls.update(extra)
        urls["admin"] = admin_url
    except BaseException:
        cloud.shutdown()
        for server in servers:
            with contextlib.suppress(Exception):
                server.shutdown()
                server.server_close()
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    return Sandbox(
        cloud=cloud, runpod_url=runpod_url, vast_url=vast_url, admin_url=admin_url,
        extra_urls=extra, runpod_key=next(iter(rp_keys), DEFAULT_RUNPOD_KEY),
        vast_key=next(iter(va_keys), DEFAULT_VAST_KEY), _servers=servers, _tmpdir=tmpdir,
        ssh_config=ssh_config if "tailscale" in extra else None,
    )


def _sshd_factory(run_commands: bool) -> Callable[[Path, dict[str, str]], PodHost]:
    try:
        module = importlib.import_module("tailpod.sandbox.sshd")
    except ModuleNotFoundError as exc:
        raise RuntimeError("sshd pod hosts need tailpod.sandbox.sshd") from exc

    def factory(workdir: Path, urls: dict[str, str]) -> PodHost:
        host: PodHost = module.SshdPodHost(workdir, tailscale_url=urls.get("tailscale"),
                                           hf_url=urls.get("hub"), run_commands=run_commands)
        return host

    return factory


def admin_call(admin_url: str, method: str, path: str, body: Any = None,
               timeout: float = 5.0) -> Any:
    """Call the admin API from another process (tests against `tailpod sandbox serve`)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(admin_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback only
        return json.loads(resp.read().decode() or "null")

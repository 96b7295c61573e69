"""Provider `ssh`: your own machine over SSH, as dstack's SSH fleets: nothing is rented.

The box is named by `up --provider ssh --host user@host[:port]` (TAILPOD_SSH_HOST). tailpod reaches
it over one paramiko session whose host key is pinned on first contact (provision/ssh), runs the
same pod agent there as on a rented pod (agent_client/driver.py), and `down` stops the engine
through the agent and proves the engine's process group gone and its port closed on the box. The
box bills nothing through tailpod (`tailpod cost --own` prices owned hardware). A pod id names the
box and the run, `ssh://user@host:port/<run tag>`, so teardown, status and recovery can reach the
box from the ledger's record alone. The box serves one tailpod engine at a time: the agent keeps
one engine state per box, and a marker file says which run holds it.
"""

from __future__ import annotations

import getpass
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tailpod.agent.bootstrap.engine import STATE_FILE
from tailpod.agent_client.driver import PodAgent, SshTransport
from tailpod.config import Settings
from tailpod.errors import ConfigError, ProviderError, TailpodError
from tailpod.provision.apiclient import time_left
from tailpod.provision.base import (
    BillingEvidence,
    Offer,
    PodInfo,
    PodSpec,
    PodState,
    ProofCheck,
    Provider,
)
from tailpod.provision.ssh.client import SshTarget, open_ssh

SCHEME = "ssh://"
RUN_MARKER = "box-run"  # in the agent's state directory: the run tag that holds the box
_ADDRESS = re.compile(r"(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9._-]+)(?::(?P<port>\d+))?")
HOST_HINT = "pass --host user@host[:port] (or set TAILPOD_SSH_HOST), e.g. --host ubuntu@gpu-box"


@dataclass(frozen=True)
class BoxAddress:
    user: str
    host: str
    port: int = 22

    @classmethod
    def parse(cls, text: str | None) -> BoxAddress:
        """`user@host[:port]`; the user defaults to yours, the port to 22."""
        match = _ADDRESS.fullmatch((text or "").strip())
        if not text or match is None:
            raise ConfigError(f"--host {text!r} is not user@host[:port]", hint=HOST_HINT)
        port = int(match["port"]) if match["port"] else 22
        if not 1 <= port <= 65535:
            raise ConfigError(f"--host {text!r}: port {port} is outside 1-65535", hint=HOST_HINT)
        return cls(user=match["user"] or getpass.getuser(), host=match["host"], port=port)

    @property
    def target(self) -> SshTarget:
        return SshTarget(self.host, self.port, self.user)

    def pod_id(self, run_tag: str) -> str:
        return f"{SCHEME}{self.user}@{self.host}:{self.port}/{run_tag}"

    @classmethod
    def from_pod_id(cls, pod_id: str) -> tuple[BoxAddress, str]:
        if not pod_id.startswith(SCHEME) or "/" not in pod_id[len(SCHEME):]:
            raise ProviderError(f"{pod_id!r} is not an SSH box pod id ({SCHEME}user@host:port/tag)")
        where, run_tag = pod_id[len(SCHEME):].split("/", 1)
        return cls.parse(where), run_tag


class SshBoxProvider(Provider):
    name = "ssh"

    def __init__(self, settings: Settings, *, connect_s: float = 10.0,
                 state_dir: str | None = None) -> None:
        self.settings = settings
        self.connect_s = connect_s
        # The agent's directory on the box, as `up` recorded it (PodExtra.pod_state_dir): the
        # manual stop names the engine record there, since the box may be out of reach.
        self.state_dir = state_dir

    # -- reaching the box ---------------------------------------------------------------------
    def agent(self, box: BoxAddress) -> PodAgent:
        """The box's pod agent over one pinned SSH session (close it when done)."""
        left = time_left()  # the command's --timeout holds over SSH as over the clouds' APIs
        if left is not None and left <= 0:
            raise ProviderError(f"the deadline passed before {box.host} could be asked")
        wait = self.connect_s if left is None else min(self.connect_s, left)
        session = open_ssh(self.settings, box.target, wait_s=wait)
        try:
            return PodAgent(SshTransport(session))
        except BaseException:
            session.close()
            raise

    @staticmethod
    def _run(agent: PodAgent, command: str) -> tuple[int, str]:
        done = agent.transport.execute(["sh", "-c", command], b"", None, 60)
        return done.exit_status, done.stdout

    @classmethod
    def claim(cls, agent: PodAgent, run_tag: str) -> None:
        """Mark the box as this run's (before its engine starts)."""
        marker = shlex.quote(f"{agent.state_dir}/{RUN_MARKER}")
        status, _ = cls._run(agent, f"printf %s {shlex.quote(run_tag)} > {marker}")
        if status != 0:
            raise ProviderError(f"could not write {RUN_MARKER} in {agent.state_dir} on the box")

    @classmethod
    def holder(cls, agent: PodAgent) -> str | None:
        status, out = cls._run(agent, f"cat {shlex.quote(agent.state_dir + '/' + RUN_MARKER)}"
                                      " 2>/dev/null")
        return (out.strip() or None) if status == 0 else None

    @classmethod
    def port_open(cls, agent: PodAgent, host: str, port: int) -> bool:
        probe = ("import socket,sys; s=socket.socket(); s.settimeout(2); "
                 f"sys.exit(0 if s.connect_ex(({host!r}, {int(port)})) == 0 else 1)")
        status, _ = cls._run(agent, f"python3 -c {shlex.quote(probe)}")
        return status == 0

    def _configured(self) -> BoxAddress | None:
        return BoxAddress.parse(self.settings.ssh_host) if self.settings.ssh_host else None

    def manual_stop_steps(self, pod_id: str) -> list[str]:
        """What `down` prints when it could not prove the box's engine stopped: the engine
        record where `up` found the agent's directory (else where the agent puts it:
        agent_client/layout.py POD_STATE)."""
        box, _ = BoxAddress.from_pod_id(pod_id)
        where = (f"{self.state_dir}/{STATE_FILE}" if self.state_dir
                 else f"${{TAILPOD_POD_HOME:-$HOME}}/.tailpod/{STATE_FILE}")
        return [f"ssh -p {box.port} {box.user}@{box.host}",
                f"kill the process group whose pgid is in {where} there "
                "(kill -TERM -PGID), then check the engine's port is closed"]

    # -- the Provider contract ----------------------------------------------------------------
    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Offer]:
        box = self._configured()
        if box is None:
            return []
        return [Offer(self.name, f"your box {box.host}", gpu_count, 0.0, available=True,
                      offer_id=box.pod_id(""))]

    def create(self, spec: PodSpec) -> PodInfo:
        raise ProviderError("an SSH box is claimed by `up --provider ssh --host`, never created")

    def get(self, pod_id: str) -> PodInfo | None:
        box, run_tag = BoxAddress.from_pod_id(pod_id)
        with self.agent(box) as agent:
            if self.holder(agent) != run_tag:
                return None
            status = agent.engine_status()
        if not status.get("running"):
            return None
        state: dict[str, Any] = status.get("state") or {}
        return PodInfo(pod_id=pod_id, run_tag=run_tag, state=PodState.RUNNING,
                       gpu_type=f"your box {box.host}", price_per_hr=0.0,
                       ssh_host=box.host, ssh_port=box.port,
                       detail={"port": state.get("port"), "pgid": state.get("pgid")})

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        box = self._configured()
        if box is None:
            return []
        with self.agent(box) as agent:
            holder = self.holder(agent)
        if holder is None or (run_tag is not None and holder != run_tag):
            return []
        info = self.get(box.pod_id(holder))
        return [info] if info is not None else []

    def terminate(self, pod_id: str) -> None:
        box, run_tag = BoxAddress.from_pod_id(pod_id)
        with self.agent(box) as agent:
            holder = self.holder(agent)
            if holder not in (None, run_tag):
                return  # another run holds the box now: this run's engine is long gone
            if not agent.engine_stop() and agent.engine_status().get("running"):
                raise ProviderError(f"the engine on {box.host} did not stop",
                                    hint=f"tailpod ssh {run_tag}, then kill its process group")
            self._run(agent, f"rm -f {shlex.quote(agent.state_dir + '/' + RUN_MARKER)}")

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        """Asked of the box itself: the engine stopped and its port closed there. A box that
        cannot be reached proves nothing (the proof fails and says why)."""
        if pod_id is None:
            return BillingEvidence([ProofCheck("box known", False, "no box recorded for this run")])
        box, _ = BoxAddress.from_pod_id(pod_id)
        try:
            with self.agent(box) as agent:
                holder = self.holder(agent)
                if holder not in (None, run_tag):  # the box serves another run: not this one's
                    return BillingEvidence([
                        ProofCheck("engine stopped", True, f"{box.host} now serves {holder}, "
                                   f"not {run_tag}: this run's engine is gone"),
                        ProofCheck("no charges", True,
                                   "your own box: nothing is rented through tailpod")])
                status = agent.engine_status()
                state: dict[str, Any] = status.get("state") or {}
                port = int(state.get("port") or 0)
                host = str(state.get("host") or "127.0.0.1")
                port_open = bool(port) and self.port_open(agent, host, port)
        except TailpodError as exc:
            return BillingEvidence([ProofCheck("box reachable", False,
                                               f"could not ask {box.host}: {exc.message}")])
        still = [f"the engine on {box.host} (tailpod ssh {run_tag})"] if status.get(
            "running") else []
        checks = [
            ProofCheck("engine stopped", not status.get("running"),
                       f"the pod agent on {box.host} reports the engine "
                       + ("still running" if status.get("running") else "not running")),
            ProofCheck("port closed", not port_open,
                       f"{host}:{port} on {box.host} " + ("accepts connections" if port_open
                                                          else "refuses connections")
                       if port else "no engine port recorded on the box"),
            ProofCheck("no charges", True, "your own box: nothing is rented through tailpod"),
        ]
        return BillingEvidence(checks=checks, still_billing=still)

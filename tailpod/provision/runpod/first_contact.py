"""First contact: the RunPod behaviours no vendor text settles, verified live on a CPU pod.

Two assumptions every RunPod rental rests on are undocumented (docs/providers.md, "unverified"):
whether v2 `args` decodes tailpod's JSON start form `{"entrypoint": [...], "cmd": [...]}`
(`BaseContainerConfig.args` says only "Arguments passed to the container entrypoint"), and
whether the pod-scoped `RUNPOD_API_KEY` may terminate its own pod through REST v2 (the dead-man's
first routes, tailpod/agent/bootstrap/terminate.py). A third number decides what a billing proof
can show: how long the account's meter (`GET /v2/billing/pods`) takes to show a pod's spend.

`run_first_contact` rents the cheapest CPU pod (`CreatePodRequest.cpu`, a `CreateCpuConfig`
`{id, vcpuCount}`; flavors from `GET /v2/catalog/cpus`: runpod/docs
api-reference-v2/openapi.json @ a900806e253c4f8c16da27d1a4370e72456da4cb) with the image and the
start-command form tailpod would use. The start command prints a marker (fact 1), holds while the
meter is read (fact 3), then deletes its own pod with the pod-scoped key through the REST routes
of the dead-man's table and prints each answer (fact 2); tailpod watches the pod go. Every wait is
bounded, the pod is created and torn down by the money-safe lifecycle (create_pod_safely /
teardown), so it is proven down whatever happens, and the cost is said before and after.

The facts are kept in TAILPOD_HOME/first-contact.json per account (a hash of the key, never the
key) and image; check-requirements shows them and `up` acts on a refused one (preflight).
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tailpod.agent.bootstrap.terminate import TERMINATE_ROUTES
from tailpod.config import Settings, ttl_deadline
from tailpod.errors import ConfigError, ProviderError, TailpodError
from tailpod.ledger import Ledger, PodRecord, new_run_tag
from tailpod.provision.base import PodInfo, PodSpec, PodState
from tailpod.provision.runpod.facts import (  # noqa: F401 - re-exported
    FACTS_FILE,
    FACTS_SCHEMA,
    FirstContactFacts,
    account_id,
    facts_for,
    load_all,
    run_stamp,
    save,
)
from tailpod.provision.runpod.provider import RunPodProvider, start_form
from tailpod.secrets import redact

MARKER = "tailpod-first-contact"
PURPOSE = "first-contact check"  # the probe pod's label in the ledger (newcomer 2.25)
# The pod-side REST routes of the dead-man's table; GraphQL is left out on purpose: the fact in
# doubt is whether REST v2 takes the pod key (GraphQL retires in early 2027).
SELF_KILL_ROUTES = [(m, p, b) for m, p, b in TERMINATE_ROUTES["runpod"] if "graphql" not in p]
SELF_KILL_CODE = (
    "import json,os,sys,urllib.request as u\n"
    "i=os.environ.get('RUNPOD_POD_ID','');k=os.environ.get('RUNPOD_API_KEY','')\n"
    "for m,p,b in json.loads(sys.argv[2]):\n"
    " d=None if b is None else json.dumps(b).encode()\n"
    " r=u.Request(sys.argv[1]+p.replace('{id}',i),d,{'Authorization':'Bearer '+k,"
    "'Content-Type':'application/json'},method=m)\n"
    " try:c=u.urlopen(r,timeout=30).status\n"
    " except u.HTTPError as e:c=e.code\n"
    " except Exception:c=0\n"
    " print(sys.argv[3],'route',m,p,c,flush=True)\n"
    " if 199<c<300:break\n"
)


@dataclass(frozen=True)
class FirstContactTimings:
    """Bounds of each step (seconds). The live defaults keep a CPU pod's bill under a cent."""

    boot_s: float = 900.0  # until the marker shows in the container log (an image pull)
    hold_s: float = 90.0  # the pod waits this long before deleting itself: the meter window
    gone_s: float = 90.0  # after the hold, how long the pod has to vanish by its own hand
    poll_s: float = 5.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> FirstContactTimings:
        """TAILPOD_FIRST_CONTACT_{BOOT,HOLD,GONE,POLL}_S override the defaults (the sandbox)."""
        values: dict[str, float] = {}
        for name in ("boot", "hold", "gone", "poll"):
            raw = environ.get(f"TAILPOD_FIRST_CONTACT_{name.upper()}_S")
            if raw:
                try:
                    values[f"{name}_s"] = float(raw)
                except ValueError:
                    raise ConfigError(f"TAILPOD_FIRST_CONTACT_{name.upper()}_S={raw!r} is "
                                      "not a number of seconds") from None
        return replace(cls(), **values)

    def bound_s(self) -> float:
        return self.boot_s + self.hold_s + self.gone_s


def probe_script(nonce: str, api_url: str, hold_s: float, python: str = "python3") -> str:
    """The probe pod's shell script: the marker, a hold, the self-kill, then idle."""
    tag = f"{MARKER}-{nonce}"
    kill = shlex.join([python, "-c", SELF_KILL_CODE, api_url.rstrip("/"),
                       json.dumps(SELF_KILL_ROUTES, separators=(",", ":")), tag])
    # The echoed marker is split by an empty quote (`-''nonce`), so only a shell that ran the
    # script prints it whole: a log line that merely quotes the command text never matches.
    said = f"{MARKER}-''{nonce}"
    return (f"echo {said} start; sleep {max(0.0, hold_s):g}; {kill}; "
            f"echo {said} self-kill-done; exec sleep 3600")


class RunPodCpuProbe(RunPodProvider):
    """RunPod, creating CPU pods: `spec.gpu_preference[0]` is the CPU flavor id and
    `spec.gpu_count` the vCPU count (the lifecycle's create and teardown need no change)."""

    def cpu_catalog(self) -> list[dict[str, Any]]:
        response = self.api.call("GET", "/v2/catalog/cpus", "reading the CPU catalog",
                                 params={"include": "AVAILABILITY", "product": "POD"})
        body = self.api.body_of(response)
        cpus = body.get("cpus") if isinstance(body, dict) else None
        if not isinstance(cpus, list):
            raise ProviderError("RunPod: the CPU catalog answer has no `cpus` list")
        return [c for c in cpus if isinstance(c, dict) and c.get("id")]

    def cheapest_cpu(self) -> tuple[str, int, float]:
        """(flavor id, vCPU count, $/h) of the cheapest CPU pod on offer."""
        best: tuple[float, str, int] | None = None
        for c in self.cpu_catalog():
            if c.get("availability") == "NONE":
                continue
            low = int((c.get("vcpu") or {}).get("min") or 2)
            vcpus = 2
            while vcpus < low:  # vcpuCount "must be a power of two", at least 2
                vcpus *= 2
            per = (c.get("price") or {}).get("securePerVcpu")
            if not isinstance(per, (int, float)):
                continue
            rate = round(float(per) * vcpus, 4)
            if best is None or rate < best[0]:
                best = (rate, str(c["id"]), vcpus)
        if best is None:
            raise ProviderError("RunPod offers no CPU pod now; the first-contact check needs one",
                                hint="run it again later")
        return best[1], best[2], best[0]

    def create(self, spec: PodSpec) -> PodInfo:
        cpu_id, vcpus = spec.gpu_preference[0], spec.gpu_count
        body = self._create_body(spec, "unused")
        del body["gpu"]
        body["cpu"] = {"id": cpu_id, "vcpuCount": vcpus}
        what = f"creating a CPU pod ({cpu_id} x{vcpus})"
        reasons: list[str] = []

        def created(status: int, answer: Any) -> str | None:
            if status in (200, 201) and isinstance(answer, dict) and answer.get("id"):
                return str(answer["id"])
            return None

        def refused(status: int, answer: Any, detail: str) -> str:
            raise ProviderError(f"RunPod refused the first-contact CPU pod (HTTP {status}): "
                                f"{detail}; nothing was created")

        pod_id = self._create_candidate(
            spec.run_tag, cpu_id, reasons,
            send=lambda: self.api.send("POST", "/v2/pods", what, json=body),
            created=created, refused=refused, retry_ok=(200, 201))
        if pod_id is None:
            raise ProviderError(f"RunPod: {what} failed: {'; '.join(reasons) or 'no answer'}")
        info = self.get(pod_id) or PodInfo(pod_id, spec.run_tag, PodState.PENDING)
        return info


def image_entrypoint(settings: Settings, image: str, notes: list[str] | None = None
                     ) -> tuple[str, ...] | None:
    """The image's ENTRYPOINT from its config in the registry; None (noted) if unreadable."""
    from tailpod.engines.image import read_image_facts

    try:
        return read_image_facts(image, settings).entrypoint
    except TailpodError as exc:
        if notes is not None:
            notes.append(f"the image config could not be read ({exc.message}); the JSON "
                         "start form was used")
        return None


def _log_lines(provider: RunPodProvider, pod_id: str) -> list[str]:
    try:
        return provider.container_log(pod_id, tail=500) or []
    except TailpodError:
        return []


def run_first_contact(
    settings: Settings,
    image: str,
    *,
    timings: FirstContactTimings | None = None,
    provider: RunPodCpuProbe | None = None,
    say: Callable[[str], None] = lambda _line: None,
    policy: Any = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    image_label: str | None = None,
    entrypoint: tuple[str, ...] | None | bool = True,
) -> FirstContactFacts:
    """Rent `image`, verify the three facts, prove the pod down, record and return the facts
    (kept under `image_label`, the reference as the user gives it, default `image`).

    The start command takes the form `up` would send for this image: its ENTRYPOINT is read
    from the registry (`entrypoint=True`, the default) unless given; None = unknown (JSON form).
    """
    from tailpod.provision.create import create_pod_safely
    from tailpod.provision.teardown import run_dir_for, teardown

    timings = timings or FirstContactTimings()
    key = settings.runpod_api_key.reveal() if settings.runpod_api_key else None
    notes: list[str] = []
    if entrypoint is True:
        entrypoint = image_entrypoint(settings, image, notes)
    known_entry = entrypoint if isinstance(entrypoint, tuple) else None
    facts = FirstContactFacts(account=account_id(key), image=image_label or image,
                              checked_at=time.time(), start_form=start_form(known_entry),
                              start_command_ran=None, pod_key_self_kill=None, notes=notes)
    provider = provider or RunPodCpuProbe(settings)
    cpu_id, vcpus, rate = provider.cheapest_cpu()
    facts.cpu = f"{cpu_id} x{vcpus}"
    facts.cost_estimate_usd = round(rate * timings.bound_s() / 3600.0, 6)
    say(f"first contact: renting a RunPod CPU pod ({cpu_id}, {vcpus} vCPU) at ${rate:.4f}/h "
        f"with {image}; at most {timings.bound_s():.0f} s, about "
        f"${facts.cost_estimate_usd:.6f} at most (cost before)")
    nonce = secrets.token_hex(4)
    tag = f"{MARKER}-{nonce}"
    run_tag = new_run_tag()
    facts.run_tag = run_tag
    spec = PodSpec(run_tag=run_tag, gpu_preference=[cpu_id], image=image,
                   start_command=["/bin/sh", "-c", probe_script(nonce, provider.base_url,
                                                                timings.hold_s)],
                   gpu_count=vcpus, env={"TAILPOD_RUN_TAG": run_tag}, disk_gb=20, ports=[],
                   image_entrypoint=known_entry, ttl_at=ttl_deadline(1.0, time.time()))
    ledger = Ledger(Path(settings.home))
    record = PodRecord(run_tag=run_tag, provider=provider.name)
    record.extra.purpose = PURPOSE  # `status` names it: the user never asked for this pod
    started = clock()
    info: PodInfo | None = None
    try:
        info = create_pod_safely(provider, spec, ledger, record, policy=policy)
        facts.pod_id = info.pod_id
        created = clock()
        # Fact 1: the marker in the container log, within the boot bound.
        lines: list[str] = []
        while clock() - created < timings.boot_s:
            lines = _log_lines(provider, info.pod_id)
            if any(f"{tag} start" in line for line in lines):
                facts.start_command_ran = True
                break
            sleep(timings.poll_s)
        if not facts.start_command_ran:
            facts.start_command_ran = False
            shown = " | ".join(redact(line)[:160] for line in lines[-3:]) or "an empty log"
            facts.notes.append(f"no marker within {timings.boot_s:.0f} s; the log ends: {shown}")
            return facts
        say("first contact: the start command ran (marker in the container log)")
        # Fact 3, while the pod holds: when does the billing history first show spend?
        marked = clock()
        while clock() - marked < timings.hold_s:
            billed = provider.billed_so_far(info.pod_id)
            if billed is not None and billed > 0 and facts.meter_delay_s is None:
                facts.meter_delay_s = round(clock() - created, 1)
                break
            sleep(timings.poll_s)
        facts.meter_bound_s = round(clock() - created, 1)
        # Fact 2: the pod deletes itself with its own key; tailpod watches it go.
        deadline = marked + timings.hold_s + timings.gone_s
        gone = False
        while clock() < deadline:
            if provider.get(info.pod_id) is None:
                gone = True
                break
            lines = _log_lines(provider, info.pod_id)
            if any(f"{tag} self-kill-done" in line for line in lines):
                break
            sleep(timings.poll_s)
        lines = _log_lines(provider, info.pod_id) if not gone else lines
        facts.self_kill_answers = [" ".join(line.split()[2:]) for line in lines
                                   if line.startswith(f"{tag} route ")]
        if gone:
            facts.pod_key_self_kill = True
        elif facts.self_kill_answers:
            facts.pod_key_self_kill = False
        else:
            facts.notes.append("the self-kill printed nothing (no python3 in the image?)")
        if facts.meter_delay_s is None and gone:
            billed = provider.billed_so_far(info.pod_id)
            if billed is not None and billed > 0:
                facts.meter_delay_s = round(clock() - created, 1)
        return facts
    finally:
        proven = False
        try:
            current = ledger.get(run_tag)
            if current is not None:
                teardown(provider, ledger, current, run_dir_for(settings, run_tag), policy=policy)
            proven = True
        finally:
            spent = provider.billed_so_far(facts.pod_id) if facts.pod_id else None
            facts.cost_usd = round(spent if spent is not None
                                   else rate * (clock() - started) / 3600.0, 6)
            save(settings, facts)
            if proven:
                say(f"first contact: the pod is proven down; it cost ${facts.cost_usd:.6f} "
                    "(cost after)")
            else:  # never reassure without the proof: the teardown's error follows
                say(f"first contact: the pod is not proven down and may still bill; "
                    f"${facts.cost_usd:.6f} so far (tailpod down {run_tag})")


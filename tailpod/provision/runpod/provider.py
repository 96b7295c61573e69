"""RunPod through REST v2 (`/v2/pods`, `/v2/catalog/gpus`) and GraphQL only for account spend.

v2 places exactly one GPU type per create, so capacity fallback is a loop over the preference
list that classifies each answer (runpod/docs api-reference-v2/openapi.json @ a900806e): 422 is
our bug and never retried; 400 means "this candidate cannot be placed" (no capacity, or a rule):
next GPU; 402 stops everything; 403 skips a pool we cannot use; 429 waits for Retry-After; 5xx
retries the same GPU — but only after looking the run tag up, because a 5xx on create can leave a
billing pod behind.

Writes never go through the `runpod` package: it builds GraphQL documents by interpolating values
unescaped (runpod/runpod-python runpod/api/mutations/pods.py @ v1.12.0); tailpod sends JSON bodies
and GraphQL variables instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import shlex
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from tailpod.agent.bootstrap.terminate import TERMINATE_ROUTES
from tailpod.config import Settings
from tailpod.errors import AuthError, CapacityError, ConfigError, ProviderError
from tailpod.provision.apiclient import ApiError, ApiProvider, ApiTimings, summarize_body
from tailpod.provision.base import (
    TAILNET_KEY_SETTINGS,
    AccountFacts,
    BillingEvidence,
    Offer,
    PodInfo,
    PodSpec,
    PodState,
    ProofCheck,
    SupportsAccount,
    SupportsContainerLog,
    SupportsGpuNames,
    SupportsHiddenOffers,
    SupportsPodScopedTermination,
    SupportsSpendRate,
)
from tailpod.provision.gpu_names import cuda_floor, family_matches
from tailpod.provision.proof import (
    is_tailpod_tag,
    listed_check,
    meter_check,
    meter_window_s,
    others_check,
)
from tailpod.provision.runpod.facts import facts_for
from tailpod.provision.runpod.volumes import RunPodVolumes
from tailpod.secrets import redact, reveal_env

STATUS_MAP = {
    "PROVISIONING": PodState.PENDING,
    "STARTING": PodState.PENDING,
    "RUNNING": PodState.RUNNING,
    "EXITED": PodState.STOPPED,
    "ERROR": PodState.ERROR,
    "TERMINATED": PodState.TERMINATED,
}
CAPACITY_MARKERS = ("no longer any instances", "no instances currently available",
                    "not enough free gpus", "no instances available")
# RunPod's GraphQL API is deprecated and scheduled for retirement in "early 2027" (runpod/docs
# api-reference/overview.mdx). A retired endpoint may answer 404/410 or an error saying so;
# either way tailpod must carry on with REST v2 alone.
GRAPHQL_GONE_STATUSES = (404, 410)
PAGE_WORDS = ("token", "cursor", "next", "page")
# `ListPodsResponse` is `{"pods": [...]}` and REST v2 documents no pagination (runpod/docs
# api-reference-v2/openapi.json @ a900806e253c4f8c16da27d1a4370e72456da4cb). Should a list ever
# come in pages, the likeliest shape is Google's AIP-158 (`nextPageToken` in the answer, `pageToken`
# in the next request; https://google.aip.dev/158): that one is followed. Any other token-like
# field means a partial list tailpod cannot complete, and a partial list must never read as "the
# pod is gone", so it is refused.
NEXT_PAGE_FIELD = "nextPageToken"
PAGE_TOKEN_PARAM = "pageToken"
MAX_LIST_PAGES = 100
GRAPHQL_GONE_WORDS = ("retired", "deprecated", "no longer available", "no longer supported",
                      "sunset", "decommissioned")


def _next_page_token(body: dict[str, Any]) -> str | None:
    """The AIP-158 token to ask for the next page with; None on the last page. Refuses an answer
    whose only sign of paging is a field tailpod does not know how to follow."""
    token = body.get(NEXT_PAGE_FIELD)
    if isinstance(token, str) and token:
        return token
    paging = sorted(k for k in body if k not in ("pods", NEXT_PAGE_FIELD)
                    and body[k] not in (None, "") and any(w in k.lower() for w in PAGE_WORDS))
    if paging:
        raise ProviderError(
            f"RunPod: the pod list answer carries {', '.join(map(repr, paging))}, which looks "
            f"like a page token tailpod cannot follow (it follows `{NEXT_PAGE_FIELD}`); the "
            "published v2 API documents no pagination, so the list may be partial and is not used",
            hint="this is a tailpod limitation; please report it with the field name")
    return None


def created_epoch(text: object) -> float | None:
    """A pod's `createdAt` as epoch seconds: v2 types it `string`, `format: date-time` (RFC 3339,
    tests/integration/contracts/runpod/list_pods.json from the openapi @ a900806e); an answer of
    the older API had Go's default format ("2026-08-20 06:16:19.436 +0000 UTC",
    tailpod/sandbox/runpod_api.py go_time), read too. None for anything else: unknown, never a
    guess, so an adopted pod's uptime is not read from a misparsed time."""
    if not isinstance(text, str) or not text:
        return None
    try:
        at: datetime | None = datetime.fromisoformat(text)
    except ValueError:
        at = _go_time(text)
    if at is None or at.tzinfo is None:  # a time without its zone says nothing exact
        return None
    return at.timestamp()


def _go_time(text: str) -> datetime | None:
    for layout in ("%Y-%m-%d %H:%M:%S.%f %z UTC", "%Y-%m-%d %H:%M:%S %z UTC"):
        try:
            return datetime.strptime(text, layout)
        except ValueError:
            continue
    return None


def stated_rate(pod: PodInfo) -> float:
    """What a listed pod says it costs per hour, whatever its state. `price_per_hr` is read only
    once the pod runs (the price `up` records and caps), but a pod still PROVISIONING or STARTING
    already states its `cost` and may already bill: the proof must count it as explained spend,
    or a neighbour that is still starting reads as this pod billing on."""
    if pod.price_per_hr is not None:
        return pod.price_per_hr
    return pod.detail.get("stated_cost") or 0.0


class GraphQLUnavailable(ProviderError):
    """RunPod's GraphQL endpoint is gone (retired); REST v2 is all there is."""


SPEND_QUERY = "query TailpodSpend { myself { currentSpendPerHr clientBalance } }"
ACCOUNT_QUERY = ("query TailpodAccount { myself { clientBalance currentSpendPerHr "
                 "spendLimit } }")
POD_QUERY = (
    "query TailpodPod($podId: String!) { pod(input: {podId: $podId}) { id desiredStatus "
    "costPerHr } }"
)
def _names_of(catalog: dict[str, dict[str, Any]]) -> dict[str, tuple[str, ...]]:
    return {gpu_id: (str(g.get("name") or ""),) for gpu_id, g in catalog.items()}


def start_form(entrypoint: tuple[str, ...] | None) -> str:
    """"plain" for an image whose config has no ENTRYPOINT, else "json" (also when unknown)."""
    return "plain" if entrypoint is not None and not entrypoint else "json"


def start_command_args(argv: list[str], entrypoint: tuple[str, ...] | None = None) -> str:
    """The v2 `args` string that makes `argv` the container's whole process.

    v2 `args` is "Arguments passed to the container entrypoint" and v2 has no entrypoint field
    (runpod/docs api-reference-v2/openapi.json @ a900806e, BaseContainerConfig.args). On an
    image without an ENTRYPOINT (`entrypoint == ()`, read from its config) the arguments are the
    whole process, as Docker composes it, so a plain command line is sent: the documented
    reading. Only where an ENTRYPOINT must be replaced (or it is unknown) is RunPod's JSON form
    `{"cmd": [...], "entrypoint": [...]}` sent (documented for the console's start-command field,
    runpod/docs pods/templates/manage-templates.mdx:27-29; whether v2 `args` decodes it is what
    first contact verifies). Both parts are given, so nothing depends on whether an entrypoint
    override also clears the image's CMD.
    """
    if not argv:
        raise ValueError("an empty start command")
    if start_form(entrypoint) == "plain":
        return shlex.join(argv)
    split = 2 if len(argv) > 2 and argv[1] == "-c" else 1
    return json.dumps({"entrypoint": list(argv[:split]), "cmd": list(argv[split:])},
                      separators=(",", ":"))


def parse_log_events(text: str) -> list[str]:
    """Container log lines from a v2 logs answer: Server-Sent Events whose `data:` is
    `{"ts", "source", "line"}` (runpod/docs api-reference-v2/openapi.json, getPodLogs)."""
    lines: list[str] = []
    for raw in text.splitlines():
        if not raw.startswith("data:"):
            continue
        payload = raw[5:].strip()
        try:
            event = json.loads(payload)
        except ValueError:
            lines.append(payload)
            continue
        if isinstance(event, dict) and isinstance(event.get("line"), str):
            lines.append(event["line"])
    return lines


class RunPodProvider(ApiProvider, SupportsAccount, SupportsSpendRate, SupportsContainerLog,
                     SupportsPodScopedTermination, RunPodVolumes, SupportsGpuNames,
                     SupportsHiddenOffers):
    name = "runpod"
    key_setting = "runpod_api_key"
    url_setting = "runpod_url"
    needs_settings = TAILNET_KEY_SETTINGS
    console_url = "https://console.runpod.io/pods"
    label = "RunPod"
    pod_termination = "runpod"
    # REST v2 has no interruptible field (runpod/docs @ a900806e api-reference-v2/openapi.json);
    # REST v1's `interruptible` was retired on 2026-11-15 (api-reference-v2/migrate-from-v1.mdx:9)
    # and every spot page, GraphQL `podRentInterruptable` included, was removed from the docs
    # (runpod/docs 8e5aebdb, 2026-05-06). docs/providers.md "Spot".
    spot_route = None
    no_spot = ("RunPod documents no spot route any more: REST v2 has no interruptible pods, "
               "REST v1 was retired on 2026-11-15 and the spot docs were removed in May 2026 "
               "(docs/providers.md, Spot); rent on-demand, or --spot --provider vastai")

    def __init__(
        self,
        settings: Settings,
        *,
        timings: ApiTimings | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        cloud: str = "SECURE",
    ) -> None:
        super().__init__(settings, timings=timings, transport=transport, sleep=sleep)
        self.cloud = cloud
        self.settings = settings

    def meter_delay(self) -> tuple[float | None, str]:
        """(seconds, source) of this account's billing-history update delay: what first contact
        measured (pod created -> spend first shown), else unknown: runpod/docs @ a900806e states
        none (pods/pricing.mdx says only "billed by the second")."""
        for facts in facts_for(self.settings):
            if facts.meter_delay_s is not None:
                return facts.meter_delay_s, "measured by first contact"
        return None, "not documented by RunPod, not measured: run check-requirements --live"

    # -- catalog ----------------------------------------------------------------------------------
    def catalog(self, gpu_count: int = 1, min_cuda: str | None = None
                ) -> dict[str, dict[str, Any]]:
        """The GPU types, with availability scoped to `gpu_count`, the cloud and the CUDA floor
        (the higher of TAILPOD_MIN_CUDA and `min_cuda`, the image's): the same `minCudaVersion`
        the create sends, so a type the catalog calls available is one a create can place."""
        return self._catalog(gpu_count, cuda_floor(self.settings.min_cuda, min_cuda))

    def _catalog(self, gpu_count: int, floor: str | None) -> dict[str, dict[str, Any]]:
        params: dict[str, Any] = {"include": "AVAILABILITY", "product": "POD",
                                  "count": gpu_count, "cloud": self.cloud}
        if floor:  # listGpuTypes' minCudaVersion, "^\d+(\.\d+)?$" (v2 openapi @ a900806e)
            params["minCudaVersion"] = floor
        response = self.api.call("GET", "/v2/catalog/gpus", "reading the GPU catalog",
                                 params=params)
        body = self.api.body_of(response)
        gpus = body.get("gpus") if isinstance(body, dict) else None
        if not isinstance(gpus, list):
            raise ProviderError("RunPod: the GPU catalog answer has no `gpus` list")
        return {str(g["id"]): g for g in gpus if isinstance(g, dict) and "id" in g}

    @staticmethod
    def resolve_gpu(wanted: str, catalog: dict[str, dict[str, Any]]) -> str | None:
        """Catalog id for `wanted`, which may be the id ("NVIDIA A40"), the name ("A40") or a
        family that names one type only ("H200"); None for none or several. An exact id or name
        (any case) wins over a family (provision/gpu_names.py family_matches)."""
        matches = family_matches(wanted, _names_of(catalog))
        return matches[0] if len(matches) == 1 else None

    def filters(self) -> dict[str, Any]:
        """RunPod's one host filter tailpod sets: the CUDA floor (TAILPOD_MIN_CUDA, raised to the
        image's by `offer_settings`); the cloud is SECURE, the disk any size."""
        return {"min_cuda": cuda_floor(self.settings.min_cuda)}

    def hidden(self, gpu_names: list[str], gpu_count: int) -> dict[str, dict[str, int]]:
        """The types the catalog calls in stock without the CUDA floor and out of stock with it:
        their stock is on hosts whose driver is older than the image needs."""
        floor = cuda_floor(self.settings.min_cuda)
        if not floor:
            return {}
        bounded = self._catalog(gpu_count, floor)
        wanted = set(gpu_names)
        return {gpu_id: {"offers": 1, "cuda": 1}
                for gpu_id, g in self._catalog(gpu_count, None).items()
                if (not wanted or gpu_id in wanted)
                and g.get("availability") not in (None, "NONE")
                and (bounded.get(gpu_id) or {}).get("availability") == "NONE"}

    def gpu_names(self, gpu_count: int = 1) -> dict[str, str]:
        """Every GPU type in the catalog (its id) and its short name, stocked or not."""
        return {k: str(v.get("name") or "") for k, v in self.catalog(gpu_count).items()}

    def _unit_price(self, g: dict[str, Any]) -> float | None:
        price = g.get("price") or {}
        value = price.get("secure" if self.cloud == "SECURE" else "community")
        return float(value) if isinstance(value, (int, float)) else None

    def _resolve_all(self, prefs: list[str], catalog: dict[str, dict[str, Any]]) -> list[str]:
        resolved, unknown = [], []
        for pref in prefs:
            gpu_id = self.resolve_gpu(pref, catalog)
            if gpu_id is None:
                unknown.append(pref)
            elif gpu_id not in resolved:
                resolved.append(gpu_id)
        several = {u: family_matches(u, _names_of(catalog)) for u in unknown}
        several = {u: m for u, m in several.items() if len(m) > 1}
        if several:
            raise ConfigError(
                "; ".join(f"{u!r} names several RunPod GPU types: "
                          + ", ".join(repr(m) for m in matches) for u, matches in several.items()),
                hint="name the ones you want, in preference order (tailpod gpus --gpu "
                     f"{next(iter(several))!r} lists them with their prices)")
        if unknown:
            names = list(catalog) + [str(g.get("name")) for g in catalog.values()]
            hints = sorted({m for u in unknown for m in difflib.get_close_matches(u, names, 3)})
            raise ConfigError(
                f"unknown RunPod GPU type(s): {', '.join(repr(u) for u in unknown)}",
                hint=("did you mean " + ", ".join(repr(h) for h in hints)) if hints
                else "use an id from RunPod's catalog, e.g. 'NVIDIA GeForce RTX 4090'",
            )
        return resolved

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Offer]:
        catalog = self.catalog(gpu_count)
        out = []
        for pref in gpu_preference:
            gpu_id = self.resolve_gpu(pref, catalog)
            if gpu_id is None:
                matches = family_matches(pref, _names_of(catalog))
                detail: dict[str, Any] = {"error": "unknown GPU type"}
                if len(matches) > 1:
                    detail = {"error": "several GPU types", "matches": matches}
                out.append(Offer(self.name, pref, gpu_count, None, False, detail=detail))
                continue
            g = catalog[gpu_id]
            unit = self._unit_price(g)
            price = round(unit * gpu_count, 4) if unit is not None else None
            stock = g.get("availability")
            out.append(Offer(
                self.name, gpu_id, gpu_count, price, stock != "NONE", offer_id=None,
                gpu_memory_gb=g.get("memory"),
                detail={"stock": stock, "cloud": self.cloud,
                        "above_cap": bool(max_price is not None and price is not None
                                          and price > max_price)},
            ))
        return out

    # -- create -----------------------------------------------------------------------------------
    def _create_body(self, spec: PodSpec, gpu_id: str) -> dict[str, Any]:
        env = reveal_env(dict(spec.env))
        if spec.ssh_public_key:
            env.setdefault("PUBLIC_KEY", spec.ssh_public_key)
        body: dict[str, Any] = {
            "name": spec.run_tag,
            "image": spec.image,
            "gpu": {"id": gpu_id, "count": spec.gpu_count},
            "cloud": self.cloud,
            "disk": spec.disk_gb,
            "ports": [f"{p}/tcp" for p in sorted(set(spec.ports))],
            "env": env,
            "startSsh": True,
        }
        if spec.start_command:
            body["args"] = start_command_args(spec.start_command, spec.image_entrypoint)
        if spec.volume_id:  # attached at create only, in the volume's own data center
            body["mounts"] = {"network": [{"volumeId": spec.volume_id,
                                           "path": spec.volume_mount_path or
                                           self.volume_mount_path}]}
        if spec.data_center_ids:
            body["dataCenterIds"] = list(spec.data_center_ids)
        if spec.min_cuda:  # CreateGpuConfig.minCudaVersion, "^\d+\.\d+$"
            body["gpu"]["minCudaVersion"] = spec.min_cuda
        return body

    def _create_one(self, spec: PodSpec, gpu_id: str, reasons: list[str]) -> str | None:
        """Try one GPU type; the pod id on success, None to move on to the next candidate."""
        body = self._create_body(spec, gpu_id)
        what = f"creating a pod on {gpu_id}"

        def created(status: int, answer: Any) -> str | None:
            if status in (200, 201) and isinstance(answer, dict) and answer.get("id"):
                return str(answer["id"])
            return None

        def refused(status: int, answer: Any, detail: str) -> str:
            if status == 400 and "additional propert" in detail.lower() + str(answer).lower():
                # an unknown key in the body (CreatePodRequest is unevaluatedProperties: false):
                # no GPU type would take it, so do not walk the list
                errors = answer.get("errors") if isinstance(answer, dict) else None
                named = redact("; ".join(map(str, errors))) if isinstance(errors, list) \
                    else detail
                raise ProviderError(f"RunPod rejected a field of tailpod's create request "
                                    f"(HTTP 400): {named}; nothing was created",
                                    hint="this is a tailpod bug; please report it")
            if status == 400:
                kind = "no capacity" if any(m in detail.lower() for m in CAPACITY_MARKERS) \
                    else "refused"
                return f"{gpu_id}: {kind} ({detail})"
            if status == 402:
                raise ProviderError("RunPod: insufficient balance (HTTP 402); nothing was created",
                                    hint="add credit: RunPod needs at least one hour of the "
                                         "pod's cost in the account")
            if status == 403:
                return f"{gpu_id}: this account cannot use that pool (HTTP 403)"
            if status == 401:
                raise AuthError("RunPod rejected the API key (HTTP 401) while creating a pod",
                                hint="check RUNPOD_API_KEY")
            if status == 422:  # "The body does not match the contract. `errors` lists each"
                errors = answer.get("errors") if isinstance(answer, dict) else None
                named = redact("; ".join(map(str, errors))) if isinstance(errors, list) \
                    and errors else detail
                raise ProviderError(f"RunPod rejected tailpod's create request as malformed "
                                    f"(HTTP 422): {named}; nothing was created",
                                    hint="this is a tailpod bug; please report it")
            raise ApiError("RunPod", what, status, answer)

        return self._create_candidate(
            spec.run_tag, gpu_id, reasons,
            send=lambda: self.api.send("POST", "/v2/pods", what, json=body),
            created=created, refused=refused, retry_ok=(200, 201),
        )

    def create(self, spec: PodSpec) -> PodInfo:
        prefs = [p for p in spec.gpu_preference if p and p.strip()]
        if not prefs:
            raise ConfigError("the GPU preference list is empty; nothing was created",
                              hint="name at least one GPU, e.g. --gpu 'NVIDIA GeForce RTX 4090'")
        if spec.gpu_count < 1:
            raise ConfigError("gpu_count must be at least 1")
        floor = cuda_floor(self.settings.min_cuda, spec.min_cuda)
        if floor != spec.min_cuda:  # TAILPOD_MIN_CUDA above the image's: the create asks it too
            spec = dataclasses.replace(spec, min_cuda=floor)
        catalog = self.catalog(spec.gpu_count, spec.min_cuda)
        resolved = self._resolve_all(prefs, catalog)
        candidates: list[tuple[str, float | None]] = []
        priced: list[tuple[float, str]] = []
        for gpu_id in resolved:
            unit = self._unit_price(catalog[gpu_id])
            price = round(unit * spec.gpu_count, 4) if unit is not None else None
            if price is not None:
                priced.append((price, gpu_id))
            if spec.max_price is not None and (price is None or price > spec.max_price):
                continue
            candidates.append((gpu_id, price))
        if not candidates:
            cheapest = min(priced) if priced else None
            raise CapacityError(
                f"the price cap ${spec.max_price:.2f}/h is below every RunPod offer in the "
                "preference list; nothing was created"
                + (f" (cheapest: {cheapest[1]} at ${cheapest[0]:.2f}/h)" if cheapest else ""),
                hint="raise --max-price or add cheaper GPU types",
            )
        reasons: list[str] = [
            f"{g}: ${p:.2f}/h is above the cap" for p, g in priced
            if spec.max_price is not None and p > spec.max_price
        ]
        pod_id = None
        for gpu_id, _price in candidates:
            pod_id = self._create_one(spec, gpu_id, reasons)
            if pod_id:
                break
        if not pod_id:
            raise CapacityError(
                f"RunPod could not place a pod on any of {len(resolved)} GPU type(s): "
                + "; ".join(reasons),
                hint="add GPU types to the preference list, raise the price cap, or retry later",
            )
        info = self._settled(self._read_back(pod_id, spec.run_tag))
        first = resolved[0]
        info.detail["requested"] = first
        if info.gpu_type and info.gpu_type != first:
            info.detail["fallback_from"] = first
            info.detail["fallback_reasons"] = reasons
        if spec.max_price is not None and info.price_per_hr is not None \
                and info.price_per_hr > spec.max_price + 1e-9:
            self.terminate(pod_id)
            raise CapacityError(
                f"RunPod placed {pod_id} at ${info.price_per_hr:.2f}/h, above the cap "
                f"${spec.max_price:.2f}/h; it was terminated at once",
                hint="run `tailpod down` to prove billing stopped",
            )
        return info

    def _settled(self, info: PodInfo) -> PodInfo:
        """A freshly created pod walks PROVISIONING -> STARTING -> RUNNING (v2 PodStatus) and
        its price is taken only once RUNNING: give it the read-back's few seconds to get there.
        A slower pod is priced, and held to the cap, by `up` once it runs (cloud_up.py)."""
        for _ in range(self.timings.readback_attempts):
            if info.state is not PodState.PENDING or info.price_per_hr is not None:
                break
            self._sleep(self.timings.readback_interval_s)
            try:
                info = self.get(info.pod_id) or info
            except ProviderError:
                break
        return info

    # -- reads ------------------------------------------------------------------------------------
    def to_info(self, pod: dict[str, Any]) -> PodInfo:
        status = str(pod.get("status") or "")
        state = STATUS_MAP.get(status, PodState.UNKNOWN)
        gpu = pod.get("gpu") or {}
        runtime = pod.get("runtime")
        direct = (pod.get("ssh") or {}).get("direct") or None
        host, port = (direct.get("host"), direct.get("port")) if direct else (None, None)
        if not direct and isinstance(runtime, dict):
            for p in runtime.get("ports") or []:
                if p.get("private") == 22 and p.get("public") and p.get("ip"):
                    host, port = p["ip"], p["public"]
        raw_cost = pod.get("cost")
        cost = float(raw_cost) if isinstance(raw_cost, (int, float)) else None
        name = pod.get("name")
        return PodInfo(
            pod_id=str(pod.get("id")),
            run_tag=name if is_tailpod_tag(name) else None,
            state=state,
            gpu_type=gpu.get("id"),
            gpu_count=gpu.get("count"),
            # v2 reports cost 0.0 once EXITED although storage still bills: keep that unknown.
            price_per_hr=cost if state is PodState.RUNNING else None,
            ssh_host=host,
            ssh_port=int(port) if port else None,
            detail={
                "status": status,
                "name": name,
                "data_center": pod.get("dataCenterId"),
                "cuda": pod.get("cudaVersion"),
                "container_up": runtime is not None,
                "created_at": created_epoch(pod.get("createdAt")),  # epoch s, as vast's
                "stated_cost": cost,
            },
        )

    def get(self, pod_id: str) -> PodInfo | None:
        response = self.api.call("GET", f"/v2/pods/{quote(pod_id, safe='')}",
                                 f"reading pod {pod_id}", passthrough=(404,))
        if response.status_code == 404:
            return None
        body = self.api.body_of(response)
        if not isinstance(body, dict):
            raise ProviderError(f"RunPod: unexpected answer reading pod {pod_id}")
        info = self.to_info(body)
        return None if info.state is PodState.TERMINATED else info

    def list_all(self) -> list[PodInfo]:
        pods: list[Any] = []
        token: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_LIST_PAGES):
            # includeClusterPods: "Include cluster member pods in the result. Defaults to false"
            # (openapi @ a900806e, paths./v2/pods.get): a tagged cluster member must never hide
            # from the orphan sweep or the proof's listing.
            params = {"includeClusterPods": "true"}
            if token:
                params[PAGE_TOKEN_PARAM] = token
            body = self.api.body_of(self.api.call("GET", "/v2/pods", "listing pods", params=params))
            page = body.get("pods") if isinstance(body, dict) else None
            if not isinstance(page, list):
                raise ProviderError("RunPod: the pod list answer has no `pods` list")
            pods.extend(page)
            token = _next_page_token(body)
            if token is None:
                break
            if token in seen:
                raise ProviderError("RunPod: the pod list repeats a page token; the list is not used")
            seen.add(token)
        else:
            raise ProviderError(f"RunPod: the pod list runs past {MAX_LIST_PAGES} pages; not used")
        infos = [self.to_info(p) for p in pods if isinstance(p, dict)]
        return [i for i in infos if i.state is not PodState.TERMINATED]

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        pods = self.list_all()
        if run_tag is None:
            return [p for p in pods if p.run_tag is not None]
        return [p for p in pods if p.detail.get("name") == run_tag]

    def container_log(self, pod_id: str, tail: int = 200) -> list[str] | None:
        """The last `tail` lines the pod's container wrote (`GET /v2/pods/{id}/logs`, a
        Server-Sent Events stream: the backfill is read until the stream goes quiet); None when
        the provider has no log for it."""
        status, text = self.api.read_stream(
            f"/v2/pods/{quote(pod_id, safe='')}/logs", f"reading pod {pod_id}'s log",
            params={"source": "container", "tail": max(0, min(int(tail), 5000))})
        if status != 200:
            return None
        return parse_log_events(text)

    # -- teardown ---------------------------------------------------------------------------------
    def terminate(self, pod_id: str) -> None:
        # The account key takes the first route of the pod-side termination table (REST v2
        # DELETE); the dead-man switch walks on from it only when REST refuses its pod-scoped key.
        method, path, _body = TERMINATE_ROUTES[self.pod_termination][0]
        self.api.call(method, path.replace("{id}", quote(pod_id, safe="")),
                      f"terminating pod {pod_id}", ok=(200, 202, 204), passthrough=(404,))

    def kill_command(self, info: PodInfo) -> str:
        method, path, _body = TERMINATE_ROUTES[self.pod_termination][0]
        tail = (f"curl -X {method} -H \"Authorization: Bearer ${self.key_env}\" "
                f"{self.base_url}{path.replace('{id}', info.pod_id)}")
        return (f"tailpod down {info.run_tag}  (or: {tail})" if info.run_tag else tail)

    def graphql(self, query: str, variables: dict[str, Any], what: str) -> dict[str, Any]:
        """GraphQL with variables: values never enter the query text (see the module docstring).

        Raises GraphQLUnavailable when the endpoint is retired (404/410, or an error that says
        so); callers fall back to what REST v2 can prove."""
        response = self.api.call("POST", "/graphql", what,
                                 json={"query": query, "variables": variables},
                                 passthrough=GRAPHQL_GONE_STATUSES)
        body = self.api.body_of(response)
        if response.status_code in GRAPHQL_GONE_STATUSES:
            raise GraphQLUnavailable(
                f"RunPod's GraphQL API is unavailable (HTTP {response.status_code} during "
                f"{what}): {summarize_body(body) or 'retired'}")
        if not isinstance(body, dict):
            raise ProviderError(f"RunPod: unexpected GraphQL answer during {what}")
        if body.get("errors"):
            detail = summarize_body(body)
            if any(word in detail.lower() for word in GRAPHQL_GONE_WORDS):
                raise GraphQLUnavailable(f"RunPod's GraphQL API is unavailable during {what}: "
                                         f"{detail}")
            raise ProviderError(f"RunPod: {what} failed: {detail}")
        data = body.get("data")
        return data if isinstance(data, dict) else {}

    def account_spend(self) -> tuple[float | None, float | None]:
        """(currentSpendPerHr, clientBalance) of the account."""
        me = self.graphql(SPEND_QUERY, {}, "reading the account spend rate").get("myself") or {}
        spend, balance = me.get("currentSpendPerHr"), me.get("clientBalance")
        return (float(spend) if isinstance(spend, (int, float)) else None,
                float(balance) if isinstance(balance, (int, float)) else None)

    def account(self) -> AccountFacts:
        """Read-only account facts for preflight: the balance, the spend rate and the spend
        limit (USD and USD/h; RunPod refuses a deploy that would push the rate over the limit).

        REST v2 has no account endpoint: once GraphQL is retired the key is checked with a REST
        read and the facts are None, with `unavailable` saying why."""
        try:
            me = self.graphql(ACCOUNT_QUERY, {}, "reading the account").get("myself") or {}
        except GraphQLUnavailable as exc:
            self.list_all()  # the key must still work: 401/403 surface here
            return AccountFacts(None, unavailable=str(exc))

        def number(key: str) -> float | None:
            value = me.get(key)
            return float(value) if isinstance(value, (int, float)) else None

        return AccountFacts(number("clientBalance"), number("currentSpendPerHr"),
                            number("spendLimit"))

    def billed_so_far(self, pod_id: str) -> float | None:
        try:
            response = self.api.call("GET", "/v2/billing/pods", "reading pod billing",
                                     params={"podId": pod_id, "bucketSize": "hour"})
        except ProviderError:
            return None
        body = self.api.body_of(response)
        totals = ((body or {}).get("metadata") or {}).get("totals") or {} \
            if isinstance(body, dict) else {}
        value = totals.get("totalAmount")
        return float(value) if isinstance(value, (int, float)) else None

    def _billing_history_check(self, run_tag: str, pod_id: str | None, rate: float,
                               tagged: list[PodInfo]) -> tuple[ProofCheck, str | None]:
        """Without GraphQL there is no account spend rate: the pod's v2 billing history
        (`GET /v2/billing/pods?podId=`) is read twice, `evidence_window_s` apart, and must not
        grow by more than half of what the pod's rate would add in that time. RunPod aggregates
        that history with an update delay no vendor text states: no growth counts only over a
        window longer than the delay first contact measured (proof.meter_check)."""
        if not pod_id:
            return ProofCheck("billing-history", True, "no pod id was ever recorded; the tag "
                              "listing is the proof (GraphQL unavailable)"), None
        delay, source = self.meter_delay()
        t1 = time.monotonic()
        first = self.billed_so_far(pod_id)
        self._sleep(meter_window_s(self.timings.evidence_window_s, delay))
        second = self.billed_so_far(pod_id)
        elapsed = max(time.monotonic() - t1, 1e-3)
        if first is None or second is None:
            return ProofCheck("billing-history", False,
                              "GraphQL is unavailable and GET /v2/billing/pods did not answer "
                              "with totals: nothing shows the charges stopped"), None
        grew = second - first
        allowed = 0.5 * rate * elapsed / 3600.0 + 1e-6
        ok = grew <= allowed
        check = meter_check(
            "billing-history", not ok, elapsed, delay, source,
            f"GraphQL unavailable; v2 billing history for {pod_id}: ${first:.6f} then "
            f"${second:.6f} over {elapsed:.1f}s (this pod was ${rate:.4f}/h)",
        )
        line = None
        if not ok and not tagged:
            line = (f"RunPod billing history for {pod_id} ({run_tag}) still grows by "
                    f"${grew:.6f} over {elapsed:.1f}s — check {self.console_url}")
        return check, line

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        checks: list[ProofCheck] = []
        still: list[str] = []
        everything = self.list_all()
        tagged = [p for p in everything if p.detail.get("name") == run_tag]
        check, lines = listed_check(self.label, run_tag, tagged, self.kill_command)
        checks.append(check)
        still += lines

        graphql_gone: str | None = None
        if pod_id:
            rest_gone = self.get(pod_id) is None
            try:
                gql = self.graphql(POD_QUERY, {"podId": pod_id}, "looking the pod up").get("pod")
                gql_gone = gql is None or gql.get("desiredStatus") == "TERMINATED"
                gql_note = f"GraphQL pod(podId): {'null (gone)' if gql_gone else 'still there'}"
            except GraphQLUnavailable as exc:
                graphql_gone = str(exc)
                gql_gone, gql_note = True, "GraphQL unavailable (retired): REST v2 alone"
            checks.append(ProofCheck(
                "direct-lookup", rest_gone and gql_gone,
                f"GET /v2/pods/{pod_id}: {'404 (gone)' if rest_gone else 'still there'}; "
                + gql_note,
            ))
            if not (rest_gone and gql_gone) and not tagged:
                still.append(f"RunPod still answers for pod {pod_id} — kill: "
                             + self.kill_command(PodInfo(pod_id, run_tag, PodState.UNKNOWN)))
        else:
            checks.append(ProofCheck("direct-lookup", True,
                                     "no pod id was ever recorded; the tag listing is the proof"))

        others_rate = sum(stated_rate(p) for p in everything if p.detail.get("name") != run_tag)
        others_rate += self.volumes_rate_per_hr()  # storage kept on purpose bills account-wide
        rate = price_per_hr or 0.0
        tolerance = max(0.5 * rate, 0.005)
        spend: float | None = None
        if graphql_gone is None:
            try:
                spend, _balance = self.account_spend()
            except GraphQLUnavailable as exc:
                graphql_gone = str(exc)
        if graphql_gone is not None:
            check, line = self._billing_history_check(run_tag, pod_id, rate, tagged)
            checks.append(check)
            still += [line] if line else []
        elif spend is None:
            checks.append(ProofCheck("account-spend-rate", False,
                                     "RunPod did not report currentSpendPerHr"))
        else:
            residual = spend - others_rate
            billed = self.billed_so_far(pod_id) if pod_id else None
            billed_note = (f"; billing history for the pod so far ${billed:.4f} (RunPod "
                           "aggregates with up to ~1 h lag)") if billed is not None else ""
            ok = residual <= tolerance
            checks.append(ProofCheck(
                "account-spend-rate", ok,
                f"account spends ${spend:.4f}/h; other listed pods explain ${others_rate:.4f}/h; "
                f"unexplained ${max(residual, 0):.4f}/h vs this pod's "
                f"${rate:.4f}/h{billed_note}",
            ))
            if not ok and not tagged:
                still.append(f"RunPod account spend still includes ~${residual:.3f}/h not "
                             f"explained by any listed pod (was {run_tag} at ${rate:.3f}/h) — "
                             f"check {self.console_url}")

        others = [p for p in everything if p.run_tag and p.run_tag != run_tag]
        check, lines = others_check(self.label, run_tag, others, known_active_tags,
                                    self.kill_command, home=self.home_id)
        checks.append(check)
        still += lines
        return BillingEvidence(checks=checks, still_billing=still)

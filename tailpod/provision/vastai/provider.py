"""vast.ai through its REST API, with httpx (docs/providers.md says why not the `vastai` SDK).

Offers come from `POST /api/v0/bundles/` with filters; a rent is `PUT /api/v0/asks/{offer}/`
labelled with the run tag and `cancel_unavail`, so a failed schedule does not leave a stopped,
disk-billing instance. An error body that still names `new_contract` means an instance exists:
it is destroyed before the next offer is tried. Listing pages through `GET /api/v1/instances/`.
Local volumes (vastai/volumes.py) attach at rent as `volume_info`, on the volume's own machine
only: a spec with `data_center_ids` (machine ids) searches those machines' offers alone.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

import httpx

from tailpod.agent.bootstrap.terminate import PROVIDERS as POD_PROVIDERS
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
    filter_words,
    hidden_words,
)
from tailpod.provision.gpu_names import family_matches, near_names
from tailpod.provision.proof import (
    is_tailpod_tag,
    listed_check,
    meter_check,
    meter_window_s,
    others_check,
)
from tailpod.provision.vastai.limits import (
    DISK_MIN_GB,
    SEARCH_PER_MINUTE,
    WindowPacer,
    rent_limit_errors,
)
from tailpod.provision.vastai.volumes import VastVolumes
from tailpod.secrets import Secret, reveal_env

# States from vast-ai/docs cli/reference/show-instance.mdx @ c6246226. Unknown states must not
# crash and never read as "gone" (SkyPilot maps every unknown vast state to INIT:
# skypilot-org/skypilot sky/provision/vast/utils.py).
STATUS_MAP = {
    None: PodState.PENDING,
    "created": PodState.PENDING,
    "loading": PodState.PENDING,
    "scheduling": PodState.PENDING,
    "rebooting": PodState.PENDING,
    "running": PodState.RUNNING,
    "stopped": PodState.STOPPED,
    "exited": PodState.STOPPED,
    # "frozen — Container is paused with memory preserved. GPU charges apply."
    # (show-instance.mdx:32): not running, but billing the GPU (detail gpu_billing).
    "frozen": PodState.STOPPED,
    # "Poll trap: if `actual_status` becomes `exited`, `unknown`, or `offline` it will never reach
    # `running` -- destroy and retry" (api-reference/openapi.yaml:15-16, "Key Quirks"): a failed
    # boot for `up` (ERROR), an instance that still exists for every listing and proof.
    "unknown": PodState.ERROR,
    "offline": PodState.ERROR,
}
NEVER_RUNNING = ("unknown", "offline")
GPU_BILLING_WHEN_NOT_RUNNING = ("frozen",)
# A rent the account cannot pay for. The create operation documents no such error (its 400 codes
# are invalid_args, invalid_price, no_ssh_key_for_vm); vast's prepay operation answers
# "Insufficient credit" (vast-ai/docs api-reference/openapi.yaml @ c624622, 411), so the words
# are matched in the code or the message, whichever a real refusal uses [unverified].
STOP_ERRORS = ("insufficient_credit", "missing_billing", "credit")
# The host filters of the offer query, by the name `gpus` reports them under -> the offer field
# (vast-ai/docs search_offers.yaml @ c6246226: reliability, disk_space, inet_down, cuda_max_good).
HOST_FILTERS = {"reliability": "reliability", "disk": "disk_space", "download": "inet_down",
                "cuda": "cuda_max_good"}
MAX_PAGES = 400
LOG_WAIT_S, LOG_POLL_S = 9.0, 0.3  # how long a requested container log may take to appear


def preempted(row: dict[str, Any]) -> bool:
    """An interruptible instance that lost its bid: vast stops it ("Your instance is stopped
    (killing running processes)", vast-ai/docs @ c6246226 guides/reference/faq/rental-types.mdx)
    and its disk bills on (guides/pricing.mdx:28). [observed, dstack compute.py] such an instance
    reads stopped in cur_state, intended_status and next_state alike; tailpod never stops a pod
    itself, so a stopped bid instance of its own was preempted."""
    if not row.get("is_bid") or row.get("actual_status") != "stopped":
        return False
    return all(row.get(k) in (None, "stopped") for k in ("intended_status", "cur_state",
                                                           "next_state"))


def listed_price(price: float) -> float:
    """A price as offers state it: 4 decimals, rounded up, so the price listed, taken as
    `--max-price`, is never below the rent's own (the cap is inclusive)."""
    return math.ceil(round(price * 1e4, 6)) / 1e4 if math.isfinite(price) else price


def normalise_gpu_name(name: str) -> str:
    """The vast CLI writes `RTX_4090`; offers say `RTX 4090`."""
    return " ".join(name.replace("_", " ").split())


# How long vast's `credit` takes to show a charge: vast-ai/docs @ c6246226 states no update
# interval, and vast has no first contact yet, so a credit that did not move is not evidence.
METER_DELAY_S: float | None = None
METER_DELAY_SOURCE = "vast documents no update interval for `credit`"
VENDOR_URL = str(POD_PROVIDERS["vastai"]["api_url"]).rstrip("/")
SEARCH_PACER = WindowPacer(SEARCH_PER_MINUTE, 60.0)
# Machines this process saw in a state that never reaches running: later searches skip them.
AVOIDED_MACHINES: set[str] = set()


class VastProvider(ApiProvider, SupportsAccount, SupportsContainerLog,
                   SupportsPodScopedTermination, VastVolumes, SupportsGpuNames,
                   SupportsHiddenOffers):
    name = "vastai"
    key_setting = "vast_api_key"
    url_setting = "vast_url"
    needs_settings = TAILNET_KEY_SETTINGS
    console_url = "https://cloud.vast.ai/instances/"
    label = "vast.ai"
    pod_termination = "vastai"
    # An interruptible instance: offers searched with `type: "bid"`, rented with `price` (vast-ai/
    # vast-cli @ 5567983 vast.py `create instance --bid_price`; vast-ai/docs @ c6246226
    # api-reference/creating-instances-with-api.mdx "Interruptible (Bid) Instances").
    spot_route = 'PUT /api/v0/asks/{id}/ with "price" (the bid, $/h per machine)'

    def __init__(
        self,
        settings: Settings,
        *,
        timings: ApiTimings | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        min_reliability: float | None = None,
        min_inet_down_mbps: float = 100.0,
        min_cuda: float | str | None = None,
        search_pacer: WindowPacer | None = None,
    ) -> None:
        super().__init__(settings, timings=timings, transport=transport, sleep=sleep)
        # The filters every offer query applies, `gpus` and `check-requirements` as `up`
        # (TAILPOD_MIN_RELIABILITY, TAILPOD_MIN_CUDA): one query, so what they list `up` rents.
        self.min_reliability = settings.min_reliability if min_reliability is None \
            else min_reliability
        self.min_inet_down_mbps = min_inet_down_mbps
        self.min_cuda = min_cuda if min_cuda is not None else (settings.min_cuda or None)
        # The disk `up` rents (TAILPOD_DISK_GB): vast's dph_total includes the storage an offer
        # is searched with (allocated_storage), so offers are priced, and hosts filtered, for it.
        self.disk_gb = settings.disk_gb
        # vast allows 10 offer searches a minute per IP (search_offers.yaml x-rate-limit): one
        # window for the whole process on the vendor's API; an emulator or proxy is not paced
        # unless a pacer is given.
        vendor = self.base_url.rstrip("/") == VENDOR_URL
        self.search_pacer = search_pacer or (SEARCH_PACER if vendor else None)

    # -- offers -----------------------------------------------------------------------------------
    def search(self, gpu_names: list[str], gpu_count: int | None, disk_gb: int | None = None,
               min_cuda: str | float | None = None,
               machine_ids: list[str] | None = None, *, spot: bool = False
               ) -> list[dict[str, Any]]:
        """Offers for the GPUs with `disk_gb` of disk (default: the disk `up` rents); `min_cuda`
        (the image's CUDA, "12.8") keeps hosts whose driver supports at least it
        (`cuda_max_good`, the highest CUDA the host's driver runs). `spot`: interruptible offers,
        priced at their minimum bid (search_offers.yaml `type: bid`)."""
        return self._search(gpu_names, gpu_count, disk_gb, min_cuda, machine_ids, loose=False,
                            spot=spot)

    def _floor(self, min_cuda: str | float | None) -> float | None:
        return max((float(c) for c in (self.min_cuda, min_cuda) if c not in (None, "")),
                   default=None)

    def _search(self, gpu_names: list[str], gpu_count: int | None, disk_gb: int | None,
                min_cuda: str | float | None, machine_ids: list[str] | None, *,
                loose: bool, spot: bool = False) -> list[dict[str, Any]]:
        """The one offer query; `loose` leaves out the host filters (reliability, disk,
        download, CUDA) to count what they hide, never to rent."""
        disk_gb = self.disk_gb if disk_gb is None else disk_gb
        query: dict[str, Any] = {
            "verified": {"eq": True},
            "external": {"eq": False},
            "rentable": {"eq": True},
            "rented": {"eq": False},
            "reliability": {"gte": self.min_reliability},
            "disk_space": {"gte": disk_gb},
            "inet_down": {"gte": self.min_inet_down_mbps},
            "order": [["dph_total", "asc"]],
            # vast-cli (vast.py search offers) sends "on-demand" or "bid"; the YAML enum spells
            # the former "ondemand" (docs/providers.md)
            "type": "bid" if spot else "on-demand",
            "allocated_storage": disk_gb,
            "limit": 64,
        }
        if gpu_count is not None:  # None: any count (a machine's GPUs, for volumes)
            query["num_gpus"] = {"eq": gpu_count}
        if gpu_names:  # none: every GPU type (`tailpod gpus`)
            query["gpu_name"] = {"in": gpu_names}
        if machine_ids:  # a local volume's machine: its offers only
            query["machine_id"] = {"in": [int(m) for m in machine_ids]}
        floor = self._floor(min_cuda)
        if floor is not None:
            query["cuda_max_good"] = {"gte": floor}
        if loose:
            for host_filter in HOST_FILTERS.values():
                query.pop(host_filter, None)
        # The price cap is applied here, not in the query, so "too expensive" and "no such GPU"
        # stay distinguishable in the error.
        if self.search_pacer is not None:
            self.search_pacer.wait()
        response = self.api.call("POST", "/api/v0/bundles/", "searching offers", json=query)
        body = self.api.body_of(response)
        offers = body.get("offers") if isinstance(body, dict) else None
        if not isinstance(offers, list):
            raise ProviderError("vast.ai: the offer search answer has no `offers` list")
        return [o for o in offers if isinstance(o, dict) and "id" in o
                and str(o.get("machine_id")) not in AVOIDED_MACHINES
                and (not machine_ids or str(o.get("machine_id")) in machine_ids)]

    def filters(self, disk_gb: int | None = None, min_cuda: str | float | None = None
                ) -> dict[str, Any]:
        """The host filters an offer must pass, as `gpus --json` states them."""
        floor = self._floor(min_cuda)
        return {"min_reliability": self.min_reliability,
                "disk_gb": self.disk_gb if disk_gb is None else disk_gb,
                "min_inet_down_mbps": self.min_inet_down_mbps,
                "min_cuda": None if floor is None else f"{floor:g}"}

    def describe_filters(self, disk_gb: int | None = None,
                         min_cuda: str | float | None = None) -> str:
        return ", ".join(filter_words(self.filters(disk_gb, min_cuda)).values())

    def _fails(self, offer: dict[str, Any], disk_gb: int, floor: float | None) -> list[str]:
        """The filters `offer` fails, by HOST_FILTERS' names; a missing figure fails."""
        def below(key: str, bound: float | None) -> bool:
            value = offer.get(key)
            if bound is None:
                return False
            return not (isinstance(value, (int, float)) and value >= bound)

        bounds = {"reliability": self.min_reliability, "disk": float(disk_gb),
                  "download": self.min_inet_down_mbps, "cuda": floor}
        return [name for name, key in HOST_FILTERS.items() if below(key, bounds[name])]

    def hidden(self, gpu_names: list[str], gpu_count: int, disk_gb: int | None = None,
               min_cuda: str | float | None = None, machine_ids: list[str] | None = None
               ) -> dict[str, dict[str, int]]:
        """Per GPU name, how many offers on the market now the host filters hide, by filter
        (an offer failing two filters counts under both; `offers` is the number hidden)."""
        disk = self.disk_gb if disk_gb is None else disk_gb
        floor = self._floor(min_cuda)
        asked = {normalise_gpu_name(n).lower() for n in gpu_names}
        out: dict[str, dict[str, int]] = {}
        for offer in self._search(gpu_names, gpu_count, disk, min_cuda, machine_ids, loose=True):
            name = normalise_gpu_name(str(offer.get("gpu_name") or "?"))
            if asked and name.lower() not in asked:
                continue
            failed = self._fails(offer, disk, floor)
            if not failed:
                continue
            row = out.setdefault(name, {"offers": 0})
            row["offers"] += 1
            for name in failed:
                row[name] = row.get(name, 0) + 1
        return out

    def gpu_names(self, gpu_count: int = 1) -> dict[str, str]:
        """The GPU names on vast.ai's market now for `gpu_count` GPUs, whatever their hosts
        (what a family name like `H100` resolves against); vast.ai has no catalog."""
        found = self._search([], gpu_count, None, None, None, loose=True)
        return {normalise_gpu_name(str(o["gpu_name"])): "" for o in found if o.get("gpu_name")}

    def search_all(self) -> list[dict[str, Any]]:
        """Every rentable offer, any GPU and count (which GPUs each machine has, for volumes)."""
        return self.search([], None, int(DISK_MIN_GB))

    def avoid_machine(self, machine_id: object) -> None:
        """Skip this machine's offers from now on (it left an instance `unknown`/`offline`)."""
        if machine_id is not None:
            AVOIDED_MACHINES.add(str(machine_id))

    @staticmethod
    def _price(offer: dict[str, Any]) -> float:
        value = offer.get("dph_total", offer.get("dph_base"))
        return float(value) if isinstance(value, (int, float)) else float("inf")

    @staticmethod
    def min_bid(offer: dict[str, Any]) -> float | None:
        """The offer's "current minimum bid price in $/hr for interruptible" (vast.py search
        offers field list); None when the offer states none."""
        value = offer.get("min_bid")
        return float(value) if isinstance(value, (int, float)) else None

    def bid_for(self, spec: PodSpec, offer: dict[str, Any]) -> float | None:
        """The bid sent as `price` for `offer`: the user's, else the offer's minimum bid."""
        return spec.bid if spec.bid is not None else self.min_bid(offer)

    def spot_price(self, offer: dict[str, Any], bid: float | None) -> float:
        """What an interruptible rental of `offer` at `bid` bills per hour: the bid plus the
        offer's storage. [guess] vast documents `price` as the bid "per machine ($/hour)" and a
        bid search as pricing `dph_total` at the minimum bid, not whether storage is inside the
        bid; storage is counted on top, the dearer reading, so the cap errs on the safe side."""
        if bid is None:
            return float("inf")
        storage = offer.get("storage_total_cost")
        if not isinstance(storage, (int, float)):
            low = self.min_bid(offer)
            storage = self._price(offer) - low if low is not None else 0.0
        return round(bid + max(float(storage), 0.0), 6)

    def _by_preference(self, prefs: list[str], offers: list[dict[str, Any]]
                       ) -> dict[str, list[dict[str, Any]]]:
        grouped: dict[str, list[dict[str, Any]]] = {p: [] for p in prefs}
        for offer in offers:
            name = str(offer.get("gpu_name", "")).lower()
            for pref in prefs:
                if name == pref.lower():
                    grouped[pref].append(offer)
        for pref in grouped:
            grouped[pref].sort(key=self._price)
        return grouped

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Offer]:
        prefs = [normalise_gpu_name(p) for p in gpu_preference if p.strip()]
        grouped = self._by_preference(prefs, self.search(prefs, gpu_count))
        out = []
        for pref in prefs:
            best = grouped[pref][0] if grouped[pref] else None
            if best is None:
                out.append(Offer(self.name, pref, gpu_count, None, False,
                                 detail={"error": "no matching offer"}))
                continue
            price = listed_price(self._price(best))
            out.append(Offer(
                self.name, pref, gpu_count, price, True, offer_id=str(best["id"]),
                gpu_memory_gb=round(float(best.get("gpu_ram") or 0) / 1024, 1) or None,
                detail={"offers": len(grouped[pref]), "reliability": best.get("reliability"),
                        "above_cap": bool(max_price is not None and price > max_price)},
            ))
        return out

    def spot_prices(self, gpu_types: list[str], gpu_count: int, bid: float | None = None
                    ) -> dict[str, float]:
        """Each type's cheapest interruptible rental at `bid` (None: its offer's minimum bid),
        storage included, over the offers the bid can take: what `up --spot` would bill, listed
        as `offers` lists prices."""
        prefs = [normalise_gpu_name(p) for p in gpu_types if p.strip()]
        grouped = self._by_preference(prefs, self.search(prefs, gpu_count, spot=True))
        out: dict[str, float] = {}
        for pref, found in grouped.items():
            prices = [self.spot_price(o, self.min_bid(o) if bid is None else bid) for o in found
                      if bid is None or (self.min_bid(o) or 0.0) <= bid + 1e-9]
            finite = [p for p in prices if math.isfinite(p)]
            if finite:
                out[pref] = listed_price(min(finite))
        return out

    # -- create -----------------------------------------------------------------------------------
    def _rent_body(self, spec: PodSpec) -> dict[str, Any]:
        env: dict[str, str] = reveal_env(dict(spec.env))
        if spec.ssh_public_key:
            env.setdefault("PUBLIC_KEY", spec.ssh_public_key)
        for port in sorted(set(spec.ports)):
            if port != 22:  # ssh runtypes publish 22 themselves
                env[f"-p {port}:{port}"] = "1"
        body: dict[str, Any] = {
            "client_id": "me",
            "image": spec.image,
            "disk": spec.disk_gb,
            "label": spec.run_tag,
            "env": env,
            "runtype": "ssh_direct",
            # Sent for a bid too, where vast defaults it to false (create_instance.yaml
            # `cancel_unavail` @ c6246226): a bid that cannot run now creates nothing, rather
            # than a stopped instance that bills its disk.
            "cancel_unavail": True,
        }
        if spec.start_command:
            body["onstart"] = shlex.join(spec.start_command)
        if spec.volume_id:  # attached at create only (vast.py create instance --link-volume)
            body["volume_info"] = {"mount_path": spec.volume_mount_path or self.volume_mount_path,
                                   "create_new": False, "volume_id": int(spec.volume_id)}
        return body

    def _rent(self, spec: PodSpec, offer: dict[str, Any], reasons: list[str]) -> str | None:
        offer_id = str(offer["id"])
        what = f"renting offer {offer_id} ({offer.get('gpu_name')})"
        body = self._rent_body(spec)
        if spec.spot:  # an interruptible instance: vast.py create instance --bid_price
            body["price"] = self.bid_for(spec, offer)

        def contract_of(answer: Any) -> Any:
            if isinstance(answer, dict) and isinstance(answer.get("instance_api_key"), str):
                # The instance's restricted key (the pod's CONTAINER_API_KEY), read here once:
                # known by value from now on, so redact() masks it wherever it shows (issue 38).
                Secret(answer["instance_api_key"])
            return answer.get("new_contract") if isinstance(answer, dict) else None

        def created(status: int, answer: Any) -> str | None:
            contract = contract_of(answer)
            success = isinstance(answer, dict) and answer.get("success", True) is not False
            return str(contract) if status == 200 and success and contract else None

        def left_behind(status: int, answer: Any, detail: str) -> str | None:
            contract = contract_of(answer)
            if not contract:
                return None
            # An error that names a contract: the instance exists and bills. Destroy it.
            stray = str(contract)
            self._notify(stray)
            self.terminate(stray)
            return (f"offer {offer_id}: error after creating instance {stray} "
                    f"(HTTP {status}: {detail}); destroyed it")

        def refused(status: int, answer: Any, detail: str) -> str:
            if status in (404, 410):
                return f"offer {offer_id} ({offer.get('gpu_name')}): no longer available ({detail})"
            if status in (401, 403):
                raise AuthError(f"vast.ai refused the API key (HTTP {status}) while renting",
                                hint="check VAST_API_KEY")
            code = (f"{answer.get('error', '')} {answer.get('msg', '')}".lower()
                    if isinstance(answer, dict) else "")
            if any(marker in code for marker in STOP_ERRORS):
                raise ProviderError(f"vast.ai: the account cannot pay for an instance "
                                    f"({detail}); nothing was created",
                                    hint="add credit at vast.ai")
            raise ApiError("vast.ai", what, status, answer)

        return self._create_candidate(
            spec.run_tag, f"offer {offer_id}", reasons,
            send=lambda: self.api.send("PUT", f"/api/v0/asks/{quote(offer_id, safe='')}/",
                                       what, json=body),
            created=created, refused=refused, retry_ok=(200,), left_behind=left_behind,
        )

    def create(self, spec: PodSpec) -> PodInfo:
        prefs: list[str] = []
        for p in spec.gpu_preference:
            if p and p.strip() and normalise_gpu_name(p).lower() not in (x.lower() for x in prefs):
                prefs.append(normalise_gpu_name(p))
        if not prefs:
            raise ConfigError("the GPU preference list is empty; nothing was created",
                              hint="name at least one GPU, e.g. --gpu 'RTX 4090'")
        if spec.gpu_count < 1:
            raise ConfigError("gpu_count must be at least 1")
        body = self._rent_body(spec)
        too_big = rent_limit_errors(body.get("onstart"), body.get("args"), body.get("env"),
                                    image=body.get("image"), label=body.get("label"))
        if spec.disk_gb < DISK_MIN_GB:
            too_big.append(f"the disk is {spec.disk_gb} GB; vast.ai needs at least "
                           f"{DISK_MIN_GB:g} GB")
        if too_big:
            raise ConfigError("the vast.ai rent request breaks a vendor limit; nothing was "
                              "created: " + "; ".join(too_big),
                              hint="shorten the start command or the environment "
                                   "(tailpod/provision/vastai/limits.py lists the limits)")
        machines = [str(m) for m in spec.data_center_ids] or None
        grouped = self._by_preference(prefs, self.search(prefs, spec.gpu_count, spec.disk_gb,
                                                         spec.min_cuda, machines, spot=spec.spot))
        outbid: list[str] = []
        if spec.spot and spec.bid is not None:  # an offer whose minimum bid is above ours
            for pref, found in grouped.items():
                kept = [o for o in found if (self.min_bid(o) or 0.0) <= spec.bid + 1e-9]
                if found and not kept:
                    lowest = min(self.min_bid(o) or 0.0 for o in found)
                    outbid.append(f"{pref}: every offer's minimum bid is above the bid "
                                  f"${spec.bid:g}/h (lowest ${lowest:g}/h)")
                grouped[pref] = kept

        def price(offer: dict[str, Any]) -> float:  # a spot rental bills its bid
            return self.spot_price(offer, self.bid_for(spec, offer)) if spec.spot \
                else self._price(offer)

        if outbid and not any(grouped.values()):
            raise CapacityError("no vast.ai offer takes the bid; nothing was created: "
                                + "; ".join(outbid), hint="raise --bid, or leave it out to bid "
                                "each offer's minimum")
        if not any(grouped.values()):
            where = f" on machine {', '.join(machines)}" if machines else ""
            raise CapacityError(
                f"no vast.ai offer{where} matches {', '.join(repr(p) for p in prefs)} with "
                f"{spec.gpu_count} GPU(s), {self.describe_filters(spec.disk_gb, spec.min_cuda)}"
                "; nothing was created" + self._why_none(prefs, spec, machines),
                hint=self._none_hint(prefs, spec.gpu_count),
            )
        cap = spec.max_price
        # the cap holds the price as `offers` lists it (rounded up), so a listed price taken as
        # the cap rents, and a cap `check-requirements` calls too low rents nothing here either;
        # a spot rental's price is its bid plus its storage
        affordable = {p: sorted((o for o in offers if cap is None or listed_price(price(o)) <= cap),
                                key=price)
                      for p, offers in grouped.items()}
        if not any(affordable.values()):
            cheapest = min((o for offers in grouped.values() for o in offers), key=price)
            raise CapacityError(
                f"the price cap ${cap:.2f}/h is below every matching vast.ai offer; nothing was "
                f"created (cheapest: {cheapest.get('gpu_name')} at "
                f"${price(cheapest):.2f}/h{' with storage, spot' if spec.spot else ''})",
                hint="raise --max-price or add cheaper GPU types",
            )
        reasons = outbid + [f"{p}: no matching offer" for p, offers in grouped.items()
                            if not offers and not any(r.startswith(f"{p}:") for r in outbid)]
        reasons += [f"{p}: every offer is above the cap" for p in prefs
                    if grouped[p] and not affordable[p]]
        pod_id = None
        bid: float | None = None
        for pref in prefs:
            for offer in affordable[pref][: max(1, self.timings.max_offers_per_gpu)]:
                bid = self.bid_for(spec, offer) if spec.spot else None
                pod_id = self._rent(spec, offer, reasons)
                if pod_id:
                    break
            if pod_id:
                break
        if not pod_id:
            raise CapacityError(
                "vast.ai could not rent any offer: " + "; ".join(reasons),
                hint="add GPU types, raise the price cap, or retry later",
            )
        info = self._read_back(pod_id, spec.run_tag)
        first = prefs[0]
        info.detail["requested"] = first
        if spec.spot:
            info.detail["spot"], info.detail["bid"] = True, bid
        if info.gpu_type and info.gpu_type.lower() != first.lower():
            info.detail["fallback_from"] = first
            info.detail["fallback_reasons"] = reasons
        if cap is not None and info.price_per_hr is not None and info.price_per_hr > cap + 1e-9:
            self.terminate(pod_id)
            raise CapacityError(
                f"vast.ai rented {pod_id} at ${info.price_per_hr:.2f}/h, above the cap "
                f"${cap:.2f}/h; it was destroyed at once",
                hint="run `tailpod down` to prove billing stopped",
            )
        return info

    def _why_none(self, prefs: list[str], spec: PodSpec, machines: list[str] | None) -> str:
        """What the filters hid of the GPUs asked, said after "nothing was created"."""
        try:
            hidden = self.hidden(prefs, spec.gpu_count, spec.disk_gb, spec.min_cuda, machines)
        except ProviderError:
            return ""
        filters = self.filters(spec.disk_gb, spec.min_cuda)
        parts = [f"{name}: {hidden_words(row, filters)}" for name, row in hidden.items()]
        return f" ({'; '.join(parts)})" if parts else ""

    def _none_hint(self, prefs: list[str], gpu_count: int) -> str:
        try:
            market = {n: () for n in self.gpu_names(gpu_count)}
        except ProviderError:
            market = {}
        # never the names asked: a name spelled right is hidden by a filter, not misspelt
        names = sorted({m for p in prefs for m in family_matches(p, market)} - set(prefs)) \
            or [n for n in near_names(prefs, market) if n not in prefs]
        if names:
            return ("vast.ai offers " + ", ".join(repr(n) for n in names) + " now; name one, "
                    "or loosen --min-reliability, --min-cuda or --disk-gb")
        return ("`tailpod gpus --provider vastai` lists what is rentable now; loosen "
                "--min-reliability, --min-cuda or --disk-gb to see more")

    # -- reads ------------------------------------------------------------------------------------
    def to_info(self, row: dict[str, Any]) -> PodInfo:
        status = row.get("actual_status")
        state = STATUS_MAP.get(status, PodState.UNKNOWN)
        label = row.get("label")
        host, port = row.get("ssh_host"), row.get("ssh_port")
        if not host or not port:
            mapping = (row.get("ports") or {}).get("22/tcp") or []
            if mapping and isinstance(mapping[0], dict) and mapping[0].get("HostPort"):
                host = str(row.get("public_ipaddr") or "").strip() or None
                port = mapping[0]["HostPort"]  # a string in the real API
        price = row.get("dph_total")
        try:
            ssh_port = int(port) if port else None
        except (TypeError, ValueError):
            ssh_port = None
        return PodInfo(
            pod_id=str(row.get("id")),
            run_tag=label if is_tailpod_tag(label) else None,
            state=state,
            gpu_type=row.get("gpu_name"),
            gpu_count=row.get("num_gpus"),
            price_per_hr=float(price) if isinstance(price, (int, float)) else None,
            ssh_host=str(host).strip() if host else None,
            ssh_port=ssh_port,
            detail={
                "status": status,
                "label": label,
                "intended_status": row.get("intended_status"),
                "status_msg": row.get("status_msg"),
                "storage_per_hr": row.get("storage_total_cost"),
                "container_up": status == "running",
                "gpu_billing": status == "running" or status in GPU_BILLING_WHEN_NOT_RUNNING,
                "never_running": status in NEVER_RUNNING,
                "machine_id": row.get("machine_id"),
                "cuda_max_good": row.get("cuda_max_good"),
                "driver_version": row.get("driver_version"),
                "created_at": row.get("start_date"),
                "spot": bool(row.get("is_bid")),
                "preempted": preempted(row),
            },
        )

    def get(self, pod_id: str) -> PodInfo | None:
        response = self.api.call("GET", f"/api/v0/instances/{quote(pod_id, safe='')}/",
                                 f"reading instance {pod_id}", params={"owner": "me"},
                                 passthrough=(404,))
        if response.status_code == 404:
            return None
        body = self.api.body_of(response)
        if not isinstance(body, dict):
            raise ProviderError(f"vast.ai: unexpected answer reading instance {pod_id}")
        row = body.get("instances")
        if isinstance(row, list):
            row = row[0] if row else None
        return self.to_info(row) if isinstance(row, dict) else None

    def list_all(self) -> list[PodInfo]:
        rows: list[dict[str, Any]] = []
        params: dict[str, Any] = {
            "limit": "25",
            "order_by": json.dumps([{"col": "id", "dir": "asc"}]),
        }
        for _page in range(MAX_PAGES):
            response = self.api.call("GET", "/api/v1/instances/", "listing instances",
                                     params=params)
            body = self.api.body_of(response)
            page = body.get("instances") if isinstance(body, dict) else None
            if not isinstance(page, list):
                raise ProviderError("vast.ai: the instance list answer has no `instances` list")
            rows += [r for r in page if isinstance(r, dict)]
            token = body.get("next_token")
            if not token:
                return [self.to_info(r) for r in rows]
            params["after_token"] = token
        raise ProviderError("vast.ai: instance listing did not end after "
                            f"{MAX_PAGES} pages")

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        pods = self.list_all()
        if run_tag is None:
            return [p for p in pods if p.run_tag is not None]
        return [p for p in pods if p.detail.get("label") == run_tag]

    # -- teardown ---------------------------------------------------------------------------------
    def terminate(self, pod_id: str) -> None:
        # The same route the pod's dead-man switch takes with its instance-restricted key.
        method, path, body = TERMINATE_ROUTES[self.pod_termination][0]
        response = self.api.call(method, path.replace("{id}", quote(pod_id, safe="")),
                                 f"destroying instance {pod_id}", json=body, passthrough=(404,))
        if response.status_code == 404:
            return
        body = self.api.body_of(response)
        if isinstance(body, dict) and body.get("success") is False:
            if body.get("error") in ("no_such_instance", "not_found"):
                return
            raise ProviderError(f"vast.ai refused to destroy {pod_id}: {summarize_body(body)}")

    def kill_command(self, info: PodInfo) -> str:
        tail = f"vastai destroy instance {info.pod_id}"
        return f"tailpod down {info.run_tag}  (or: {tail})" if info.run_tag else tail

    def account(self) -> AccountFacts:
        """vast.ai shows the balance only (no spend rate, no spend limit)."""
        return AccountFacts(self.balance())

    def container_log(self, pod_id: str, tail: int = 200) -> list[str] | None:
        """`PUT /api/v0/instances/request_logs/{id}/` with `{"tail": N}` answers a `result_url`
        that serves the log once it is ready (vast-ai/vast-cli vast.py `logs`); None when vast
        has no log for the pod or it is not ready within ~9 s."""
        response = self.api.call("PUT", f"/api/v0/instances/request_logs/{pod_id}/",
                                 f"requesting instance {pod_id}'s log",
                                 json={"tail": str(tail)}, passthrough=(400, 404))
        body = self.api.body_of(response)
        url = body.get("result_url") if isinstance(body, dict) else None
        if response.status_code != 200 or not isinstance(url, str):
            return None
        deadline = time.monotonic() + LOG_WAIT_S
        while time.monotonic() < deadline:
            # The result URL is a pre-signed download: no API key goes there.
            got = httpx.get(url, timeout=10.0)
            if got.status_code == 200:
                return [line for line in got.text.splitlines() if line.strip()]
            time.sleep(LOG_POLL_S)
        return None

    def balance(self) -> float | None:
        """The account's available funds: `credit` of `GET /api/v0/users/current/`.

        vast-ai/docs sdk/python/hello-world.mdx @ c624622 says "The `credit` field shows your
        available balance" and vast-ai/vast-cli vastai/SKILL.md @ 5567983 calls `show user`
        "Account info, credit balance". The same answer also has a `balance` field, which the
        OpenAPI describes only as "the current balance of the user" and which does not track the
        funds left; it is never read, and a missing `credit` is an unknown balance, not a guess.
        """
        response = self.api.call("GET", "/api/v0/users/current/", "reading the account credit")
        body = self.api.body_of(response)
        value = body.get("credit") if isinstance(body, dict) else None
        return float(value) if isinstance(value, (int, float)) and \
            not isinstance(value, bool) else None

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        checks: list[ProofCheck] = []
        still: list[str] = []
        everything = self.list_all()
        tagged = [p for p in everything if p.detail.get("label") == run_tag]
        check, lines = listed_check(self.label, run_tag, tagged, self.kill_command)
        checks.append(check)
        still += lines

        if pod_id:
            gone = self.get(pod_id) is None
            checks.append(ProofCheck(
                "direct-lookup", gone,
                f"GET /api/v0/instances/{pod_id}/: "
                f"{'instances: null (gone)' if gone else 'still there'}",
            ))
            if not gone and not tagged:
                still.append(f"vast.ai still answers for instance {pod_id} — kill: "
                             + self.kill_command(PodInfo(pod_id, run_tag, PodState.UNKNOWN)))
        else:
            checks.append(ProofCheck("direct-lookup", True,
                                     "no instance id was ever recorded; the label listing is "
                                     "the proof"))

        # vast has no spend-rate field: watch the balance for a short window and compare its
        # movement with what the remaining listed instances explain.
        delay, source = METER_DELAY_S, METER_DELAY_SOURCE
        window = meter_window_s(self.timings.evidence_window_s, delay)
        t0 = time.monotonic()
        b1 = self.balance()
        t1 = (t0 + time.monotonic()) / 2  # the balance was read somewhere inside the call
        self._sleep(window)
        t2 = time.monotonic()
        b2 = self.balance()
        elapsed = max((t2 + time.monotonic()) / 2 - t1, 1e-3)
        remaining = self.list_all()
        def gpu_bills(p: PodInfo) -> bool:  # running, or frozen ("GPU charges apply")
            return p.state is PodState.RUNNING or bool(p.detail.get("gpu_billing"))

        others_rate = sum(p.price_per_hr or 0.0 for p in remaining
                          if p.detail.get("label") != run_tag and gpu_bills(p))
        others_rate += sum(float(p.detail.get("storage_per_hr") or 0.0) for p in remaining
                           if p.detail.get("label") != run_tag and not gpu_bills(p))
        others_rate += self.volumes_rate_per_hr()  # storage kept on purpose bills account-wide
        if b1 is None or b2 is None:
            checks.append(ProofCheck("charges-stopped", False,
                                     "vast.ai did not report the account's `credit`"))
        else:
            drop_per_hr = (b1 - b2) / elapsed * 3600.0
            rate = price_per_hr or 0.0
            tolerance = max(0.5 * rate, 0.01)
            ok = drop_per_hr - others_rate <= tolerance
            checks.append(meter_check(
                "charges-stopped", not ok, elapsed, delay, source,
                f"credit moved ${b1 - b2:.6f} over {elapsed:.1f}s (≈${drop_per_hr:.4f}/h); "
                f"other instances explain ≈${others_rate:.4f}/h; this instance was "
                f"${rate:.4f}/h",
            ))
            if not ok and not tagged:
                still.append(f"vast.ai charges still move by ≈${drop_per_hr - others_rate:.3f}/h "
                             f"beyond the listed instances after destroying {run_tag} — check "
                             f"{self.console_url}")

        others = [p for p in remaining if p.run_tag and p.run_tag != run_tag]
        check, lines = others_check(self.label, run_tag, others, known_active_tags,
                                    self.kill_command, home=self.home_id)
        checks.append(check)
        still += lines
        return BillingEvidence(checks=checks, still_billing=still)

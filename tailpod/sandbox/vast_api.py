"""vast.ai emulator: offer search, rent (`PUT /asks/{id}/`), paginated v1 listing, show, destroy.

Follows vast-ai/docs api-reference/openapi/yaml/*.yaml @ c6246226 and the `vastai` 1.9.1 client:
`{"success": false, "error": code, "msg": text}` errors, 404/410
`no_such_ask` when an offer is gone, `new_contract` surviving in some error bodies, instance rows
with numeric `start_date`, `extra_env` as `[k, v]` pairs and a *string* `HostPort`, storage billed
from creation and the GPU only while `running`.
"""

from __future__ import annotations

import base64
import json
import math
import re
import secrets
import threading
import time
from typing import Any

from tailpod.provision.vastai.limits import RATE_LIMITS, rent_limit_errors
from tailpod.sandbox.cloud import AuthFailure, SandboxCloud
from tailpod.sandbox.http import Request, Response, Router
from tailpod.sandbox.model import Account, SandboxPod, VastOffer

ALIASES = {"dph": "dph_total", "cuda_vers": "cuda_max_good", "dlperf_usd": "dlperf_per_dphtotal"}
COMPUTED_INSTANCE_COLS = {"dph_total", "num_gpus", "duration"}
OPS = ("eq", "neq", "gt", "gte", "lt", "lte", "in", "notin")
# "alphanumeric with underscores, with a max length of 64" (guides/instances/storage/volumes.mdx)
STRICT_VOLUME_NAME = re.compile(r"^[A-Za-z0-9_]{1,64}$")
VOLUME_OFFER_BASE = 5000000  # a machine's volume offer id: this + machine id (the sandbox's own)


def vast_error(status: int, code: str, msg: str, **extra: Any) -> Response:
    return Response(status, {"success": False, "error": code, "msg": msg, **extra})


def json_body(req: Request, code: str) -> Any:
    """The request's JSON body (`{}` when empty), or the 400 with `code` that answers a body that
    is not JSON; a caller returns a Response it gets."""
    try:
        return req.json() or {}
    except ValueError:
        return vast_error(400, code, "body is not JSON")


def _coerce(a: Any, b: Any) -> tuple[Any, Any]:
    """The SDK's string parser leaves numbers as strings ("1", "2.5"): compare numerically."""
    if isinstance(a, bool) or isinstance(b, bool):
        return (str(a).lower(), str(b).lower())
    try:
        return float(a), float(b)
    except (TypeError, ValueError):
        return str(a).lower(), str(b).lower()


def _match(value: Any, op: str, target: Any) -> bool:
    if op in ("in", "notin"):
        items = target if isinstance(target, list) else [target]
        hit = any(_coerce(value, t)[0] == _coerce(value, t)[1] for t in items)
        return hit if op == "in" else not hit
    if value is None:
        return op == "neq"
    a, b = _coerce(value, target)
    try:
        return {
            "eq": a == b, "neq": a != b, "gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b,
        }[op]
    except TypeError:
        return False


def _sort_key(field: str) -> Any:
    def key(row: dict[str, Any]) -> tuple[bool, Any]:
        value = row.get(field)
        return (value is None, value if isinstance(value, (int, float)) else 0)

    return key


class VastEmulator:
    def __init__(self, cloud: SandboxCloud) -> None:
        self.cloud = cloud
        self.router = Router()
        r = self.router
        r.add("POST", "/api/v0/bundles", self.search)
        r.add("PUT", "/api/v0/search/asks", self.search_new)
        r.add("PUT", "/api/v0/asks/{offer_id}", self.create)
        r.add("GET", "/api/v1/instances", self.list_v1)
        r.add("GET", "/api/v0/instances", self.list_v0)
        r.add("GET", "/api/v0/instances/{instance_id}", self.show)
        r.add("PUT", "/api/v0/instances/{instance_id}", self.manage)
        r.add("DELETE", "/api/v0/instances/{instance_id}", self.destroy)
        r.add("GET", "/api/v0/users/current", self.user)
        r.add("PUT", "/api/v0/instances/request_logs/{instance_id}", self.request_logs)
        r.add("GET", "/sandbox/vast-logs/{token}", self.log_result)
        r.add("POST", "/api/v0/volumes/search", self.search_volumes)
        r.add("PUT", "/api/v0/volumes", self.create_volume)
        r.add("GET", "/api/v0/volumes", self.list_volumes)
        r.add("DELETE", "/api/v0/volumes", self.delete_volume)
        self.log_results: dict[str, str] = {}  # token -> log text (vast: a pre-signed S3 URL)
        # One request plays the spot faults at a time: a second request that arrived while the
        # first had taken the `outbid` fault but not yet stopped its pod would else be answered
        # before the stop, seeing a pod still running whose fault was already spent.
        self._spot_play = threading.Lock()

    # -- gates ------------------------------------------------------------------------------------
    def _gate(self, req: Request, op: str) -> Account | Response:
        self.play_outbids()
        try:
            account = self.cloud.authenticate("vast", req.bearer())
        except AuthFailure as exc:
            echo = (f" {req.bearer()}" if req.bearer()
                    and self.cloud.faults.take("echo_key", "vast", op) else "")
            if exc.status == 403:
                return vast_error(403, "forbidden", "This API key does not have permission for "
                                                    "this action" + (f":{echo}" if echo else ""))
            return vast_error(401, "auth_error", "Invalid user key" + echo)
        if not self.cloud.scope_allows(account, req.params.get("instance_id")):
            # CONTAINER_API_KEY can only act on its own instance (vast's create answer names it
            # `instance_api_key`: vast-ai/docs create_instance.yaml @ c6246226).
            return vast_error(403, "forbidden", "This API key is restricted to another instance")
        fault = self.cloud.faults.take("rate_limit", "vast", op)
        if fault:
            # vast documents no Retry-After on any 429 (x-rate-limit, each endpoint's YAML @
            # c6246226): the answer carries none, only the documented body of that endpoint.
            threshold = RATE_LIMITS.get(op, {}).get("threshold", 4.5)
            body = ({"success": False, "error": "rate_limit_exceeded",
                     "msg": "API requests too frequent"} if op == "terminate"
                    else {"detail": f"API requests too frequent endpoint threshold={threshold}"})
            return Response(429, body)
        fault = self.cloud.faults.take("server_error", "vast", op)
        if fault:
            return vast_error(fault.status, "server_error", "Internal server error")
        return account

    # -- spot -------------------------------------------------------------------------------------
    def play_outbids(self) -> None:
        """The `outbid` fault: a bid instance whose container has been up `seconds` loses its bid
        and is stopped (processes killed, GPU billing ends, the disk bills on): vast-ai/docs @
        c6246226 guides/reference/faq/rental-types.mdx, guides/pricing.mdx:28. Played on every
        vast request, so a test arms it at the moment it chooses."""
        with self._spot_play:
            self._play_outbids()

    def _play_outbids(self) -> None:
        now = time.time()
        with self.cloud.lock:
            lost = [p for p in self.cloud.pods.values() if p.provider == "vast"
                    and p.status == "stopped" and p.meta.get("outbid_at")]
        for pod in lost:  # the `bid_returns` fault: the bid wins again, the instance resumes
            fault = self.cloud.faults.peek("bid_returns", "vast")
            if fault is None:
                break
            if now - float(pod.meta["outbid_at"]) < fault.seconds:
                continue
            if self.cloud.faults.take("bid_returns", "vast", "any", gpu=pod.gpu_type) is None:
                break
            pod.meta.pop("outbid_at")
            pod.meta["returned_at"] = now
            self.cloud.start(pod)
        with self.cloud.lock:
            bids = [p for p in self.cloud.pods.values() if p.provider == "vast"
                    and p.meta.get("is_bid") and p.status == "running" and p.started_at]
        for pod in bids:
            fault = self.cloud.faults.peek("outbid", "vast")
            if fault is None:
                return
            if fault.gpu is not None and fault.gpu.lower() != str(pod.gpu_type).lower():
                continue
            if now - float(pod.started_at or now) < fault.seconds:
                continue
            if self.cloud.faults.take("outbid", "vast", "any", gpu=pod.gpu_type) is None:
                return
            pod.meta["outbid_at"] = now
            self.cloud.stop(pod)

    # -- offers -----------------------------------------------------------------------------------
    def offer_json(self, offer: VastOffer, storage_gb: float, bid: bool = False
                   ) -> dict[str, Any]:
        storage_hr = offer.storage_cost * storage_gb / 720.0
        min_bid = round(offer.dph_base * 0.5, 4)
        # A bid search "uses minimum bid price" (search_offers.yaml `type` @ c6246226)
        gpu_hr = min_bid if bid else offer.dph_base
        return {
            "id": offer.offer_id, "ask_contract_id": offer.offer_id, "bundle_id": offer.offer_id,
            "machine_id": offer.machine_id, "host_id": offer.host_id,
            "gpu_name": offer.gpu_name, "num_gpus": offer.num_gpus, "gpu_ram": offer.gpu_ram,
            "gpu_total_ram": offer.gpu_ram * offer.num_gpus,
            "dph_base": gpu_hr, "dph_total": round(gpu_hr + storage_hr, 6),
            "min_bid": min_bid, "storage_cost": offer.storage_cost,
            "storage_total_cost": round(storage_hr, 6),
            "reliability": offer.reliability, "reliability2": offer.reliability,
            "cuda_max_good": offer.cuda_max_good, "driver_version": "570.86.10",
            "inet_down": offer.inet_down, "inet_up": offer.inet_up,
            "inet_down_cost": 0.0, "inet_up_cost": 0.0,
            "disk_space": offer.disk_space, "disk_bw": 2000.0, "geolocation": offer.geolocation,
            "public_ipaddr": "127.0.0.1", "verified": offer.verified, "verification": "verified",
            "rentable": not offer.rented, "rented": offer.rented, "external": False,
            "is_bid": False, "hosting_type": 1, "direct_port_count": 64, "static_ip": True,
            "compute_cap": 890, "cpu_cores_effective": 16.0, "cpu_ram": 128000,
            "score": round(100 * offer.reliability / max(offer.dph_base, 0.01), 3),
            "search": {"gpuCostPerHour": gpu_hr, "diskHour": round(storage_hr, 6),
                       "totalHour": round(gpu_hr + storage_hr, 6)},
        }

    def _search(self, query: Any) -> Response:
        if not isinstance(query, dict):
            return vast_error(400, "invalid_request", "query must be a JSON object")
        query = dict(query)
        order = query.pop("order", [["score", "desc"]])
        kind = query.pop("type", "on-demand")
        if kind not in ("on-demand", "ondemand", "bid", "reserved", "interruptible"):
            return vast_error(400, "invalid_request", f"unknown type {kind!r}")
        bid = kind in ("bid", "interruptible")  # vast.py maps interruptible to bid
        limit = query.pop("limit", None)
        storage = float(query.pop("allocated_storage", 5.0) or 5.0)
        query.pop("disable_bundling", None)
        with self.cloud.lock:
            rows = [self.offer_json(o, storage, bid) for o in self.cloud.vast_offers.values()]
        for field, cond in query.items():
            field = ALIASES.get(field, field)
            if not isinstance(cond, dict):
                continue
            for op, target in cond.items():
                if op not in OPS:
                    return vast_error(400, "invalid_request", f"unknown operator {op!r}")
                rows = [r for r in rows if field not in r or _match(r.get(field), op, target)]
        for field, direction in reversed(order if isinstance(order, list) else []):
            field = ALIASES.get(field, field)
            rows.sort(key=_sort_key(field), reverse=direction == "desc")
        if limit:
            rows = rows[: int(limit)]
        return Response(200, {"offers": rows})

    def search(self, req: Request) -> Response:
        account = self._gate(req, "search")
        if isinstance(account, Response):
            return account
        body = json_body(req, "invalid_request")
        return body if isinstance(body, Response) else self._search(body)

    def search_new(self, req: Request) -> Response:
        account = self._gate(req, "search")
        if isinstance(account, Response):
            return account
        body = json_body(req, "invalid_request")
        if isinstance(body, Response):
            return body
        return self._search(body.get("q", {}) if isinstance(body, dict) else None)

    # -- rent -------------------------------------------------------------------------------------
    def create(self, req: Request) -> Response:
        account = self._gate(req, "create")
        if isinstance(account, Response):
            return account
        try:
            body = req.json() or {}
            offer_id = int(req.params["offer_id"])
        except ValueError:
            return vast_error(400, "invalid_args", "bad offer id or body")
        if not isinstance(body, dict):
            return vast_error(400, "invalid_args", "body must be an object")
        with self.cloud.lock:
            offer = self.cloud.vast_offers.get(offer_id)
        if offer is None:
            return vast_error(404, "no_such_ask", f"Instance type by id {offer_id} is not "
                                                  "available.")
        image = body.get("image")
        if not image and not body.get("template_hash_id"):
            return vast_error(400, "invalid_args", "image is required")
        label = body.get("label") or ""
        if len(label) > 256:
            return vast_error(400, "invalid_args", "label is too long")
        disk = body.get("disk", 10)
        try:
            disk = float(disk)
        except (TypeError, ValueError):
            return vast_error(400, "invalid_args", "disk must be a number")
        if disk < 8:
            return vast_error(400, "invalid_args", "disk must be at least 8 GB")
        bid = body.get("price")
        if bid is not None and (isinstance(bid, bool) or not isinstance(bid, (int, float))
                                or not 0.001 <= float(bid) <= 128.0):
            # create_instance.yaml x-input-validation `price: min 0.001, max 128.0` @ c6246226
            return vast_error(400, "invalid_price", "price must be a number from 0.001 to 128")
        low_bid = bid is not None and float(bid) < round(offer.dph_base * 0.5, 4)
        if low_bid and body.get("cancel_unavail", False):
            # [guess] a bid below the minimum cannot be scheduled now; cancel_unavail asks for
            # an error instead of a stopped instance (vast.py create instance --cancel-unavail)
            return vast_error(400, "invalid_price", f"bid {bid} is below the minimum bid "
                                                    f"{round(offer.dph_base * 0.5, 4)}")
        if offer.rented or self.cloud.faults.take("capacity", "vast", "create",
                                                  gpu=offer.gpu_name):
            return vast_error(410, "no_such_ask", f"Instance type by id {offer_id} is no longer "
                                                  "available.")
        if self.cloud.balance(account) < offer.dph_base:
            # The create's 400 enum has no credit code (paths./api/v0/asks/{id}.put.responses.
            # 400 @ c624622); the message takes the prepay operation's words (its 411)
            # [unverified: what a real create answers without credit].
            return vast_error(400, "invalid_args", "error 400: Insufficient credit to rent "
                                                   "this instance")
        env_in = body.get("env") or {}
        if not isinstance(env_in, dict):
            return vast_error(400, "invalid_args", "env must be an object")
        mounted = self._volume_for_rent(account, offer.machine_id, body.get("volume_info"))
        if isinstance(mounted, Response):
            return mounted
        onstart, args = body.get("onstart"), body.get("args")
        args_str = body.get("args_str")
        too_big = rent_limit_errors(onstart if isinstance(onstart, str) else None,
                                    [str(a) for a in args] if isinstance(args, list) else None,
                                    {str(k): str(v) for k, v in env_in.items()},
                                    image=str(body.get("image") or ""),
                                    label=str(body.get("label") or ""),
                                    args_str=args_str if isinstance(args_str, str) else None)
        if too_big:
            return vast_error(400, "invalid_args", "; ".join(too_big))
        env: dict[str, str] = {}
        ports = ["22/tcp"] if "args" not in str(body.get("runtype") or "ssh") else []
        for key, value in env_in.items():
            if key.startswith("-p "):
                container = key[3:].split(":")[-1].split("/")[0]
                if container.isdigit() and f"{container}/tcp" not in ports:
                    ports.append(f"{container}/tcp")
            else:
                env[str(key)] = str(value)
        runtype = str(body.get("runtype") or ("args" if body.get("args") is not None else "ssh"))
        command: list[str] | str | None
        if runtype == "args":
            command = [str(a) for a in body.get("args") or []] or None
        else:
            command = body.get("onstart") or None
        pod = SandboxPod(
            provider="vast", pod_id=str(self.cloud.new_vast_id()), name=label,
            account=account.name, gpu_type=offer.gpu_name, gpu_count=offer.num_gpus,
            compute_rate=float(bid) if bid is not None else offer.dph_base,
            disk_gb=int(math.ceil(disk)), image=image or "",
            command=command, env=env, ports=ports, offer_id=offer.offer_id,
            storage_cost_gb_month=offer.storage_cost, cuda=str(offer.cuda_max_good),
            data_center=offer.geolocation,
        )
        pod.meta.update({"runtype": runtype, "onstart": body.get("onstart"),
                         "args": body.get("args"), "machine_id": offer.machine_id,
                         "host_id": offer.host_id, "reliability": offer.reliability,
                         "gpu_ram": offer.gpu_ram, "geolocation": offer.geolocation,
                         "is_bid": bid is not None, "min_bid": round(offer.dph_base * 0.5, 4)})
        if mounted is not None:
            pod.meta["volume_id"], pod.meta["volume_path"] = mounted
        stuck = self.cloud.faults.take("vast_state", "vast", "create")
        if stuck:
            pod.meta["vast_state"] = stuck.state or "offline"
        with self.cloud.lock:
            offer.rented = True
        self.cloud.add_pod(pod)
        if low_bid:
            # [observed, dstack vastai/api_client.py] an interruptible instance created stopped
            # because the bid was too low: the error still names it, and its disk bills.
            self.cloud.stop(pod)
            return vast_error(400, "invalid_price", "bid below the minimum: the instance was "
                                                    "created stopped", new_contract=int(pod.pod_id))
        fault = self.cloud.faults.take("error_after_create", "vast", "create")
        if fault:
            if fault.carry_id:
                return vast_error(400, "invalid_args", "instance created but could not be "
                                                       "scheduled", new_contract=int(pod.pod_id))
            return vast_error(fault.status if fault.status >= 500 else 500, "server_error",
                              "Internal server error")
        ok = Response(200, {"success": True, "new_contract": int(pod.pod_id),
                            "instance_api_key": pod.meta.get("pod_key", "")})
        slow = self.cloud.faults.take("slow_create", "vast", "create")
        if slow:
            ok.delay_s = slow.seconds
        return ok

    # -- instances --------------------------------------------------------------------------------
    def instance_json(self, pod: SandboxPod) -> dict[str, Any]:
        now = time.time()
        stale = pod.status == "terminated"
        ready = pod.is_ready(now) or stale
        actual: str | None
        if pod.status == "stopped":
            actual, intended = "stopped", "stopped"
        elif ready and pod.meta.get("vast_state") and not stale:
            actual, intended = str(pod.meta["vast_state"]), "running"
        elif ready:
            actual, intended = "running", "running"
        else:
            actual, intended = ("loading" if now - pod.created_at > 0.05 else None), "running"
        ssh_port = pod.port_map.get(22)
        ports: dict[str, Any] = {}
        if actual == "running":
            ports = {f"{private}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(public)}]
                     for private, public in pod.port_map.items()}
        storage_hr = pod.disk_rate()
        direct_start = min(pod.port_map.values()) if pod.port_map else None
        return {
            "id": int(pod.pod_id), "label": pod.name or None, "actual_status": actual,
            "intended_status": intended, "cur_state": "stopped" if actual == "stopped" else
            "running", "next_state": intended,
            "status_msg": "success, running sbx/" + pod.image if actual == "running" else
            "Pulling image" if actual == "loading" else None,
            "image_uuid": pod.image, "image_runtype": pod.meta.get("runtype"),
            "image_args": pod.meta.get("args") or [], "onstart": pod.meta.get("onstart"),
            "extra_env": [[k, v] for k, v in pod.env.items()],
            # end_date is the rental's end (a number in the spec): the offer's 30-day maximum
            "start_date": pod.created_at, "end_date": pod.created_at + 30 * 24 * 3600.0,
            "public_ipaddr": "127.0.0.1", "local_ipaddrs": "127.0.0.1 ",
            "ssh_host": "127.0.0.1", "ssh_port": ssh_port, "ssh_idx": "0",
            "machine_dir_ssh_port": ssh_port, "ports": ports,
            "direct_port_start": direct_start, "direct_port_end": direct_start,
            "direct_port_count": len(pod.port_map),
            "gpu_name": pod.gpu_type, "num_gpus": pod.gpu_count,
            "gpu_ram": pod.meta.get("gpu_ram"), "gpu_util": 0.0 if actual == "running" else None,
            "machine_id": pod.meta.get("machine_id"), "host_id": pod.meta.get("host_id"),
            "geolocation": pod.meta.get("geolocation"),
            "dph_base": pod.compute_rate, "dph_total": round(pod.compute_rate + storage_hr, 6),
            "storage_cost": pod.storage_cost_gb_month, "storage_total_cost": round(storage_hr, 6),
            "is_bid": bool(pod.meta.get("is_bid")),
            "min_bid": pod.meta.get("min_bid", round(pod.compute_rate * 0.5, 4)),
            "disk_space": pod.disk_gb, "reliability2": pod.meta.get("reliability"),
            "verification": "verified", "cuda_max_good": float(pod.cuda),
            "credit_balance": None, "time_remaining": "",
            # vast-cli vast.py `_fmt_volumes` reads `volume_info` as a list of {id, ...}
            "volume_info": ([{"id": int(pod.meta["volume_id"]),
                              "mount_path": pod.meta.get("volume_path")}]
                            if pod.meta.get("volume_id") else []),
        }

    def _owned(self, req: Request, account: Account) -> SandboxPod | None:
        return self.cloud.find("vast", req.params["instance_id"], account)

    def _live_owned(self, req: Request, op: str) -> SandboxPod | Response:
        """The caller's instance the path names, not destroyed; else the gate's refusal or the
        404 vast answers for a missing or destroyed instance."""
        account = self._gate(req, op)
        if isinstance(account, Response):
            return account
        pod = self._owned(req, account)
        if pod is None or pod.status == "terminated":
            # destroy_instance.yaml responses.404 example (vast-ai/docs @ c6246226)
            return vast_error(404, "not_found", "Instance not found")
        return pod

    def list_v1(self, req: Request) -> Response:
        account = self._gate(req, "list")
        if isinstance(account, Response):
            return account
        try:
            filters = json.loads(req.q("select_filters") or "{}")
            limit = min(int(json.loads(req.q("limit") or "25")), 25)
            after = req.q("after_token")
            after_id = int(json.loads(base64.urlsafe_b64decode(after))["id"]) if after else 0
        except (ValueError, KeyError, TypeError):
            return vast_error(400, "invalid_request", "bad query parameters")
        rows = sorted((self.instance_json(p) for p in self.cloud.pods_of("vast", account)),
                      key=lambda r: r["id"])
        all_rows = rows
        for col, cond in (filters or {}).items():
            if col in COMPUTED_INSTANCE_COLS:
                return vast_error(400, "invalid_request", f"column {col} is not filterable")
            if not isinstance(cond, dict):
                return vast_error(400, "invalid_request", f"bad filter for {col}")
            for op, target in cond.items():
                rows = [r for r in rows if _match(r.get(col), op, target)]
        page = [r for r in rows if r["id"] > after_id][:limit]
        more = len([r for r in rows if r["id"] > after_id]) > len(page)
        token = (base64.urlsafe_b64encode(json.dumps({"id": page[-1]["id"]}).encode()).decode()
                 if more and page else None)
        label_counts: dict[str, int] = {}
        for r in all_rows:
            label_counts[r["label"] or ""] = label_counts.get(r["label"] or "", 0) + 1
        # instances_found: "Number of instances returned in this page" (show_instances.yaml)
        return Response(200, {"success": True, "instances_found": len(page),
                              "total_instances": len(all_rows), "label_counts": label_counts,
                              "next_token": token, "instances": page})

    def list_v0(self, req: Request) -> Response:
        account = self._gate(req, "list")
        if isinstance(account, Response):
            return account
        rows = [self.instance_json(p) for p in self.cloud.pods_of("vast", account)]
        return Response(200, {"instances": rows})

    def show(self, req: Request) -> Response:
        account = self._gate(req, "get")
        if isinstance(account, Response):
            return account
        pod = self._owned(req, account)
        # A destroyed (or never-owned) instance answers `instances: null` (undocumented; the
        # `vastai` 1.9.1 client's show instance returns None for it, i.e. gone).
        return Response(200, {"instances": self.instance_json(pod) if pod else None})

    def request_logs(self, req: Request) -> Response:
        """vast-cli `logs`: `PUT /api/v0/instances/request_logs/{id}/` (`tail`, `filter`) answers
        a `result_url` to fetch the log from without the key (vast-ai/vast-cli vast.py `logs`)."""
        pod = self._live_owned(req, "get")
        if isinstance(pod, Response):
            return pod
        body = req.json() or {}
        lines = self.cloud.container_log(pod)
        if body.get("filter"):
            lines = [line for line in lines if str(body["filter"]) in line]
        if str(body.get("tail") or "").isdigit():
            lines = lines[-int(body["tail"]):]
        token = secrets.token_urlsafe(12)
        self.log_results[token] = "".join(line + "\n" for line in lines)
        url = f"http://{req.headers.get('host', '127.0.0.1')}/sandbox/vast-logs/{token}"
        return Response(200, {"success": True, "result_url": url,
                              "msg": "logs are being uploaded; fetch them from result_url"})

    def log_result(self, req: Request) -> Response:
        text = self.log_results.get(req.params["token"])
        if text is None:
            return Response(404, b"", content_type="text/plain")
        return Response(200, text.encode("utf-8"), content_type="text/plain")

    def manage(self, req: Request) -> Response:
        pod = self._live_owned(req, "get")
        if isinstance(pod, Response):
            return pod
        body = json_body(req, "invalid_args")
        if isinstance(body, Response):
            return body
        if "volume_info" in body:  # "must be attached during creation" (the guide, vast.py)
            return vast_error(400, "invalid_args", "a volume attaches only at instance create")
        if "label" in body:
            if len(str(body["label"])) > 256:
                return vast_error(400, "label_too_long", "label is too long")
            pod.name = str(body["label"])
        state = body.get("state")
        if state == "stopped":
            self.cloud.stop(pod)
        elif state == "running":
            self.cloud.start(pod)
        elif state is not None:
            return vast_error(400, "invalid_args", "state must be running or stopped")
        return Response(200, {"success": True})

    def destroy(self, req: Request) -> Response:
        pod = self._live_owned(req, "terminate")
        if isinstance(pod, Response):
            return pod
        fault = self.cloud.faults.take("terminate_fail", "vast", "terminate")
        if fault:
            return vast_error(fault.status if fault.status >= 500 else 500, "server_error",
                              "Internal server error")
        if self.cloud.faults.take("terminate_noop", "vast", "terminate"):
            return Response(200, {"success": True})
        unlisted = self.cloud.faults.take("terminate_unlisted", "vast", "terminate")
        self.cloud.terminate(pod, keep_billing=unlisted is not None)
        return Response(200, {"success": True})

    def user(self, req: Request) -> Response:
        account = self._gate(req, "user")
        if isinstance(account, Response):
            return account
        # `credit` is the funds left (vast-ai/docs sdk/python/hello-world.mdx @ c624622); what
        # `balance` holds on a real account is not documented beyond "the current balance". The
        # sandbox answers a different number there (charges accrued, as a negative amount) so a
        # client that reads the wrong field sees wrong money here too.
        # both as of the meter's last update (meter_lag_s; vast documents no update interval)
        accrued = self.cloud.meter.reported(provider=account.provider, account=account.name)
        credit = round(account.balance - accrued, 8)
        return Response(200, {
            "id": abs(hash(account.name)) % 10**6, "username": account.name,
            "email": f"{account.name}@sandbox.invalid", "credit": credit,
            "balance": round(-accrued, 8),
            "can_pay": True, "has_billing": True, "ssh_key": "",
        })

    # -- local volumes ------------------------------------------------------------------------------
    def _volume_for_rent(self, account: Account, machine_id: int,
                         info: Any) -> tuple[str, str] | Response | None:
        """`volume_info` `{mount_path, create_new, volume_id}` (vast.py validate_volume_params):
        an existing volume of the account, on the offer's own machine."""
        if info is None:
            return None
        if not isinstance(info, dict) or not info.get("mount_path"):
            return vast_error(400, "invalid_args", "volume_info needs mount_path and volume_id")
        if info.get("create_new"):
            return vast_error(400, "invalid_args", "creating a volume at rent is not offered by "
                                                   "the sandbox")
        volume = next((v for v in self.cloud.volumes_of(account)
                       if v.volume_id == str(info.get("volume_id"))), None)
        if volume is None:
            return vast_error(404, "no_such_volume", "Volume with that ID does not exist.")
        if volume.machine_id != machine_id:
            return vast_error(400, "invalid_args", f"volume {volume.volume_id} is on machine "
                                                   f"{volume.machine_id}, not {machine_id}")
        return volume.volume_id, str(info["mount_path"])

    def _volume_offers(self, storage_gb: float) -> list[dict[str, Any]]:
        with self.cloud.lock:
            offers = list(self.cloud.vast_offers.values())
            used: dict[int, int] = {}
            for v in self.cloud.volumes.values():
                if v.provider == "vast" and v.deleted_at is None and v.machine_id is not None:
                    used[v.machine_id] = used.get(v.machine_id, 0) + v.size_gb
        rows: dict[int, dict[str, Any]] = {}
        for o in offers:
            if o.machine_id in rows:
                continue
            free = max(0.0, o.disk_space - used.get(o.machine_id, 0))
            rows[o.machine_id] = {
                "id": VOLUME_OFFER_BASE + o.machine_id, "ask_contract_id": VOLUME_OFFER_BASE
                + o.machine_id, "machine_id": o.machine_id, "host_id": o.host_id,
                "disk_space": free, "disk_bw": 2000.0, "storage_cost": o.storage_cost,
                "storage_total_cost": round(o.storage_cost * storage_gb / 720.0, 10),
                "inet_down": o.inet_down, "inet_up": o.inet_up, "reliability": o.reliability,
                "reliability2": o.reliability, "geolocation": o.geolocation,
                "verified": o.verified, "verification": "verified", "external": False,
                "cuda_max_good": o.cuda_max_good, "driver_version": "570.86.10",
                "static_ip": True, "start_date": time.time(), "duration": 30 * 24 * 3600.0,
            }
        return list(rows.values())

    def search_volumes(self, req: Request) -> Response:
        account = self._gate(req, "volume_list")
        if isinstance(account, Response):
            return account
        query = json_body(req, "invalid_request")
        if isinstance(query, Response):
            return query
        if not isinstance(query, dict):
            return vast_error(400, "invalid_request", "Invalid query, must be dict of conditions")
        query = dict(query)
        query.pop("order", None)
        limit = query.pop("limit", 64)
        rows = self._volume_offers(float(query.pop("allocated_storage", 1.0) or 1.0))
        for field, cond in query.items():
            if not isinstance(cond, dict):
                continue
            for op, target in cond.items():
                if op not in OPS:
                    return vast_error(400, "invalid_request", f"unknown operator {op!r}")
                rows = [r for r in rows if field not in r or _match(r.get(field), op, target)]
        return Response(200, {"offers": rows[: int(limit)]})

    def create_volume(self, req: Request) -> Response:
        account = self._gate(req, "volume_create")
        if isinstance(account, Response):
            return account
        try:
            body = req.json() or {}
            offer_id, size = int(body["id"]), int(body.get("size", 15))
        except (ValueError, KeyError, TypeError):
            return vast_error(400, "invalid_args", "id (a volume offer) and size are required")
        name = str(body.get("name") or "")
        if name and self.cloud.vast_volume_names_strict and not STRICT_VOLUME_NAME.match(name):
            return vast_error(400, "invalid_args", "name must be alphanumeric with underscores, "
                                                   "max length 64")
        offer = next((o for o in self._volume_offers(1.0) if o["id"] == offer_id), None)
        if offer is None:
            return vast_error(404, "no_such_ask", f"volume offer {offer_id} is not available")
        if size < 1 or size > offer["disk_space"]:
            return vast_error(400, "invalid_args", f"size {size} GB: the offer has "
                                                   f"{offer['disk_space']:g} GB")
        volume = self.cloud.create_vast_volume(account, name, size, int(offer["machine_id"]),
                                               float(offer["storage_cost"]))
        fault = self.cloud.faults.take("error_after_create", "vast", "volume_create")
        if fault:
            return vast_error(fault.status if fault.status >= 500 else 500, "server_error",
                              "Internal server error")
        if not self.cloud.vast_volume_answer_names_id:
            return Response(200, {"success": True})
        return Response(200, {"success": True, "volume_name": f"V.{volume.volume_id}"})

    def volume_json(self, volume: Any) -> dict[str, Any]:
        with self.cloud.lock:  # `instances`: an array of objects (show_volumes.yaml)
            users = [{"id": int(p.pod_id)} for p in self.cloud.pods.values()
                     if p.provider == "vast" and p.status != "terminated"
                     and p.meta.get("volume_id") == volume.volume_id]
        return {"id": int(volume.volume_id), "label": volume.name or None,
                "disk_space": volume.size_gb, "status": "online",
                "machine_id": volume.machine_id, "host_id": 7100,
                "storage_total_cost": round(volume.rate(), 10), "start_date": volume.created_at,
                "instances": users, "verification": "verified", "inet_up": 500.0,
                "inet_down": 800.0, "disk_name": "sandbox nvme", "cpu_arch": "amd64"}

    def list_volumes(self, req: Request) -> Response:
        account = self._gate(req, "volume_list")
        if isinstance(account, Response):
            return account
        kind = req.q("type") or "all_volume"
        rows = ([] if kind == "network_volume"
                else [self.volume_json(v) for v in self.cloud.volumes_of(account)])
        return Response(200, {"volumes": rows})

    def delete_volume(self, req: Request) -> Response:
        account = self._gate(req, "volume_delete")
        if isinstance(account, Response):
            return account
        raw = req.q("id")
        if raw is None:
            try:
                body = req.json() or {}
            except ValueError:
                body = {}
            raw = body.get("id") if isinstance(body, dict) else None
        volume = next((v for v in self.cloud.volumes_of(account) if v.volume_id == str(raw)),
                      None)
        if raw is None or not str(raw).isdigit():
            return vast_error(400, "invalid_args", "Please provide a valid volume ID.")
        if volume is None:
            return vast_error(404, "no_such_volume", "Volume with that ID does not exist.")
        if self.cloud.volume_in_use(volume):
            # "Deleting a volume that is currently mounted to a running or stopped instance is
            # not allowed" (guides/instances/storage/volumes.mdx)
            return vast_error(400, "invalid_args", "the volume is in use by an instance; "
                                                   "destroy the instance first")
        self.cloud.delete_volume(volume)
        return Response(200, {"success": True})

"""RunPod emulator: REST v2 (`/v2/...`) plus the GraphQL queries tailpod and `runpod` send.

Field names, status life cycle, error bodies and quirks follow runpod/docs api-reference/openapi.json
and api-reference-v2/openapi.json @ a900806e, and docs/providers.md: RFC 9457 errors,
`status: RUNNING` right after create while `runtime` and `ssh.direct` are still null, `cost` 0.0
once EXITED, 204 on delete, GraphQL answering 200 with `errors` for business failures and a
graphql-core schema (so string-literal documents and variables both parse like the real thing).
"""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime, timezone
from typing import Any

from graphql import (
    GraphQLError,
    build_schema,
    execute_sync,
    parse,
    validate,
)
from graphql.language import FieldNode, OperationDefinitionNode

from tailpod.sandbox.cloud import AuthFailure, SandboxCloud
from tailpod.sandbox.http import Request, Response, Router
from tailpod.sandbox.model import (
    RUNPOD_DISK_RUNNING_GB_MONTH,
    Account,
    RunPodGpuType,
    SandboxPod,
    new_runpod_id,
)

CAPACITY_DETAIL = (
    "There are no longer any instances available with the requested specifications. "
    "Please refresh and try again."
)
GENERIC_GRAPHQL_ERROR = "Something went wrong. Please try again later or contact support."

CREATE_KEYS = {
    "name", "image", "args", "disk", "env", "ports", "registry", "cloud", "cpu", "dataCenterIds",
    "globalNetworking", "gpu", "mounts", "startJupyter", "startSsh", "templateId",
}
GPU_KEYS = {"id", "count", "allowedCudaVersions", "minCudaVersion"}
CPU_KEYS = {"id", "vcpuCount"}  # CreateCpuConfig: BaseCpuConfig, unevaluatedProperties: false
# CPU flavors (`CpuType`: id, name, group, vcpu {min,max}, ramGbPerVcpu, price.securePerVcpu);
# the figures are the sandbox's, shaped like the spec's examples (cpu5c, $0.04 per vCPU).
CPU_CATALOG: tuple[dict[str, Any], ...] = (
    {"id": "cpu3c", "name": "Compute-Optimized", "group": "Gen 3", "vcpu": {"min": 2, "max": 32},
     "ramGbPerVcpu": 2.0, "price": {"securePerVcpu": 0.03, "serverlessPerVcpu": 0.02}},
    {"id": "cpu5c", "name": "Compute-Optimized", "group": "Gen 5", "vcpu": {"min": 2, "max": 32},
     "ramGbPerVcpu": 2.5, "price": {"securePerVcpu": 0.04, "serverlessPerVcpu": 0.03}},
)
PORT_RE = re.compile(r"^\d{1,5}/(tcp|http)$")
TITLES = {
    400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden",
    404: "Not Found", 409: "Conflict", 422: "Unprocessable Entity", 429: "Too Many Requests",
    500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
    504: "Gateway Timeout",
}
# components.headers RateLimit-Policy / RateLimit: structured-field lists, one member per window
# (RateLimitPolicyHeader, RateLimitHeader @ a900806e); the sandbox never runs out.
CUDA_RE = re.compile(r"^\d+\.\d+$")


def cuda_key(version: str) -> tuple[int, int]:
    """`major.minor` "compared numerically rather than as a decimal — so 12.11 is above 12.2"."""
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


def cuda_fits(host: str, floor: str | None, allowed: list[str]) -> bool:
    if allowed and host not in allowed:  # "Matching is exact"
        return False
    return floor is None or cuda_key(host) >= cuda_key(floor)


RATE_HEADERS = {"RateLimit-Policy": '"minute";q=60;w=60, "hour";q=3000;w=3600, '
                                     '"day";q=50000;w=86400',
                "RateLimit": '"minute";r=59;t=60, "hour";r=2999;t=3600, "day";r=49999;t=86400'}


def problem(status: int, detail: str, errors: list[str] | None = None,
            headers: dict[str, str] | None = None) -> Response:
    body: dict[str, Any] = {"title": TITLES.get(status, "Error"), "status": status,
                            "detail": detail}
    if errors:
        body["errors"] = errors
    return Response(status, body, {**RATE_HEADERS, **(headers or {})},
                    content_type="application/problem+json")


def rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# BillingBucketSize (components.schemas, runpod/docs api-reference-v2/openapi.json @ a900806e):
# "Length of each billing time bucket", default `day`. The spec does not say on which day a week
# starts; the emulator starts it on Monday, UTC (ISO 8601) [unverified].
BUCKET_SIZES = ("hour", "day", "week", "month", "year")


def bucket_start(t: float, size: str) -> float:
    """The start of the `size` bucket holding `t` (UTC)."""
    if size == "hour":
        return t - t % 3600
    day = t - t % 86400
    if size == "day":
        return day
    if size == "week":
        return day - datetime.fromtimestamp(day, timezone.utc).weekday() * 86400
    at = datetime.fromtimestamp(t, timezone.utc)
    first = at.replace(month=1 if size == "year" else at.month, day=1, hour=0, minute=0,
                       second=0, microsecond=0)
    return first.timestamp()


def bucket_end(start: float, size: str) -> float:
    """The end (exclusive) of the bucket that starts at `start`."""
    if size in ("hour", "day", "week"):
        return start + {"hour": 3600, "day": 86400, "week": 7 * 86400}[size]
    at = datetime.fromtimestamp(start, timezone.utc)
    if size == "year":
        return at.replace(year=at.year + 1).timestamp()
    return (at.replace(year=at.year + 1, month=1) if at.month == 12
            else at.replace(month=at.month + 1)).timestamp()


def _parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def go_time(t: float | None) -> str | None:
    """RunPod's GraphQL/v1 timestamps use Go's default format, not ISO-8601 (a recorded v1 answer
    of 2026-08-20 had `createdAt` "2026-08-20 06:16:19.436 +0000 UTC"; the spec does not say)."""
    if t is None:
        return None
    dt = datetime.fromtimestamp(t, timezone.utc)
    return dt.strftime("%Y-%m-%d %H:%M:%S.") + f"{dt.microsecond // 1000:03d} +0000 UTC"


SCHEMA_SDL = """
scalar Void
enum CloudTypeEnum { ALL SECURE COMMUNITY }
input EnvironmentVariableInput { key: String! value: String! }
input PodFindAndDeployOnDemandInput {
  name: String imageName: String gpuTypeId: String gpuTypeIdList: [String] gpuCount: Int
  cloudType: CloudTypeEnum dataCenterId: String countryCode: String containerDiskInGb: Int
  volumeInGb: Int volumeMountPath: String minVcpuCount: Int minMemoryInGb: Int dockerArgs: String
  ports: String env: [EnvironmentVariableInput] startSsh: Boolean startJupyter: Boolean
  supportPublicIp: Boolean templateId: String networkVolumeId: String allowedCudaVersions: [String]
  minCudaVersion: String cudaVersion: String containerRegistryAuthId: String minDownload: Int
  minUpload: Int deployCost: Float stopAfter: String terminateAfter: String
}
input PodFilter { podId: String! }
input PodStopInput { podId: String! }
input PodTerminateInput { podId: String! }
input PodResumeInput { podId: String! gpuCount: Int }
input GpuTypeFilter { id: String }
input GpuLowestPriceInput {
  gpuCount: Int secureCloud: Boolean minDisk: Int minMemoryInGb: Int minVcpuCount: Int
  dataCenterId: String
}
type GpuLowestPrice {
  minimumBidPrice: Float uninterruptablePrice: Float stockStatus: String
  availableGpuCounts: [Int] maxUnreservedGpuCount: Int
}
type GpuType {
  id: String displayName: String manufacturer: String memoryInGb: Int cudaCores: Int
  maxGpuCount: Int secureCloud: Boolean communityCloud: Boolean securePrice: Float
  communityPrice: Float oneMonthPrice: Float threeMonthPrice: Float oneWeekPrice: Float
  communitySpotPrice: Float secureSpotPrice: Float
  lowestPrice(input: GpuLowestPriceInput): GpuLowestPrice
}
type PodRuntimePort { ip: String isIpPublic: Boolean privatePort: Int publicPort: Int type: String }
type PodRuntimeGpu { id: String gpuUtilPercent: Float memoryUtilPercent: Float }
type PodRuntime { uptimeInSeconds: Int ports: [PodRuntimePort] gpus: [PodRuntimeGpu] }
type Machine {
  podHostId: String gpuDisplayName: String gpuTypeId: String dataCenterId: String location: String
}
type Pod {
  id: String name: String imageName: String env: [String] machineId: String machine: Machine
  desiredStatus: String costPerHr: Float adjustedCostPerHr: Float containerDiskInGb: Int
  volumeInGb: Int volumeMountPath: String dockerArgs: String dockerId: String gpuCount: Int
  lastStatusChange: String memoryInGb: Float podType: String port: Int ports: String
  uptimeSeconds: Int vcpuCount: Float runtime: PodRuntime createdAt: String lastStartedAt: String
  locked: Boolean
}
type NetworkVolume { id: String name: String size: Int dataCenterId: String }
type User {
  id: String email: String pubKey: String clientBalance: Float currentSpendPerHr: Float
  spendLimit: Float networkVolumes: [NetworkVolume] pods: [Pod]
}
type Query { myself: User pod(input: PodFilter!): Pod gpuTypes(input: GpuTypeFilter): [GpuType] }
type Mutation {
  podFindAndDeployOnDemand(input: PodFindAndDeployOnDemandInput!): Pod
  podStop(input: PodStopInput!): Pod
  podResume(input: PodResumeInput!): Pod
  podTerminate(input: PodTerminateInput!): Void
}
"""

GRAPHQL_OPS = {
    "podFindAndDeployOnDemand": "create",
    "podTerminate": "terminate",
    "pod": "get",
    "myself": "list",
    "gpuTypes": "catalog",
}


class RunPodEmulator:
    def __init__(self, cloud: SandboxCloud) -> None:
        self.cloud = cloud
        self.schema = build_schema(SCHEMA_SDL)
        self.router = Router()
        r = self.router
        r.add("GET", "/v2/pods", self.list_pods)
        r.add("POST", "/v2/pods", self.create_pod)
        r.add("GET", "/v2/pods/{pod_id}", self.get_pod)
        r.add("DELETE", "/v2/pods/{pod_id}", self.delete_pod)
        r.add("POST", "/v2/pods/{pod_id}/action", self.pod_action)
        r.add("GET", "/v2/pods/{pod_id}/logs", self.pod_logs)
        r.add("GET", "/v2/catalog/gpus", self.catalog)
        r.add("GET", "/v2/catalog/gpus/{gpu_id}", self.catalog_one)
        r.add("GET", "/v2/catalog/cpus", self.cpu_catalog)
        r.add("GET", "/v2/billing/pods", self.billing)
        r.add("GET", "/v2/network-volumes", self.list_volumes)
        r.add("POST", "/v2/network-volumes", self.create_volume)
        r.add("GET", "/v2/network-volumes/{volume_id}", self.get_volume)
        r.add("PATCH", "/v2/network-volumes/{volume_id}", self.update_volume)
        r.add("DELETE", "/v2/network-volumes/{volume_id}", self.delete_volume)
        r.add("GET", "/v2/catalog/datacenters", self.data_centers)
        r.add("GET", "/v2/billing/network-volumes", self.volume_billing)
        r.add("POST", "/graphql", self.graphql)

    # -- shared gates -----------------------------------------------------------------------------
    def _auth(self, req: Request, op: str = "any") -> Account | Response:
        try:
            return self.cloud.authenticate("runpod", req.bearer())
        except AuthFailure as exc:
            echo = (f" {req.bearer()!r}" if req.bearer()
                    and self.cloud.faults.take("echo_key", "runpod", op) else "")
            if exc.status == 403:
                return problem(403, f"access denied for API key{echo}" if echo
                               else "access denied")
            detail = "missing bearer token" if not req.bearer() else "invalid bearer token"
            return problem(401, detail + echo)

    def _injected(self, op: str) -> Response | None:
        faults = self.cloud.faults
        fault = faults.take("rate_limit", "runpod", op)
        if fault:
            return problem(429, "rate limit exceeded",
                           headers={"Retry-After": str(max(0, math.ceil(fault.retry_after)))})
        fault = faults.take("server_error", "runpod", op)
        if fault:
            return problem(fault.status, "upstream failure")
        return None

    def _gate(self, req: Request, op: str) -> Account | Response:
        account = self._auth(req, op)
        if isinstance(account, Response):
            return account
        if account.scope_pod is not None and self.cloud.refuse_pod_key_on_rest:
            return problem(403, "this API key cannot be used with the REST API")
        if not self.cloud.scope_allows(account, req.params.get("pod_id")):
            return problem(403, "this API key is scoped to another pod")
        injected = self._injected(op)
        return injected if injected else account

    # -- REST v2 ----------------------------------------------------------------------------------
    def pod_status(self, pod: SandboxPod, now: float) -> str:
        """v2 PodStatus: PROVISIONING -> STARTING -> RUNNING, EXITED, ERROR, TERMINATED."""
        if pod.status == "terminated":
            return "RUNNING" if self.cloud.stale_visible(pod) else "TERMINATED"
        if pod.status == "stopped":
            return "EXITED"
        if int(pod.meta.get("exits", 0)) >= self.cloud.crash_error_after:
            return "ERROR"
        if pod.meta.get("early_running"):
            return "RUNNING"
        if now < float(pod.meta.get("provisioned_at", 0.0)):
            return "PROVISIONING"
        if not pod.is_ready(now) or pod.started_at is None or pod.meta.get("crashing"):
            return "STARTING"  # a container whose entrypoint keeps exiting never runs
        return "RUNNING"

    def pod_json(self, pod: SandboxPod) -> dict[str, Any]:
        now = time.time()
        status = self.pod_status(pod, now)
        gone = status == "TERMINATED"
        actions = {
            "PROVISIONING": ["stop", "terminate"],
            "STARTING": ["stop", "terminate"],
            "RUNNING": ["stop", "restart", "terminate"],
            "EXITED": ["start", "terminate"],
            "ERROR": ["start", "terminate"],
            "TERMINATED": [],
        }[status]
        # `runtime` is null until the container runs (spec: "Null when the pod is not RUNNING");
        # with the early-RUNNING quirk it stays null until the container is really up.
        ready = (status == "RUNNING" and pod.is_ready(now) and not pod.meta.get("crashing")) \
            or (pod.status == "terminated" and not gone)
        runtime = None
        ssh: dict[str, Any] = {"proxy": None, "direct": None}
        if ready:
            ports = []
            for spec in pod.ports:
                private, _, proto = spec.partition("/")
                public = pod.port_map.get(int(private)) if proto == "tcp" else None
                ports.append({"private": int(private), "public": public, "type": proto,
                              "ip": "127.0.0.1" if public else None})
            runtime = {
                "uptime": int(now - (pod.started_at or now)),
                "gpus": [{"util": 0, "memoryUtil": 0}  # PodGpuUtilization
                         for i in range(pod.gpu_count)],
                "ports": ports,
            }
            ssh_port = pod.port_map.get(22)
            ssh["proxy"] = {
                "host": "127.0.0.1", "port": ssh_port or 22, "username": f"{pod.pod_id}-sbx",
                "command": f"ssh {pod.pod_id}-sbx@127.0.0.1 -p {ssh_port or 22}",
            }
            if ssh_port:
                ssh["direct"] = {"host": "127.0.0.1", "port": ssh_port, "username": "root",
                                 "command": f"ssh root@127.0.0.1 -p {ssh_port}"}
        body: dict[str, Any] = {
            "id": pod.pod_id,
            "name": pod.name,
            "image": pod.image,
            "args": pod.command if isinstance(pod.command, str) else "",
            "disk": pod.disk_gb,
            "ports": list(pod.ports),
            "env": dict(pod.env),
            "registry": None,
            "status": status,
            "actions": actions,
            "mounts": {"network": [{"volumeId": pod.meta["volume_id"],
                                    "path": pod.meta.get("volume_path")}]}
            if pod.meta.get("volume_id") else
            {"persistent": {"size": pod.volume_gb, "path": "/workspace"}}
            if pod.volume_gb else {},
            "gpu": {"id": pod.gpu_type, "count": pod.gpu_count},
            "cloud": pod.cloud,
            "dataCenterId": pod.data_center,
            "cudaVersion": pod.cuda,
            "ssh": ssh,
            "template": None,
            "cost": round(pod.compute_rate, 4) if status not in ("EXITED", "TERMINATED") else 0.0,
            "locked": False,
            "globalNetworking": {"enabled": False},  # PodGlobalNetworking is an object
            "runtime": runtime,
            "createdAt": rfc3339(pod.created_at),
            "startedAt": rfc3339(pod.started_at),
        }
        if "cpu" in pod.meta:  # Pod.cpu "Present for CPU pods"; Pod.gpu "omitted from CPU pods"
            del body["gpu"]
            flavor = next(c for c in CPU_CATALOG if c["id"] == pod.meta["cpu"]["id"])
            body["cpu"] = {**pod.meta["cpu"], "memory": max(1, int(
                flavor["ramGbPerVcpu"] * pod.meta["cpu"]["vcpuCount"]))}
        return body

    def list_pods(self, req: Request) -> Response:
        account = self._gate(req, "list")
        if isinstance(account, Response):
            return account
        pods = [self.pod_json(p) for p in self.cloud.pods_of("runpod", account)]
        size = self.cloud.runpod_list_page_size
        if not size:
            return Response(200, {"pods": pods}, dict(RATE_HEADERS))
        # Pages are undocumented in v2; when switched on, the emulator plays AIP-158 paging
        # (docs/sandbox.md), the shape tailpod's client follows.
        start = int(req.q("pageToken") or 0)
        body: dict[str, Any] = {"pods": pods[start:start + size]}
        if start + size < len(pods):
            body["nextPageToken"] = str(start + size)
        return Response(200, body, dict(RATE_HEADERS))

    def get_pod(self, req: Request) -> Response:
        account = self._gate(req, "get")
        if isinstance(account, Response):
            return account
        pod = self.cloud.find("runpod", req.params["pod_id"], account)
        if pod is None:
            return problem(404, "pod not found")
        return Response(200, self.pod_json(pod), dict(RATE_HEADERS))

    def _live_pod(self, req: Request, account: Account) -> SandboxPod | None:
        """The account's pod the path names, unless it is missing or terminated (both 404)."""
        pod = self.cloud.find("runpod", req.params["pod_id"], account)
        return pod if pod is not None and pod.status != "terminated" else None

    def _terminate(self, pod: SandboxPod) -> Response:
        fault = self.cloud.faults.take("terminate_fail", "runpod", "terminate")
        if fault:
            return problem(fault.status if fault.status >= 500 else 500, "upstream failure")
        if self.cloud.faults.take("terminate_noop", "runpod", "terminate"):
            return Response(204, None, dict(RATE_HEADERS))
        unlisted = self.cloud.faults.take("terminate_unlisted", "runpod", "terminate")
        self.cloud.terminate(pod, keep_billing=unlisted is not None)
        return Response(204, None, dict(RATE_HEADERS))

    def delete_pod(self, req: Request) -> Response:
        account = self._gate(req, "terminate")
        if isinstance(account, Response):
            return account
        pod = self._live_pod(req, account)
        if pod is None:
            return problem(404, "pod not found")
        return self._terminate(pod)

    def pod_action(self, req: Request) -> Response:
        try:
            body = req.json()
        except ValueError:
            return problem(400, "request body is not valid JSON")
        action = body.get("action") if isinstance(body, dict) else None
        op = "terminate" if action == "terminate" else "get"
        account = self._gate(req, op)
        if isinstance(account, Response):
            return account
        valid = ("start", "stop", "restart", "terminate")
        if not isinstance(body, dict) or set(body) != {"action"} or action not in valid:
            return problem(422, "Request validation failed.",
                           ["$.action: value must be one of 'start', 'stop', 'restart', "
                            "'terminate'"])
        pod = self._live_pod(req, account)
        if pod is None:
            return problem(404, "pod not found")
        if action not in self.pod_json(pod)["actions"]:
            return problem(409, f"action {action} is not valid for a pod in status "
                                f"{self.pod_json(pod)['status']}")
        if action == "terminate":
            return self._terminate(pod)
        if action == "stop":
            self.cloud.stop(pod)
        elif action == "start":
            self.cloud.start(pod)
        return Response(200, self.pod_json(pod), dict(RATE_HEADERS))

    def pod_logs(self, req: Request) -> Response:
        """`GET /v2/pods/{id}/logs`: the container log as Server-Sent Events, each `data:` a JSON
        `{"ts", "source", "line"}` and each `id:` the event's ts (spec: getPodLogs). The real
        stream stays open for new lines; this one sends the backfill (`tail`, default 100,
        at most 5000) and closes."""
        account = self._gate(req, "get")
        if isinstance(account, Response):
            return account
        pod = self.cloud.find("runpod", req.params["pod_id"], account)
        if pod is None:
            return problem(404, "pod not found")
        source = req.q("source")
        if source not in (None, "container", "system"):
            return problem(400, "source must be container or system")
        try:
            tail = int(req.q("tail") or "100")
        except ValueError:
            return problem(400, "tail must be an integer")
        if not 0 <= tail <= 5000:
            return problem(400, "tail must be between 0 and 5000")
        lines = [] if source == "system" else self.cloud.container_log(pod)
        lines = lines[-tail:] if tail else []
        stamp = rfc3339(pod.started_at or pod.created_at) or ""
        events = []
        for seq, line in enumerate(lines, 1):
            data = json.dumps({"ts": stamp, "source": "container", "line": line})
            events.append(f"id: {stamp}/{seq:012d}\ndata: {data}\n\n")
        headers = {**RATE_HEADERS, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return Response(200, "".join(events).encode("utf-8"), headers,
                        content_type="text/event-stream")

    def _validate_create(self, body: Any) -> tuple[Response | None, dict[str, Any]]:
        if not isinstance(body, dict):
            return problem(422, "Request validation failed.", ["$: value must be an object"]), {}
        # CreatePodRequest and CreateGpuConfig are `unevaluatedProperties: false` and Mounts is
        # `additionalProperties: false` (runpod/docs api-reference-v2/openapi.json @ a900806e);
        # a body that breaks the contract is 422 by the status table of paths./v2/pods.post
        # ("The body does not match the contract. `errors` lists each violation"). The only
        # public 400 observation (runpodctl PR #314) is REST v1.
        unknown = [f"$: additional properties '{k}' not allowed"
                   for k in sorted(set(body) - CREATE_KEYS)]
        gpu_in, mounts_in = body.get("gpu"), body.get("mounts")
        if isinstance(gpu_in, dict):
            unknown += [f"$.gpu: additional properties '{k}' not allowed"
                        for k in sorted(set(gpu_in) - GPU_KEYS)]
        cpu_in = body.get("cpu")
        if isinstance(cpu_in, dict):
            unknown += [f"$.cpu: additional properties '{k}' not allowed"
                        for k in sorted(set(cpu_in) - CPU_KEYS)]
        if isinstance(mounts_in, dict):
            unknown += [f"$.mounts: additional properties '{k}' not allowed"
                        for k in sorted(set(mounts_in) - {"persistent", "network"})]
        if unknown:
            return problem(422, "Request validation failed.", unknown), {}
        errors: list[str] = []
        name = body.get("name")
        if not isinstance(name, str) or not name:
            errors.append("$.name: value must be a non-empty string")
        gpu = body.get("gpu")
        if gpu is not None:
            if not isinstance(gpu, dict) or not isinstance(gpu.get("id"), str):
                errors.append("$.gpu.id: value must be a string")
            else:
                count = gpu.get("count", 1)
                if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                    errors.append("$.gpu.count: value must be an integer >= 1")
        ports = body.get("ports", [])
        if not isinstance(ports, list) or not all(isinstance(p, str) and PORT_RE.match(p)
                                                  for p in ports):
            errors.append("$.ports: items must look like '8888/http' or '22/tcp'")
        env = body.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            errors.append("$.env: value must be an object of strings")
        if "args" in body and not isinstance(body["args"], str):
            errors.append("$.args: value must be a string")
        disk = body.get("disk", 50)
        if not isinstance(disk, int) or isinstance(disk, bool) or disk < 1:
            errors.append("$.disk: value must be an integer >= 1")
        cloud = body.get("cloud", "SECURE")
        if cloud not in ("SECURE", "COMMUNITY"):
            errors.append("$.cloud: value must be one of 'SECURE', 'COMMUNITY'")
        if errors:
            return problem(422, "Request validation failed.", errors), {}
        if (gpu is None) == (body.get("cpu") is None):
            return problem(400, "exactly one of gpu or cpu must be set"), {}
        cpu = body.get("cpu")
        if cpu is not None:
            flavor = next((c for c in CPU_CATALOG if isinstance(cpu, dict)
                           and c["id"] == cpu.get("id")), None)
            vcpus = cpu.get("vcpuCount") if isinstance(cpu, dict) else None
            if not isinstance(vcpus, int) or isinstance(vcpus, bool) or vcpus < 2 \
                    or vcpus & (vcpus - 1):
                return problem(422, "Request validation failed.",
                               ["$.cpu.vcpuCount: must be an integer >= 2 and a power of two"]), {}
            if flavor is None:
                return problem(400, f"unknown CPU flavor {cpu.get('id')!r}"), {}
            if not flavor["vcpu"]["min"] <= vcpus <= flavor["vcpu"]["max"]:
                return problem(400, f"vcpuCount {vcpus} is not offered for {flavor['id']}"), {}
        if not body.get("image") and not body.get("templateId"):
            # a schema if/then rule of CreatePodRequest, so a contract violation: 422
            return problem(422, "Request validation failed.",
                           ["$.image: required unless templateId is set"]), {}
        if isinstance(gpu, dict):
            allowed, floor = gpu.get("allowedCudaVersions"), gpu.get("minCudaVersion")
            if allowed and floor is not None:  # CreateGpuConfig: "400 if both are sent"
                return problem(400, "minCudaVersion and a non-empty allowedCudaVersions are "
                                    "mutually exclusive"), {}
            for value in ([floor] if floor is not None else []) + list(allowed or []):
                if not isinstance(value, str) or not CUDA_RE.match(value):
                    return problem(422, "Request validation failed.",
                                   ["$.gpu: CUDA versions must look like '12.8'"]), {}
        volume = 0
        mounts = body.get("mounts") or {}
        if isinstance(mounts, dict) and isinstance(mounts.get("persistent"), dict):
            volume = int(mounts["persistent"].get("size") or 0)
        network, refused = self._network_mount(mounts, cloud)
        if refused is not None:
            return refused, {}
        dcs = body.get("dataCenterIds")
        if dcs is not None and (not isinstance(dcs, list)
                                or not all(isinstance(d, str) and d for d in dcs)):
            return problem(422, "Request validation failed.",
                           ["$.dataCenterIds: value must be an array of strings"]), {}
        return None, {
            "network": network, "data_centers": list(dcs or []),
            "name": name, "gpu": gpu["id"] if gpu else "", "count": (gpu or {}).get("count", 1),
            "cpu": dict(cpu) if isinstance(cpu, dict) else None,
            "image": body.get("image"),
            "args": body.get("args") or None, "env": env, "ports": ports, "disk": disk,
            "cloud": cloud, "volume": volume,
            "min_cuda": (gpu or {}).get("minCudaVersion"),
            "allowed_cuda": list((gpu or {}).get("allowedCudaVersions") or []),
        }

    def create_pod(self, req: Request) -> Response:
        account = self._gate(req, "create")
        if isinstance(account, Response):
            return account
        try:
            body = req.json()
        except ValueError:
            return problem(400, "request body is not valid JSON")
        error, spec = self._validate_create(body)
        if error is not None:
            return error
        if spec["cpu"] is not None:
            return self._create_cpu_pod(account, spec)
        gpu_type = self.cloud.runpod_catalog.get(spec["gpu"])
        if gpu_type is None:
            return problem(404, f"gpu type not found: {spec['gpu']}")
        if spec["count"] > gpu_type.max_count:
            return problem(400, f"gpu.count {spec['count']} exceeds the largest machine "
                                f"({gpu_type.max_count}) for {gpu_type.gpu_id}")
        unit = gpu_type.secure_price if spec["cloud"] == "SECURE" else gpu_type.community_price
        rate = round(unit * spec["count"], 4)
        if self.cloud.balance(account) < rate:
            return problem(402, "insufficient balance: at least one hour of credit is required "
                                "to deploy this pod")
        if not cuda_fits(gpu_type.cuda, spec["min_cuda"], spec["allowed_cuda"]):
            # "a version no machine reports yields a capacity error rather than a fallback"
            return problem(400, CAPACITY_DETAIL)
        if gpu_type.stock == "NONE" or self.cloud.faults.take(
            "capacity", "runpod", "create", gpu=gpu_type.gpu_id
        ):
            return problem(400, CAPACITY_DETAIL)
        placed = self._place(account, gpu_type.gpu_id, spec["data_centers"], spec["network"])
        if isinstance(placed, Response):
            return placed
        pod = self._new_pod(account, gpu_type, spec["count"], rate, spec["name"], spec["image"],
                            spec["args"], spec["env"], spec["ports"], spec["disk"], spec["cloud"],
                            spec["volume"])
        pod.data_center = placed
        if spec["network"]:
            pod.meta["volume_id"] = spec["network"]["volumeId"]
            pod.meta["volume_path"] = spec["network"]["path"]
        return self._created(pod, Response(201, None, dict(RATE_HEADERS)))

    # -- network volumes --------------------------------------------------------------------------
    def _network_mount(self, mounts: Any, cloud: str) -> tuple[dict[str, str] | None,
                                                                Response | None]:
        """`Mounts.network` (`maxItems` 1, NetworkMount `{volumeId, path}` both required,
        `additionalProperties: false`); `persistent` and `network` are exclusive (400)."""
        if not isinstance(mounts, dict) or mounts.get("network") is None:
            return None, None
        network = mounts["network"]
        if mounts.get("persistent") is not None:
            return None, problem(400, "mounts.persistent and mounts.network are mutually "
                                      "exclusive")
        if not isinstance(network, list) or len(network) > 1:
            return None, problem(422, "Request validation failed.",
                                 ["$.mounts.network: must be an array of at most 1 item"])
        if not network:
            return None, None
        entry = network[0]
        if not isinstance(entry, dict):
            return None, problem(422, "Request validation failed.",
                                 ["$.mounts.network[0]: value must be an object"])
        extra = sorted(set(entry) - {"volumeId", "path"})
        if extra:
            return None, problem(400, "Request validation failed.",
                                 [f"$.mounts.network[0]: additional properties '{k}' not allowed"
                                  for k in extra])
        if not all(isinstance(entry.get(k), str) and entry.get(k) for k in ("volumeId", "path")):
            return None, problem(422, "Request validation failed.",
                                 ["$.mounts.network[0]: volumeId and path are required strings"])
        if cloud != "SECURE":
            return None, problem(400, "network volumes are only available in Secure Cloud")
        return {"volumeId": entry["volumeId"], "path": entry["path"]}, None

    def _place(self, account: Account, gpu_id: str, wanted: list[str],
               network: dict[str, str] | None) -> str | Response:
        """The data center a pod lands in: the volume's own when one is mounted (it must be in
        `dataCenterIds` when those are given), else the first wanted one with the GPU."""
        dcs = self.cloud.runpod_data_centers
        if network:
            volume = next((v for v in self.cloud.volumes_of(account)
                           if v.volume_id == network["volumeId"]), None)
            if volume is None:
                return problem(400, f"network volume {network['volumeId']} not found")
            if wanted and volume.data_center not in wanted:
                return problem(400, f"network volume {volume.volume_id} is in "
                                    f"{volume.data_center}, not in dataCenterIds")
            wanted = [volume.data_center]
        for dc in dcs:
            if (not wanted or dc["id"] in wanted) and gpu_id in self.cloud.data_center_gpus(dc):
                return str(dc["id"])
        if wanted and not any(dc["id"] in wanted for dc in dcs):
            return problem(400, f"unknown data center(s): {', '.join(wanted)}")
        return problem(400, CAPACITY_DETAIL)

    def volume_json(self, volume: Any) -> dict[str, Any]:
        return {"id": volume.volume_id, "name": volume.name, "size": volume.size_gb,
                "dataCenter": volume.data_center, "type": volume.volume_type}

    def _account_volume(self, req: Request, account: Account) -> Any:
        return next((v for v in self.cloud.volumes_of(account)
                     if v.volume_id == req.params["volume_id"]), None)

    def list_volumes(self, req: Request) -> Response:
        account = self._gate(req, "volume_list")
        if isinstance(account, Response):
            return account
        rows = [self.volume_json(v) for v in self.cloud.volumes_of(account)]
        return Response(200, {"networkVolumes": rows}, dict(RATE_HEADERS))

    def get_volume(self, req: Request) -> Response:
        account = self._gate(req, "volume_get")
        if isinstance(account, Response):
            return account
        volume = self._account_volume(req, account)
        if volume is None:
            return problem(404, "network volume not found")
        return Response(200, self.volume_json(volume), dict(RATE_HEADERS))

    @staticmethod
    def _size_error(size: Any) -> str | None:
        if not isinstance(size, int) or isinstance(size, bool) or not 10 <= size <= 4096:
            return "$.size: value must be an integer between 10 and 4096"
        return None

    def create_volume(self, req: Request) -> Response:
        """`CreateNetworkVolumeRequest` `{name, size, dataCenter, type?}`,
        `additionalProperties: false`; the tier must be one the data center offers."""
        account = self._gate(req, "volume_create")
        if isinstance(account, Response):
            return account
        try:
            body = req.json()
        except ValueError:
            return problem(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return problem(422, "Request validation failed.", ["$: value must be an object"])
        extra = sorted(set(body) - {"name", "size", "dataCenter", "type"})
        if extra:
            return problem(400, "Request validation failed.",
                           [f"$: additional properties '{k}' not allowed" for k in extra])
        errors = [e for e in (self._size_error(body.get("size")),) if e]
        for key in ("name", "dataCenter"):
            if not isinstance(body.get(key), str) or not body.get(key):
                errors.append(f"$.{key}: value must be a non-empty string")
        if body.get("type") is not None and body["type"] not in ("STANDARD", "HIGH_PERFORMANCE"):
            errors.append("$.type: value must be one of 'STANDARD', 'HIGH_PERFORMANCE'")
        if errors:
            return problem(422, "Request validation failed.", errors)
        dc = next((d for d in self.cloud.runpod_data_centers if d["id"] == body["dataCenter"]),
                  None)
        if dc is None:
            return problem(400, f"unknown data center {body['dataCenter']}")
        tiers = list(dc["networkVolumeTypes"])
        vtype = body.get("type") or (tiers[0] if tiers else None)
        if vtype is None or vtype not in tiers:
            return problem(400, f"data center {dc['id']} does not offer "
                                f"{vtype or 'network volumes'}")
        if self.cloud.balance(account) <= 0:
            return problem(402, "insufficient balance")
        volume = self.cloud.create_volume(account, body["name"], body["size"], dc["id"], vtype)
        fault = self.cloud.faults.take("error_after_create", "runpod", "volume_create")
        if fault:
            return problem(fault.status if fault.status >= 500 else 500,
                           "create network volume: failed to read back the created volume")
        return Response(201, self.volume_json(volume), dict(RATE_HEADERS))

    def update_volume(self, req: Request) -> Response:
        """`UpdateNetworkVolumeRequest` `{name?, size?}`, at least one; size may only grow."""
        account = self._gate(req, "volume_get")
        if isinstance(account, Response):
            return account
        try:
            body = req.json()
        except ValueError:
            return problem(400, "request body is not valid JSON")
        if not isinstance(body, dict) or not body:
            return problem(422, "Request validation failed.", ["$: at least one field"])
        extra = sorted(set(body) - {"name", "size"})
        if extra:
            return problem(400, "Request validation failed.",
                           [f"$: additional properties '{k}' not allowed" for k in extra])
        volume = self._account_volume(req, account)
        if volume is None:
            return problem(404, "network volume not found")
        if "size" in body:
            error = self._size_error(body["size"])
            if error:
                return problem(422, "Request validation failed.", [error])
            if body["size"] < volume.size_gb:
                return problem(400, "network volume storage cannot be reduced")
            self.cloud.resize_volume(volume, body["size"])
        if "name" in body:
            if not isinstance(body["name"], str) or not body["name"]:
                return problem(422, "Request validation failed.",
                               ["$.name: value must be a non-empty string"])
            volume.name = body["name"]
        return Response(200, self.volume_json(volume), dict(RATE_HEADERS))

    def delete_volume(self, req: Request) -> Response:
        account = self._gate(req, "volume_delete")
        if isinstance(account, Response):
            return account
        volume = self._account_volume(req, account)
        if volume is None:
            return problem(404, "network volume not found")
        if self.cloud.volume_in_use(volume):
            # [unverified] the spec does not say what deleting a mounted volume does
            return problem(400, "network volume is attached to a pod")
        self.cloud.delete_volume(volume)
        return Response(204, None, dict(RATE_HEADERS))

    def data_centers(self, req: Request) -> Response:
        """`GET /v2/catalog/datacenters` (listDataCenters); `include=GPU_AVAILABILITY` adds
        `gpuAvailability`, `networkVolumeTypes` filters with AND semantics."""
        account = self._gate(req, "datacenters")
        if isinstance(account, Response):
            return account
        include = {p for p in (req.q("include") or "").upper().split(",") if p}
        if include - {"GPU_AVAILABILITY", "CPU_AVAILABILITY"}:
            return problem(422, "Request validation failed.",
                           ["include: values must be GPU_AVAILABILITY, CPU_AVAILABILITY"])
        need = {t for t in (req.q("networkVolumeTypes") or "").upper().split(",") if t}
        rows = []
        for dc in self.cloud.runpod_data_centers:
            if not need <= set(dc["networkVolumeTypes"]):
                continue
            row: dict[str, Any] = {"id": dc["id"], "name": dc["name"], "region": dc["region"],
                                   "globalNetwork": False,
                                   "networkVolumeTypes": list(dc["networkVolumeTypes"]),
                                   "compliance": []}
            gpus = self.cloud.data_center_gpus(dc)
            if "GPU_AVAILABILITY" in include and gpus:
                row["gpuAvailability"] = [
                    {"id": g, "name": self.cloud.runpod_catalog[g].name,
                     "availability": self.cloud.runpod_catalog[g].stock}
                    for g in gpus if g in self.cloud.runpod_catalog]
            rows.append(row)
        return Response(200, {"dataCenters": rows}, dict(RATE_HEADERS))

    def volume_billing(self, req: Request) -> Response:
        """`GET /v2/billing/network-volumes`: one record per volume (one bucket from its
        creation), `standardAmount` / `highPerformanceAmount` split by its tier."""
        account = self._gate(req, "volume_list")
        if isinstance(account, Response):
            return account
        wanted = req.q("networkVolumeId")
        now = time.time()
        with self.cloud.lock:
            volumes = [v for v in self.cloud.volumes.values() if v.account == account.name
                       and (wanted is None or v.volume_id == wanted)]
        records = []
        for v in volumes:
            total = round(self.cloud.meter.accrued("runpod", v.volume_id), 8)
            hp = v.volume_type == "HIGH_PERFORMANCE"
            records.append({"startTime": rfc3339(v.created_at),
                            "endTime": rfc3339(v.deleted_at or now),
                            "networkVolumeId": v.volume_id, "totalAmount": total,
                            "standardAmount": 0.0 if hp else total,
                            "highPerformanceAmount": total if hp else 0.0})
        totals = {k: round(sum(r[k] for r in records), 8)  # type: ignore[misc]
                  for k in ("totalAmount", "standardAmount", "highPerformanceAmount")}
        metadata = {"query": {"startTime": records[0]["startTime"] if records else rfc3339(now),
                              "endTime": rfc3339(now), "bucketSize": req.q("bucketSize") or "day",
                              "networkVolumeId": wanted},
                    "recordCount": len(records), "uniqueNetworkVolumeCount": len(records),
                    "totals": totals}
        return Response(200, {"records": records, "metadata": metadata}, dict(RATE_HEADERS))

    def _create_cpu_pod(self, account: Account, spec: dict[str, Any]) -> Response:
        """A CPU pod (`cpu: {id, vcpuCount}`): priced per vCPU (`CpuType.price.securePerVcpu`
        times the count); it bills, boots and dies like a GPU pod, with no GPU."""
        flavor = next(c for c in CPU_CATALOG if c["id"] == spec["cpu"]["id"])
        vcpus = int(spec["cpu"]["vcpuCount"])
        rate = round(float(flavor["price"]["securePerVcpu"]) * vcpus, 4)
        if self.cloud.balance(account) < rate:
            return problem(402, "insufficient balance: at least one hour of credit is required "
                                "to deploy this pod")
        cpu_type = RunPodGpuType(flavor["id"], flavor["name"], 0, rate / vcpus, rate / vcpus)
        pod = self._new_pod(account, cpu_type, vcpus, rate, spec["name"], spec["image"],
                            spec["args"], spec["env"], spec["ports"], spec["disk"], spec["cloud"],
                            0)
        pod.gpu_count = 0
        pod.meta["cpu"] = {"id": flavor["id"], "vcpuCount": vcpus}
        return self._created(pod, Response(201, None, dict(RATE_HEADERS)))

    def cpu_catalog(self, req: Request) -> Response:
        """`GET /v2/catalog/cpus` (listCpuTypes): `include=AVAILABILITY` needs `product`."""
        account = self._gate(req, "catalog")
        if isinstance(account, Response):
            return account
        include = (req.q("include") or "").upper()
        if include and include != "AVAILABILITY":
            return problem(422, "Request validation failed.",
                           ["include: value must be one of 'AVAILABILITY'"])
        if bool(include) != bool(req.q("product")):
            return problem(400, "product is required with include=AVAILABILITY and valid "
                                "only with it")
        cpus = [{**c, "availability": "HIGH"} if include else dict(c) for c in CPU_CATALOG]
        return Response(200, {"cpus": cpus}, dict(RATE_HEADERS))

    def _created(self, pod: SandboxPod, ok: Response) -> Response:
        faults = self.cloud.faults
        fault = faults.take("error_after_create", "runpod", "create")
        if fault:
            return problem(fault.status if fault.status >= 500 else 500,
                           "create pod: failed to read back the created pod")
        slow = faults.take("slow_create", "runpod", "create")
        ok.body = self.pod_json(pod)
        if slow:
            ok.delay_s = slow.seconds
        return ok

    def _new_pod(self, account: Account, gpu_type: RunPodGpuType, count: int, rate: float,
                 name: str, image: str | None, command: str | None, env: dict[str, str],
                 ports: list[str], disk: int, cloud: str, volume: int) -> SandboxPod:
        pod = SandboxPod(
            provider="runpod", pod_id=new_runpod_id(), name=name, account=account.name,
            gpu_type=gpu_type.gpu_id, gpu_count=count, compute_rate=rate, disk_gb=disk,
            image=image or "", command=command, env=dict(env), ports=list(ports), cloud=cloud,
            cuda=gpu_type.cuda, volume_gb=volume,
            storage_cost_gb_month=RUNPOD_DISK_RUNNING_GB_MONTH,
        )
        pod.meta["json_start_form"] = self.cloud.runpod_json_start_form
        return self.cloud.add_pod(pod)

    def _gpu_json(self, g: RunPodGpuType, scope: tuple[str, int] | None,
                  min_cuda: str | None = None) -> dict[str, Any]:
        """One `GpuType`; `scope` = (cloud, count) with include=AVAILABILITY, else None;
        `min_cuda` (the query's minCudaVersion) scopes availability like a create's."""
        max_count = {"SECURE": g.max_count, "COMMUNITY": min(g.max_count, 4)}
        body: dict[str, Any] = {
            "id": g.gpu_id, "name": g.name, "pool": None, "manufacturer": "NVIDIA",
            "memory": g.memory_gb, "secure": True, "community": True,
            "price": {"secure": g.secure_price, "community": g.community_price},
            "maxCount": {"secure": max_count["SECURE"], "community": max_count["COMMUNITY"]},
        }
        if scope is not None:
            cloud, count = scope
            # `availability` and `cudaVersions` are "scoped by the same filters (`count`,
            # `cloud`, ...)": no machine of that cloud holds more than maxCount of them.
            stock = g.stock if count <= max_count[cloud] and cuda_fits(g.cuda, min_cuda, []) \
                else "NONE"
            body["availability"] = stock
            if stock != "NONE":
                body["cudaVersions"] = [{"version": g.cuda, "available": True}]
        return body

    def _catalog_include(self, req: Request) -> tuple[str, int] | None | Response:
        """The availability scope of a catalog answer, (cloud, count), None without
        include=AVAILABILITY, or the refusal (gate, bad query). `cloud` (default SECURE) and
        `count` (default 1) are "valid only with include=AVAILABILITY" (components.parameters
        GpuCloudFilter, GpuCountFilter @ a900806e)."""
        account = self._gate(req, "catalog")
        if isinstance(account, Response):
            return account
        include = (req.q("include") or "").upper()
        product = req.q("product")
        if include and include != "AVAILABILITY":
            return problem(422, "Request validation failed.",
                           ["include: value must be one of 'AVAILABILITY'"])
        if bool(include) != bool(product):
            return problem(400, "product is required with include=AVAILABILITY and valid "
                                "only with it")
        cloud, count = req.q("cloud"), req.q("count")
        if not include:
            if cloud is not None or count is not None:
                return problem(400, "cloud and count are valid only with include=AVAILABILITY")
            return None
        if cloud is not None and cloud not in ("SECURE", "COMMUNITY"):
            return problem(422, "Request validation failed.",
                           ["cloud: value must be one of 'SECURE', 'COMMUNITY'"])
        try:
            wanted = int(count) if count is not None else 1
        except ValueError:
            wanted = 0
        if wanted < 1:
            return problem(422, "Request validation failed.", ["count: an integer >= 1"])
        return (cloud or "SECURE", wanted)

    def catalog(self, req: Request) -> Response:
        scope = self._catalog_include(req)
        if isinstance(scope, Response):
            return scope
        floor = req.q("minCudaVersion") or None
        gpus = [self._gpu_json(g, scope, floor) for g in self.cloud.runpod_catalog.values()]
        return Response(200, {"gpus": gpus}, dict(RATE_HEADERS))

    def catalog_one(self, req: Request) -> Response:
        scope = self._catalog_include(req)
        if isinstance(scope, Response):
            return scope
        g = self.cloud.runpod_catalog.get(req.params["gpu_id"])
        if g is None:
            return problem(404, "gpu type not found")
        return Response(200, self._gpu_json(g, scope), dict(RATE_HEADERS))

    def billing(self, req: Request) -> Response:
        """`GET /v2/billing/pods` (getPodBilling): "records are emitted per pod per bucket";
        startTime (default 30 days ago) snapped down and endTime (default now) snapped up to
        bucket boundaries, or `lastN` buckets ending with the current one, "mutually exclusive
        with startTime/endTime" (the operation's parameters @ a900806e). Each record is what the
        meter shows for that pod inside its bucket."""
        account = self._gate(req, "list")
        if isinstance(account, Response):
            return account
        pod_id = req.q("podId")
        size = req.q("bucketSize") or "day"  # BillingBucketSize's default
        if size not in BUCKET_SIZES:
            return problem(400, "Request validation failed.",
                           [f"bucketSize: value must be one of {', '.join(BUCKET_SIZES)}"])
        now = time.time()
        last_n, start_q, end_q = req.q("lastN"), req.q("startTime"), req.q("endTime")
        try:
            if last_n is not None:
                if start_q or end_q:
                    return problem(400, "lastN is mutually exclusive with startTime/endTime")
                count = int(last_n)
                if count < 1:
                    raise ValueError
                start = bucket_start(now, size)
                for _ in range(count - 1):
                    start = bucket_start(start - 1, size)
                end = bucket_end(bucket_start(now, size), size)
            else:
                start = bucket_start(_parse_rfc3339(start_q) if start_q else now - 30 * 86400,
                                     size)
                end = _parse_rfc3339(end_q) if end_q else now
                if bucket_start(end, size) != end:
                    end = bucket_end(bucket_start(end, size), size)
        except ValueError:
            return problem(400, "Request validation failed.",
                           ["startTime/endTime: RFC 3339 date-times; lastN: an integer >= 1"])
        with self.cloud.lock:
            pods = [p for p in self.cloud.pods.values()
                    if p.provider == "runpod" and p.account == account.name
                    and (pod_id is None or p.pod_id == pod_id)]
        records: list[dict[str, Any]] = []
        for pod in pods:
            share = pod.compute_rate / pod.running_rate() if pod.running_rate() else 0.0
            lo = max(start, bucket_start(pod.created_at, size))
            while lo < end:
                hi = bucket_end(lo, size)
                total = self.cloud.meter.reported_between("runpod", pod.pod_id, lo, hi)
                if total > 0:
                    records.append({
                        "startTime": rfc3339(lo), "endTime": rfc3339(hi), "podId": pod.pod_id,
                        "totalAmount": round(total, 8), "gpuAmount": round(total * share, 8),
                        "cpuAmount": 0.0, "diskAmount": round(total * (1 - share), 8)})
                lo = hi
        totals = {k: round(sum(r[k] for r in records), 8)
                  for k in ("totalAmount", "gpuAmount", "cpuAmount", "diskAmount")}
        metadata = {
            "query": {"startTime": rfc3339(start), "endTime": rfc3339(end), "bucketSize": size,
                      "podId": pod_id},
            "recordCount": len(records),
            "uniquePodCount": len({r["podId"] for r in records}), "totals": totals,
        }
        return Response(200, {"records": records, "metadata": metadata}, dict(RATE_HEADERS))

    # -- GraphQL ----------------------------------------------------------------------------------
    def graphql(self, req: Request) -> Response:
        if self.cloud.graphql_retired:
            return Response(404, {"errors": [{"message": "the GraphQL API has been retired; "
                                                         "use the REST API v2"}]})
        account = self._auth(req)
        if isinstance(account, Response):
            # runpod-python turns 401 into AuthenticationError before reading the body.
            message = "Unauthorized" if account.status == 401 else "Forbidden"
            return Response(account.status, {"errors": [{"message": message}]})
        try:
            body = req.json()
            source = body["query"]
            variables = body.get("variables") or {}
            if not isinstance(source, str) or not isinstance(variables, dict):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return Response(400, {"errors": [{"message": "POST body must be JSON with a "
                                                         "'query' string"}]})
        try:
            document = parse(source)
        except GraphQLError as exc:
            return Response(400, {"errors": [exc.formatted]})
        problems = validate(self.schema, document)
        if problems:
            return Response(400, {"errors": [e.formatted for e in problems]})
        for op in {"graphql", *self._root_ops(document)}:
            injected = self._injected(op)
            if injected is not None:
                # GraphQL errors keep the GraphQL shape; status codes stay those of the gateway.
                retry = injected.headers.get("Retry-After")
                headers = {"Retry-After": retry} if retry else {}
                return Response(injected.status, {"errors": [{"message": injected.body["detail"]}]},
                                headers)
        result = execute_sync(self.schema, document, root_value=_GraphQLRoot(self, account),
                              variable_values=variables)
        payload: dict[str, Any] = {"data": result.data}
        if result.errors:
            payload["errors"] = [
                {**e.formatted, "extensions": {"code": "RUNPOD", **(e.extensions or {})}}
                for e in result.errors
            ]
        return Response(200, payload)

    @staticmethod
    def _root_ops(document: Any) -> list[str]:
        ops = []
        for definition in document.definitions:
            if isinstance(definition, OperationDefinitionNode):
                for selection in definition.selection_set.selections:
                    if isinstance(selection, FieldNode) and selection.name.value in GRAPHQL_OPS:
                        ops.append(GRAPHQL_OPS[selection.name.value])
        return ops

    def gql_pod(self, pod: SandboxPod) -> dict[str, Any]:
        now = time.time()
        g = self.cloud.runpod_catalog.get(pod.gpu_type)
        runtime = None
        if pod.is_ready(now):
            runtime = {
                "uptimeInSeconds": int(now - (pod.started_at or now)),
                "ports": [
                    {"ip": "127.0.0.1", "isIpPublic": True, "privatePort": private,
                     "publicPort": public, "type": "tcp"}
                    for private, public in pod.port_map.items()
                ],
                "gpus": [{"id": f"GPU-{i}", "gpuUtilPercent": 0.0, "memoryUtilPercent": 0.0}
                         for i in range(pod.gpu_count)],
            }
        desired = {"running": "RUNNING", "stopped": "EXITED"}.get(pod.status, "TERMINATED")
        return {
            "id": pod.pod_id, "name": pod.name, "imageName": pod.image,
            "env": [f"{k}={v}" for k, v in pod.env.items()],
            "machineId": f"sbx{pod.pod_id[:8]}",
            "machine": {"podHostId": f"{pod.pod_id}-sbx", "gpuDisplayName": g.name if g else None,
                        "gpuTypeId": pod.gpu_type, "dataCenterId": pod.data_center,
                        "location": "Sandbox"},
            "desiredStatus": desired, "costPerHr": round(pod.compute_rate, 4),
            "adjustedCostPerHr": round(pod.compute_rate, 4), "containerDiskInGb": pod.disk_gb,
            "volumeInGb": pod.volume_gb, "volumeMountPath": pod.meta.get("volumeMountPath"),
            "dockerArgs": pod.command if isinstance(pod.command, str) else "",
            "dockerId": None, "gpuCount": pod.gpu_count,
            "lastStatusChange": f"Rented by User: {go_time(pod.created_at)}",
            "memoryInGb": 62.0, "podType": "RESERVED", "port": None,
            "ports": ",".join(pod.ports), "uptimeSeconds": 0,  # the real field reads 0 forever
            "vcpuCount": 8.0, "runtime": runtime, "createdAt": go_time(pod.created_at),
            "lastStartedAt": go_time(pod.started_at), "locked": False,
        }


class _GraphQLRoot:
    """Root resolvers: graphql-core calls these methods with (info, **arguments)."""

    def __init__(self, emu: RunPodEmulator, account: Account) -> None:
        self.emu = emu
        self.cloud = emu.cloud
        self.account = account

    def _scoped(self, pod_id: str | None) -> None:
        if not self.cloud.scope_allows(self.account, pod_id):
            raise GraphQLError("this API key is scoped to another pod",
                               extensions={"code": "FORBIDDEN"})

    def _live_pod(self, pod_id: str, missing: str) -> SandboxPod:
        """The caller's pod, not yet terminated (a pod key reaches only its own pod); `missing`
        is the GraphQL error otherwise."""
        self._scoped(pod_id)
        pod = self.cloud.find("runpod", pod_id, self.account)
        if pod is None or pod.status == "terminated":
            raise GraphQLError(missing)
        return pod

    def myself(self, _info: Any) -> dict[str, Any]:
        self._scoped(None)
        acct = self.account
        return {
            "id": acct.name, "email": f"{acct.name}@sandbox.invalid", "pubKey": "",
            "clientBalance": round(self.cloud.balance(acct), 6),
            "currentSpendPerHr": round(self.cloud.spend_rate(acct), 6),
            "spendLimit": 80.0, "networkVolumes": [],
            "pods": [self.emu.gql_pod(p) for p in self.cloud.pods_of("runpod", acct)],
        }

    def pod(self, _info: Any, input: dict[str, Any]) -> dict[str, Any] | None:  # noqa: A002
        self._scoped(input["podId"])
        pod = self.cloud.find("runpod", input["podId"], self.account)
        return self.emu.gql_pod(pod) if pod else None

    def gpuTypes(self, _info: Any, input: dict[str, Any] | None = None) -> list[dict[str, Any]]:  # noqa: A002, N802
        self._scoped(None)
        wanted = (input or {}).get("id")
        out = []
        for g in self.cloud.runpod_catalog.values():
            if wanted is not None and g.gpu_id != wanted:
                continue

            def lowest(_info: Any, input: dict[str, Any] | None = None,  # noqa: A002
                       g: RunPodGpuType = g) -> dict[str, Any]:
                count = (input or {}).get("gpuCount") or 1
                return {"minimumBidPrice": round(g.community_price * 0.6 * count, 4),
                        "uninterruptablePrice": round(g.secure_price * count, 4),
                        "stockStatus": g.stock.title(), "availableGpuCounts": [1, 2, 4, 8],
                        "maxUnreservedGpuCount": g.max_count}

            out.append({
                "id": g.gpu_id, "displayName": g.name, "manufacturer": "Nvidia",
                "memoryInGb": g.memory_gb, "cudaCores": 0, "maxGpuCount": g.max_count,
                "secureCloud": True, "communityCloud": True, "securePrice": g.secure_price,
                "communityPrice": g.community_price, "oneMonthPrice": None,
                "threeMonthPrice": None, "oneWeekPrice": None, "communitySpotPrice": None,
                "secureSpotPrice": None, "lowestPrice": lowest,
            })
        return out

    def podFindAndDeployOnDemand(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: A002, N802
        self._scoped(None)
        candidates = list(input.get("gpuTypeIdList") or [])
        if input.get("gpuTypeId"):
            candidates.insert(0, input["gpuTypeId"])
        if not candidates:
            raise GraphQLError("gpuTypeId is required for a GPU pod")
        count = input.get("gpuCount") or 1
        cloud_type = input.get("cloudType") or "ALL"
        placed: tuple[RunPodGpuType, float] | None = None
        for gpu_id in candidates:
            g = self.cloud.runpod_catalog.get(gpu_id)
            if g is None:
                raise GraphQLError(f"There is no GPU type with id {gpu_id}")
            unit = g.community_price if cloud_type == "COMMUNITY" else g.secure_price
            if g.stock == "NONE" or self.cloud.faults.take("capacity", "runpod", "create",
                                                           gpu=g.gpu_id):
                continue
            placed = (g, round(unit * count, 4))
            break
        if placed is None:
            raise GraphQLError(CAPACITY_DETAIL)
        g, rate = placed
        if self.cloud.balance(self.account) < rate:
            raise GraphQLError("You do not have enough funds to deploy this pod: at least one "
                               "hour of credit is required")
        ports = [p.strip() for p in (input.get("ports") or "").split(",") if p.strip()]
        env = {e["key"]: e["value"] for e in (input.get("env") or [])}
        args = input.get("dockerArgs") or None
        pod = self.emu._new_pod(
            self.account, g, count, rate, input.get("name") or "", input.get("imageName"), args,
            env, ports, input.get("containerDiskInGb") or 50,
            "COMMUNITY" if cloud_type == "COMMUNITY" else "SECURE", input.get("volumeInGb") or 0,
        )
        pod.meta["volumeMountPath"] = input.get("volumeMountPath")
        if self.cloud.faults.take("error_after_create", "runpod", "create"):
            raise GraphQLError(GENERIC_GRAPHQL_ERROR)
        return self.emu.gql_pod(pod)

    def podTerminate(self, _info: Any, input: dict[str, Any]) -> None:  # noqa: A002, N802
        pod = self._live_pod(input["podId"], "pod not found to terminate")
        if self.cloud.faults.take("terminate_fail", "runpod", "terminate"):
            raise GraphQLError(GENERIC_GRAPHQL_ERROR)
        if self.cloud.faults.take("terminate_noop", "runpod", "terminate"):
            return None
        unlisted = self.cloud.faults.take("terminate_unlisted", "runpod", "terminate")
        self.cloud.terminate(pod, keep_billing=unlisted is not None)
        return None

    def podStop(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: A002, N802
        pod = self._live_pod(input["podId"], "pod not found")
        self.cloud.stop(pod)
        return self.emu.gql_pod(pod)

    def podResume(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: A002, N802
        pod = self._live_pod(input["podId"], "pod not found")
        self.cloud.start(pod)
        return self.emu.gql_pod(pod)

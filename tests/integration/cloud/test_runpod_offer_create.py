"""RunPod's offer and create paths (provision/runpod/provider.py), against a mock REST v2 + GraphQL
that the test scripts answer by answer: the catalog read, the GPU preference order and capacity
fallback, the price cap (on the catalog price and on the price the new pod states), the create
body, every create answer and the lookup by run tag after an error, the read-back, the container
log, GraphQL and the account facts. Written to kill the mutants of these functions (issue 26,
docs/testing.md "provision/runpod/provider.py: offers and create").

Field names are the vendor's: runpod/docs api-reference-v2/openapi.json @ a900806e
(`CreatePodRequest`, `CreateGpuConfig`, `Mounts.network`, `GpuType`, `ListGpuTypesResponse`,
`ErrorResponse`), as tests/integration/contracts/runpod/*.json carry them; every create body sent
is also checked against that contract. v2 has no `imageName`, `gpuTypeIds` or `interruptible`
(those are GraphQL / REST v1 words): one GPU type per create, and a v2 pod is never a spot pod,
so the body's exact key set is the assertion. Expected values are the test's own arithmetic on
the catalog it planted."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.config import load_settings
from tailpod.errors import AuthError, CapacityError, ConfigError, ProviderError
from tailpod.provision.apiclient import ApiTimings
from tailpod.provision.base import AccountFacts, PodInfo, PodSpec, PodState
from tailpod.provision.runpod.facts import FirstContactFacts, account_id, save
from tailpod.provision.runpod.provider import (
    GraphQLUnavailable,
    RunPodProvider,
    parse_log_events,
    start_command_args,
    start_form,
)
from tailpod.secrets import Secret
from tests.integration.contracts.contract import contract_for

KEY = "rp_OFFERcreateKEY_0123456789abcd"
TAG = "tp-20260101-000000-cccccc"
# a digest-pinned image, as `up` sends it (engines/image.py pins the tag to its digest)
IMAGE = "vllm/vllm-openai@sha256:" + "0123456789abcdef" * 4
TIMINGS = ApiTimings(request_timeout_s=5.0, attempts=1, backoff_s=1.0, backoff_max_s=8.0,
                     create_attempts=3, readback_attempts=3, readback_interval_s=0.5)
CAPACITY = ("There are no longer any instances available with the requested specifications. "
            "Please refresh and try again.")  # the vendor's 400 detail, as the sandbox plays it

H200, H100, A40, L40S, L4 = ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A40",
                             "NVIDIA L40S", "NVIDIA L4")


def gpu(gpu_id: str, name: str, memory: int, secure: Any, community: Any,
        availability: str | None) -> dict[str, Any]:
    """One `GpuType` of `ListGpuTypesResponse.gpus`."""
    entry: dict[str, Any] = {
        "id": gpu_id, "name": name, "pool": None, "manufacturer": "Nvidia", "memory": memory,
        "secure": True, "community": True, "price": {"secure": secure, "community": community},
        "maxCount": {"secure": 8, "community": 8}}
    if availability is not None:
        entry["availability"] = availability
    return entry


CATALOG = [
    gpu(H200, "H200", 141, 3.99, 3.59, "NONE"),  # out of stock
    gpu(H100, "H100 SXM", 80, 2.69, 2.39, "HIGH"),
    gpu(A40, "A40", 48, 0.44, 0.39, "LOW"),
    gpu(L40S, "L40S", 48, 0.79333, 0.69, "MEDIUM"),
    gpu(L4, "L4", 24, None, None, None),  # no price stated: never under a cap
]


def problem(status: int, detail: str, errors: list[str] | None = None) -> dict[str, Any]:
    """An `ErrorResponse` (RFC 9457) body."""
    body: dict[str, Any] = {"title": "Error", "status": status, "detail": detail}
    if errors is not None:
        body["errors"] = errors
    return body


def pod(pod_id: str, gpu_id: str, status: str = "RUNNING", cost: float = 0.0,
        name: str = TAG) -> dict[str, Any]:
    return {"id": pod_id, "name": name, "status": status, "cost": cost,
            "gpu": {"id": gpu_id, "count": 1}}


@dataclass
class FakeRunPod:
    """One scripted RunPod account. Lists of answers are taken in turn; the last one repeats."""

    gpus: Any = field(default_factory=lambda: CATALOG)  # the `gpus` of the catalog answer
    catalog_status: int = 200
    creates: list[Any] = field(default_factory=list)  # (status, body) or an exception
    listings: list[list[dict[str, Any]]] = field(default_factory=lambda: [[]])
    pods: dict[str, list[Any]] = field(default_factory=dict)  # pod dict, or a bare status
    logs: tuple[int, str] = (200, "")
    gql: list[tuple[int, Any]] = field(default_factory=list)
    seen: list[httpx.Request] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)  # the create bodies sent
    deleted: list[str] = field(default_factory=list)
    gql_sent: list[Any] = field(default_factory=list)

    @staticmethod
    def _take(answers: list[Any]) -> Any:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        path, method = request.url.path, request.method
        if path == "/v2/catalog/gpus" and method == "GET":
            if self.catalog_status != 200:
                return httpx.Response(self.catalog_status)
            return httpx.Response(200, json={"gpus": self.gpus} if self.gpus != "raw" else [])
        if path == "/v2/pods" and method == "POST":
            self.bodies.append(json.loads(request.content))
            answer = self.creates.pop(0)
            if isinstance(answer, Exception):
                raise answer
            status, body = answer
            return httpx.Response(status, text=body) if isinstance(body, str) else \
                httpx.Response(status, json=body)
        if path == "/v2/pods" and method == "GET":
            return httpx.Response(200, json={"pods": self._take(self.listings)})
        if path.endswith("/logs") and method == "GET":
            # an open stream, as the vendor's SSE answer is (a plain body reads as consumed)
            return httpx.Response(self.logs[0], content=iter([self.logs[1].encode()]))
        if path.startswith("/v2/pods/") and method == "DELETE":
            self.deleted.append(path.removeprefix("/v2/pods/"))
            return httpx.Response(204)
        if path.startswith("/v2/pods/") and method == "GET":
            answers = self.pods.get(path.removeprefix("/v2/pods/"))
            found = self._take(answers) if answers else 404
            return httpx.Response(found) if isinstance(found, int) else \
                httpx.Response(200, json=found)
        if path == "/graphql" and method == "POST":
            self.gql_sent.append(json.loads(request.content))
            status, body = self._take(self.gql)
            return httpx.Response(status, text=body) if isinstance(body, str) else \
                httpx.Response(status, json=body)
        return httpx.Response(405)

    def calls(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.seen]


def settings_for(tmp_path: Path) -> Any:
    return load_settings(env={"RUNPOD_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path),
                              "TAILPOD_RUNPOD_URL": "http://runpod.invalid"},
                         dotenv_path=tmp_path / "absent.env")


def provider(fake: FakeRunPod, tmp_path: Path, sleeps: list[float] | None = None,
             **kw: Any) -> RunPodProvider:
    record = sleeps if sleeps is not None else []
    return RunPodProvider(settings_for(tmp_path), timings=TIMINGS,
                          transport=httpx.MockTransport(fake), sleep=record.append, **kw)


def spec(prefs: list[str], **kw: Any) -> PodSpec:
    base: dict[str, Any] = {"run_tag": TAG, "gpu_preference": prefs, "image": IMAGE,
                            "start_command": []}
    return PodSpec(**{**base, **kw})


# -- the start command and the log -----------------------------------------------------------------

def test_the_start_form_is_plain_only_for_an_image_known_to_have_no_entrypoint() -> None:
    assert start_form(()) == "plain"
    assert start_form(None) == "json"
    assert start_form(("/opt/nvidia/nvidia_entrypoint.sh",)) == "json"


def test_start_command_args_in_both_forms() -> None:
    # plain: the arguments are the whole process, shell-quoted
    assert start_command_args(["python3", "-m", "vllm", "a b"], ()) == "python3 -m vllm 'a b'"
    # json: a `sh -c` keeps its flag with the shell; anything else is the entrypoint alone
    assert start_command_args(["bash", "-c", "echo hi"]) == \
        '{"entrypoint":["bash","-c"],"cmd":["echo hi"]}'
    assert start_command_args(["bash", "-c"], None) == '{"entrypoint":["bash"],"cmd":["-c"]}'
    assert start_command_args(["python3", "-m", "-c"], ("/ep",)) == \
        '{"entrypoint":["python3"],"cmd":["-m","-c"]}'
    assert start_command_args(["sleep"], None) == '{"entrypoint":["sleep"],"cmd":[]}'
    with pytest.raises(ValueError, match="^an empty start command$"):
        start_command_args([], ())


def test_log_events_keep_each_data_line_in_order() -> None:
    text = "\n".join([
        ": a comment first",
        "id: 1",
        'data: {"ts": "t", "source": "container", "line": "first"}',
        "event: message",
        "data:  not json at all  ",
        'data: {"line": 5}',
        "data: 42",
        'data: ["line"]',
        'data:{"line":"last"}',
        'DATA: {"line": "no"}',
        ' data: {"line": "no"}',
    ])
    assert parse_log_events(text) == ["first", "not json at all", "last"]
    assert parse_log_events("") == []


def test_the_container_log_is_read_with_its_tail_bounded(tmp_path: Path) -> None:
    events = ('id: 1\ndata: {"ts":"t","source":"container","line":"booting"}\n\n'
              'data: {"ts":"t","source":"container","line":"ready"}\n\n')
    fake = FakeRunPod(logs=(200, events))
    rp = provider(fake, tmp_path)
    assert rp.container_log("p/1", tail=9000) == ["booting", "ready"]
    assert rp.container_log("p2", tail=-3) == ["booting", "ready"]
    assert rp.container_log("p3") == ["booting", "ready"]
    assert [r.url.raw_path.split(b"?")[0] for r in fake.seen] == [
        b"/v2/pods/p%2F1/logs", b"/v2/pods/p2/logs", b"/v2/pods/p3/logs"]
    assert [dict(r.url.params) for r in fake.seen] == [
        {"source": "container", "tail": "5000"}, {"source": "container", "tail": "0"},
        {"source": "container", "tail": "200"}]
    assert provider(FakeRunPod(logs=(404, "")), tmp_path).container_log("p1") is None

    def dropped(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("reset")

    rp2 = RunPodProvider(settings_for(tmp_path), timings=TIMINGS,
                         transport=httpx.MockTransport(dropped), sleep=lambda s: None)
    with pytest.raises(ProviderError) as caught:
        rp2.container_log("p1")
    assert str(caught.value) == "RunPod: reading pod p1's log failed (no answer: ConnectError)"
    assert provider(FakeRunPod(logs=(201, events)), tmp_path).container_log("p1") is None


# -- the catalog and offers ------------------------------------------------------------------------

def test_the_catalog_is_read_for_the_count_and_cloud(tmp_path: Path) -> None:
    fake = FakeRunPod(gpus=[*CATALOG, "not a gpu", {"name": "no id"}, {"id": 7, "name": "seven"}])
    catalog = provider(fake, tmp_path).catalog(2)
    assert list(catalog) == [H200, H100, A40, L40S, L4, "7"]
    assert catalog[A40]["name"] == "A40"
    assert [dict(r.url.params) for r in fake.seen] == [
        {"include": "AVAILABILITY", "product": "POD", "count": "2", "cloud": "SECURE"}]
    community = FakeRunPod()
    provider(community, tmp_path, cloud="COMMUNITY").catalog()
    assert dict(community.seen[0].url.params)["cloud"] == "COMMUNITY"
    assert dict(community.seen[0].url.params)["count"] == "1"


@pytest.mark.parametrize("gpus", [None, {"x": 1}, "raw"])
def test_a_catalog_without_a_gpu_list_is_refused(tmp_path: Path, gpus: Any) -> None:
    with pytest.raises(ProviderError) as caught:
        provider(FakeRunPod(gpus=gpus), tmp_path).catalog()
    assert caught.value.message == "RunPod: the GPU catalog answer has no `gpus` list"


def test_a_catalog_outage_names_the_call(tmp_path: Path) -> None:
    with pytest.raises(ProviderError) as caught:
        provider(FakeRunPod(catalog_status=503), tmp_path).catalog()
    assert str(caught.value) == "RunPod: reading the GPU catalog failed (HTTP 503)"


def test_a_gpu_is_found_by_id_or_name_whatever_the_case() -> None:
    catalog = {g["id"]: g for g in CATALOG}
    assert RunPodProvider.resolve_gpu(" nvidia h100 80gb hbm3 ", catalog) == H100
    assert RunPodProvider.resolve_gpu("h100 sxm", catalog) == H100
    assert RunPodProvider.resolve_gpu("A40", catalog) == A40
    assert RunPodProvider.resolve_gpu("H300", catalog) is None
    # an entry without a name is found by its id only
    assert RunPodProvider.resolve_gpu("xxxx", {"G1": {"id": "G1"}}) is None
    assert RunPodProvider.resolve_gpu("none", {"G1": {"id": "G1"}}) is None


def test_offers_follow_the_preference_with_price_stock_and_the_cap(tmp_path: Path) -> None:
    fake = FakeRunPod()
    offers = provider(fake, tmp_path).offers(["H200", "h100 sxm", "A40", "Nope", "L40S", "L4"],
                                             2, 5.0)
    # 2 GPUs: H200 2 x 3.99 = 7.98, H100 2 x 2.69 = 5.38 (both above $5), A40 2 x 0.44 = 0.88,
    # L40S 2 x 0.79333 = 1.58666 -> 1.5867; L4 states no price
    got = [(o.provider, o.gpu_type, o.gpu_count, o.price_per_hr, o.available, o.offer_id,
            o.gpu_memory_gb, o.detail) for o in offers]
    assert got == [
        ("runpod", H200, 2, 7.98, False, None, 141,
         {"stock": "NONE", "cloud": "SECURE", "above_cap": True}),
        ("runpod", H100, 2, 5.38, True, None, 80,
         {"stock": "HIGH", "cloud": "SECURE", "above_cap": True}),
        ("runpod", A40, 2, 0.88, True, None, 48,
         {"stock": "LOW", "cloud": "SECURE", "above_cap": False}),
        ("runpod", "Nope", 2, None, False, None, None, {"error": "unknown GPU type"}),
        ("runpod", L40S, 2, 1.5867, True, None, 48,
         {"stock": "MEDIUM", "cloud": "SECURE", "above_cap": False}),
        ("runpod", L4, 2, None, True, None, 24,
         {"stock": None, "cloud": "SECURE", "above_cap": False}),
    ]
    assert dict(fake.seen[0].url.params)["count"] == "2"


def test_an_offer_at_the_cap_is_within_it_and_no_cap_flags_nothing(tmp_path: Path) -> None:
    rp = provider(FakeRunPod(), tmp_path)
    at_cap = rp.offers(["A40"], 2, 0.88)[0]  # 2 x 0.44 = 0.88, exactly the cap
    assert at_cap.detail["above_cap"] is False
    assert [o.detail["above_cap"] for o in rp.offers(["H200", "A40"], 1, None)] == [False, False]


def test_community_offers_take_the_community_price(tmp_path: Path) -> None:
    offers = provider(FakeRunPod(), tmp_path, cloud="COMMUNITY").offers(["H200", "A40"], 2, 1.0)
    # 2 x 3.59 = 7.18, 2 x 0.39 = 0.78
    assert [(o.price_per_hr, o.detail["cloud"], o.detail["above_cap"]) for o in offers] == [
        (7.18, "COMMUNITY", True), (0.78, "COMMUNITY", False)]


def test_a_price_that_is_not_a_number_is_no_price(tmp_path: Path) -> None:
    gpus = [{"id": "G1", "name": "g1", "price": None}, {"id": "G2", "name": "g2"},
            {"id": "G3", "name": "g3", "price": {"secure": "0.5"}},
            {"id": "G4", "name": "g4", "price": {"secure": 1}}]
    offers = provider(FakeRunPod(gpus=gpus), tmp_path).offers(["g1", "g2", "g3", "g4"], 1, 0.1)
    assert [o.price_per_hr for o in offers] == [None, None, None, 1.0]
    assert [o.detail["above_cap"] for o in offers] == [False, False, False, True]


# -- create: the preference, the fallback, the cap ---------------------------------------------

def test_capacity_fallback_takes_the_next_preference_at_its_price(tmp_path: Path) -> None:
    """Preference [H200, H100]; H200 is out of stock (400, the vendor's capacity detail): the pod
    is created on H100, recorded at the $2.69/h it states, and says why it fell back."""
    fake = FakeRunPod(creates=[(400, problem(400, CAPACITY)), (201, {"id": "pod-h100"})],
                      pods={"pod-h100": [pod("pod-h100", H100, cost=2.69)]})
    created: list[str] = []
    rp = provider(fake, tmp_path)
    rp.on_created = created.append
    info = rp.create(spec(["H200", "H100 SXM"], max_price=4.0))
    assert (info.pod_id, info.gpu_type, info.price_per_hr, info.state) == (
        "pod-h100", H100, 2.69, PodState.RUNNING)
    assert [b["gpu"]["id"] for b in fake.bodies] == [H200, H100]
    assert info.detail["requested"] == H200
    assert info.detail["fallback_from"] == H200
    assert info.detail["fallback_reasons"] == [f"{H200}: no capacity ({CAPACITY})"]
    assert created == ["pod-h100"]
    assert fake.calls() == ["GET /v2/catalog/gpus", "POST /v2/pods", "POST /v2/pods",
                            "GET /v2/pods/pod-h100"]
    assert fake.deleted == []


def test_the_first_preference_placed_has_no_fallback(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(200, {"id": "pod-a40"})],
                      pods={"pod-a40": [pod("pod-a40", A40, cost=0.44)]})
    info = provider(fake, tmp_path).create(spec(["A40", "H100 SXM"]))
    assert info.pod_id == "pod-a40"
    assert info.detail["requested"] == A40
    assert "fallback_from" not in info.detail and "fallback_reasons" not in info.detail
    assert [b["gpu"]["id"] for b in fake.bodies] == [A40]


def test_a_pod_read_back_without_a_gpu_states_no_fallback(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(400, problem(400, CAPACITY)), (201, {"id": "pod-x"})],
                      pods={"pod-x": [{"id": "pod-x", "name": TAG, "status": "RUNNING",
                                       "cost": 0.44}]})
    info = provider(fake, tmp_path).create(spec(["H200", "A40"]))
    assert info.gpu_type is None and "fallback_from" not in info.detail


def test_preferences_above_the_cap_are_never_sent(tmp_path: Path) -> None:
    """Cap $3.00/h on one GPU: H200 at $3.99 is skipped without a create, H100 at $2.69 is
    created; the reason names the skipped price."""
    fake = FakeRunPod(creates=[(201, {"id": "pod-h100"})],
                      pods={"pod-h100": [pod("pod-h100", H100, cost=2.69)]})
    info = provider(fake, tmp_path).create(spec(["H200", "H100 SXM", "A40"], max_price=3.0))
    assert [b["gpu"]["id"] for b in fake.bodies] == [H100]
    assert info.detail["fallback_reasons"] == [f"{H200}: $3.99/h is above the cap"]


def test_an_unpriced_gpu_is_never_created_under_a_cap_but_is_without_one(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(201, {"id": "pod-a40"})],
                      pods={"pod-a40": [pod("pod-a40", A40, cost=0.44)]})
    provider(fake, tmp_path).create(spec(["L4", "A40"], max_price=1.0))
    assert [b["gpu"]["id"] for b in fake.bodies] == [A40]
    free = FakeRunPod(creates=[(201, {"id": "pod-l4"})],
                      pods={"pod-l4": [pod("pod-l4", L4, cost=0.3)]})
    assert provider(free, tmp_path).create(spec(["L4", "A40"])).pod_id == "pod-l4"
    assert [b["gpu"]["id"] for b in free.bodies] == [L4]


def test_a_cap_below_every_offer_is_refused_naming_the_cheapest(tmp_path: Path) -> None:
    fake = FakeRunPod()
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(["H200", "H100 SXM", "L4"], max_price=2.0))
    assert caught.value.message == (
        "the price cap $2.00/h is below every RunPod offer in the preference list; nothing was "
        f"created (cheapest: {H100} at $2.69/h)")
    assert caught.value.hint == "raise --max-price or add cheaper GPU types"
    assert fake.bodies == []
    with pytest.raises(CapacityError) as unpriced:
        provider(FakeRunPod(), tmp_path).create(spec(["L4"], max_price=2.0))
    assert unpriced.value.message == (
        "the price cap $2.00/h is below every RunPod offer in the preference list; nothing was "
        "created")


def test_the_cap_is_on_the_price_of_every_gpu_of_the_pod(tmp_path: Path) -> None:
    """2 x A40 = $0.88/h: a $0.80 cap refuses it, though one A40 ($0.44) is under it; a $0.88
    cap takes it (at the cap is within it), and the body asks for 2."""
    with pytest.raises(CapacityError) as caught:
        provider(FakeRunPod(), tmp_path).create(spec(["A40"], gpu_count=2, max_price=0.8))
    assert caught.value.message.endswith(f"(cheapest: {A40} at $0.88/h)")
    fake = FakeRunPod(creates=[(201, {"id": "pod-2"})],
                      pods={"pod-2": [pod("pod-2", A40, cost=0.88)]})
    info = provider(fake, tmp_path).create(spec(["A40"], gpu_count=2, max_price=0.88))
    assert info.price_per_hr == 0.88 and fake.bodies[0]["gpu"]["count"] == 2
    assert dict(fake.seen[0].url.params)["count"] == "2"


def test_a_new_pod_stating_a_price_above_the_cap_is_terminated(tmp_path: Path) -> None:
    """The catalog said $0.44, the pod states $0.60 against a $0.50 cap: deleted at once."""
    fake = FakeRunPod(creates=[(201, {"id": "pod-dear"})],
                      pods={"pod-dear": [pod("pod-dear", A40, cost=0.60)]})
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(["A40"], max_price=0.5))
    assert caught.value.message == ("RunPod placed pod-dear at $0.60/h, above the cap $0.50/h; "
                                    "it was terminated at once")
    assert caught.value.hint == "run `tailpod down` to prove billing stopped"
    assert fake.deleted == ["pod-dear"]


def test_a_new_pod_at_the_cap_or_without_a_cap_is_kept(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(201, {"id": "pod-eq"})],
                      pods={"pod-eq": [pod("pod-eq", A40, cost=0.5)]})
    assert provider(fake, tmp_path).create(spec(["A40"], max_price=0.5)).price_per_hr == 0.5
    dear = FakeRunPod(creates=[(201, {"id": "pod-d"})],
                      pods={"pod-d": [pod("pod-d", A40, cost=9.0)]})
    assert provider(dear, tmp_path).create(spec(["A40"])).price_per_hr == 9.0
    assert fake.deleted == [] and dear.deleted == []


def test_a_pod_not_yet_priced_is_kept_for_up_to_hold_to_the_cap(tmp_path: Path) -> None:
    """Still STARTING after the read-back: no price yet, so nothing to hold it to here (`up`
    holds it to the cap once it runs, cloud_up.py); it is not terminated."""
    fake = FakeRunPod(creates=[(201, {"id": "pod-s"})],
                      pods={"pod-s": [pod("pod-s", A40, "STARTING", cost=0.9)]})
    info = provider(fake, tmp_path).create(spec(["A40"], max_price=0.5))
    assert (info.state, info.price_per_hr) == (PodState.PENDING, None)
    assert fake.deleted == []


def test_no_gpu_placed_names_every_reason(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(400, problem(400, "gpu.count 2 exceeds the largest machine"))])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(["H200", "A40", "H100 SXM"], max_price=1.0))
    assert caught.value.message == (
        "RunPod could not place a pod on any of 3 GPU type(s): "
        f"{H200}: $3.99/h is above the cap; {H100}: $2.69/h is above the cap; "
        f"{A40}: refused (gpu.count 2 exceeds the largest machine)")
    assert caught.value.hint == ("add GPU types to the preference list, raise the price cap, or "
                                 "retry later")


def test_a_cap_above_some_names_only_those_above_it(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(400, problem(400, CAPACITY)), (400, problem(400, CAPACITY))])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(["H200", "A40", "L40S"], max_price=1.0))
    assert caught.value.message == (
        "RunPod could not place a pod on any of 3 GPU type(s): "
        f"{H200}: $3.99/h is above the cap; {A40}: no capacity ({CAPACITY}); "
        f"{L40S}: no capacity ({CAPACITY})")
    assert [b["gpu"]["id"] for b in fake.bodies] == [A40, L40S]


# -- create: the preference list itself --------------------------------------------------------

def test_blank_preferences_are_dropped_and_duplicates_tried_once(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(400, problem(400, CAPACITY)), (400, problem(400, CAPACITY))])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(["", "  ", "A40", H100, "nvidia a40", "h100 sxm"]))
    assert caught.value.message.startswith("RunPod could not place a pod on any of 2 GPU type(s)")
    assert [b["gpu"]["id"] for b in fake.bodies] == [A40, H100]


@pytest.mark.parametrize("prefs", [[], ["", "   "]])
def test_an_empty_preference_list_is_refused_before_any_call(tmp_path: Path,
                                                             prefs: list[str]) -> None:
    fake = FakeRunPod()
    with pytest.raises(ConfigError) as caught:
        provider(fake, tmp_path).create(spec(prefs))
    assert caught.value.message == "the GPU preference list is empty; nothing was created"
    assert caught.value.hint == "name at least one GPU, e.g. --gpu 'NVIDIA GeForce RTX 4090'"
    assert fake.seen == []


def test_a_gpu_count_below_one_is_refused_and_one_is_fine(tmp_path: Path) -> None:
    fake = FakeRunPod()
    with pytest.raises(ConfigError) as caught:
        provider(fake, tmp_path).create(spec(["A40"], gpu_count=0))
    assert caught.value.message == "gpu_count must be at least 1"
    assert fake.seen == []
    one = FakeRunPod(creates=[(201, {"id": "p1"})], pods={"p1": [pod("p1", A40, cost=0.44)]})
    assert provider(one, tmp_path).create(spec(["A40"], gpu_count=1)).pod_id == "p1"


def test_an_unknown_gpu_is_refused_with_close_names(tmp_path: Path) -> None:
    """difflib's ratio 2M/T: "H20" against "H200" is 2*3/7 = 0.86 (>= 0.6); against every other
    id or name it is under 0.6. Nothing is created while any preference is unknown."""
    fake = FakeRunPod()
    with pytest.raises(ConfigError) as caught:
        provider(fake, tmp_path).create(spec(["H20", "A40", "Zq9"]))
    assert caught.value.message == "unknown RunPod GPU type(s): 'H20', 'Zq9'"
    assert caught.value.hint == "did you mean 'H200'"
    assert fake.bodies == []
    with pytest.raises(ConfigError) as none_close:
        provider(FakeRunPod(), tmp_path).create(spec(["Zq9"]))
    assert none_close.value.message == "unknown RunPod GPU type(s): 'Zq9'"
    assert none_close.value.hint == "use an id from RunPod's catalog, e.g. 'NVIDIA GeForce RTX 4090'"


def test_the_hint_names_at_most_three_close_names_sorted(tmp_path: Path) -> None:
    """"RTX A3000" against the names: "RTX A4000", "RTX A5000", "RTX A6000" share 8 of 18
    characters (2*8/18 = 0.89), "RTX A4500" 7 (0.78), the ids ("NVIDIA RTX A4000", ...) 8 of 25
    (0.64). difflib keeps the best three, ties to the larger string: A6000, A5000, A4000; the
    hint sorts them."""
    gpus = [gpu(f"NVIDIA RTX {n}", f"RTX {n}", 16, 0.3, 0.2, "HIGH")
            for n in ("A4000", "A4500", "A5000", "A6000")]
    with pytest.raises(ConfigError) as caught:
        provider(FakeRunPod(gpus=gpus), tmp_path).create(spec(["RTX A3000"]))
    assert caught.value.hint == "did you mean 'RTX A4000', 'RTX A5000', 'RTX A6000'"


# -- create: the body --------------------------------------------------------------------------

def _one_create(tmp_path: Path, pod_spec: PodSpec, **kw: Any) -> dict[str, Any]:
    fake = FakeRunPod(creates=[(201, {"id": "p1"})], pods={"p1": [pod("p1", H100, cost=2.69)]})
    provider(fake, tmp_path, **kw).create(pod_spec)
    assert len(fake.bodies) == 1
    body = fake.bodies[0]
    contract = contract_for("runpod", "POST", "/v2/pods")
    assert contract is not None and contract.request_errors(body) == []
    return body


def test_the_create_body_key_by_key(tmp_path: Path) -> None:
    hf = "hf_OFFERcreateTOKEN_abcdef0123"
    body = _one_create(tmp_path, spec(
        ["H100 SXM"], start_command=["bash", "-c", "vllm serve m --port 8000"], gpu_count=2,
        env={"HF_TOKEN": Secret(hf), "TAILPOD_RUN_TAG": TAG}, disk_gb=120, ports=[8000, 22, 8000],
        ssh_public_key="ssh-ed25519 AAAAC3Nza tailpod", volume_id="vol-123",
        data_center_ids=["EU-RO-1"], min_cuda="12.8"))
    assert body == {
        "name": TAG,
        "image": IMAGE,
        "gpu": {"id": H100, "count": 2, "minCudaVersion": "12.8"},
        "cloud": "SECURE",
        "disk": 120,
        "ports": ["22/tcp", "8000/tcp"],
        "env": {"HF_TOKEN": hf, "TAILPOD_RUN_TAG": TAG,
                "PUBLIC_KEY": "ssh-ed25519 AAAAC3Nza tailpod"},
        "startSsh": True,
        "args": '{"entrypoint":["bash","-c"],"cmd":["vllm serve m --port 8000"]}',
        "mounts": {"network": [{"volumeId": "vol-123", "path": "/workspace"}]},
        "dataCenterIds": ["EU-RO-1"],
    }
    assert body["image"].split("@")[1] == "sha256:" + "0123456789abcdef" * 4


def test_the_smallest_create_body_sends_nothing_optional(tmp_path: Path) -> None:
    """No start command, volume, data center, CUDA floor or key: none of their fields; the exact
    key set also shows nothing else (no spot/interruptible field exists in v2)."""
    body = _one_create(tmp_path, spec(["H100 SXM"]))
    assert body == {"name": TAG, "image": IMAGE, "gpu": {"id": H100, "count": 1},
                    "cloud": "SECURE", "disk": 80, "ports": ["22/tcp"], "env": {},
                    "startSsh": True}


def test_a_community_create_a_plain_start_command_and_an_own_mount_path(tmp_path: Path) -> None:
    body = _one_create(tmp_path, spec(
        ["H100 SXM"], start_command=["vllm", "serve", "my model"], image_entrypoint=(),
        volume_id="vol-9", volume_mount_path="/models",
        env={"PUBLIC_KEY": "ssh-rsa mine"}, ssh_public_key="ssh-ed25519 other"),
        cloud="COMMUNITY")
    assert body["cloud"] == "COMMUNITY"
    assert body["args"] == "vllm serve 'my model'"
    assert body["mounts"] == {"network": [{"volumeId": "vol-9", "path": "/models"}]}
    assert body["env"] == {"PUBLIC_KEY": "ssh-rsa mine"}  # the spec's own key is kept


# -- create: every answer ----------------------------------------------------------------------

@pytest.mark.parametrize("detail", [
    "There are No Longer Any Instances available with the requested specifications",
    "No instances currently available",
    "Not enough free GPUs on the host",
    "no INSTANCES available in this data center",
])
def test_each_capacity_answer_reads_as_no_capacity(tmp_path: Path, detail: str) -> None:
    fake = FakeRunPod(creates=[(400, problem(400, detail)), (201, {"id": "p2"})],
                      pods={"p2": [pod("p2", A40, cost=0.44)]})
    info = provider(fake, tmp_path).create(spec(["H200", "A40"]))
    assert info.detail["fallback_reasons"] == [f"{H200}: no capacity ({detail})"]


def test_a_403_skips_a_pool_the_account_cannot_use(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(403, problem(403, "forbidden")), (201, {"id": "p2"})],
                      pods={"p2": [pod("p2", A40, cost=0.44)]})
    info = provider(fake, tmp_path).create(spec(["H200", "A40"]))
    assert info.detail["fallback_reasons"] == [
        f"{H200}: this account cannot use that pool (HTTP 403)"]


@pytest.mark.parametrize(("answer", "named"), [
    (problem(400, "Request validation failed.",
             ["$: additional properties 'interruptible' not allowed", "$.gpu: bad"]),
     "$: additional properties 'interruptible' not allowed; $.gpu: bad"),
    (problem(400, "Additional Properties 'x' not allowed"), "Additional Properties 'x' not allowed"),
    ("additional properties 'x' not allowed", "additional properties 'x' not allowed"),
])
def test_a_rejected_field_stops_the_walk(tmp_path: Path, answer: Any, named: str) -> None:
    fake = FakeRunPod(creates=[(400, answer)])
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).create(spec(["H200", "A40"]))
    assert caught.value.message == ("RunPod rejected a field of tailpod's create request "
                                    f"(HTTP 400): {named}; nothing was created")
    assert caught.value.hint == "this is a tailpod bug; please report it"
    assert len(fake.bodies) == 1


@pytest.mark.parametrize(("answer", "named"), [
    (problem(422, "Request validation failed.", ["$.disk: value must be an integer >= 1",
                                                 "$.ports: bad"]),
     "$.disk: value must be an integer >= 1; $.ports: bad"),
    (problem(422, "Request validation failed.", []), "Request validation failed."),
    (problem(422, "Request validation failed."), "Request validation failed."),
    ("malformed body", "malformed body"),
])
def test_a_malformed_request_stops_the_walk(tmp_path: Path, answer: Any, named: str) -> None:
    fake = FakeRunPod(creates=[(422, answer)])
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).create(spec(["H200", "A40"]))
    assert caught.value.message == ("RunPod rejected tailpod's create request as malformed "
                                    f"(HTTP 422): {named}; nothing was created")
    assert caught.value.hint == "this is a tailpod bug; please report it"
    assert len(fake.bodies) == 1


def test_no_balance_stops_everything(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(402, problem(402, "insufficient balance"))])
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).create(spec(["H200", "A40"]))
    assert caught.value.message == "RunPod: insufficient balance (HTTP 402); nothing was created"
    assert caught.value.hint == ("add credit: RunPod needs at least one hour of the pod's cost "
                                 "in the account")
    assert len(fake.bodies) == 1


def test_a_rejected_key_stops_everything(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(401, problem(401, "unauthorized"))])
    with pytest.raises(AuthError) as caught:
        provider(fake, tmp_path).create(spec(["H200", "A40"]))
    assert caught.value.message == "RunPod rejected the API key (HTTP 401) while creating a pod"
    assert caught.value.hint == "check RUNPOD_API_KEY"
    assert len(fake.bodies) == 1


def test_an_unexpected_answer_names_the_gpu(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(404, problem(404, f"gpu type not found: {H200}"))])
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).create(spec(["H200", "A40"]))
    assert str(caught.value) == (f"RunPod: creating a pod on {H200} failed (HTTP 404: gpu type "
                                 f"not found: {H200})")
    assert len(fake.bodies) == 1


def test_a_500_whose_pod_appears_in_the_listing_is_adopted_not_created_again(
        tmp_path: Path) -> None:
    """A 5xx on create may leave a billing pod: the next try looks the run tag up first, finds
    it, and records its id (on_created) instead of sending a second create."""
    fake = FakeRunPod(
        creates=[(400, problem(400, CAPACITY)), (500, problem(500, "upstream timeout"))],
        # another run's pod listed first: only this run's tag may be adopted
        listings=[[pod("pod-other", H100, name="tp-20260101-000000-dddddd"),
                   pod("pod-late", H100, "PROVISIONING", name=TAG)]],
        pods={"pod-late": [pod("pod-late", H100, cost=2.69)]})
    sleeps: list[float] = []
    created: list[str] = []
    rp = provider(fake, tmp_path, sleeps)
    rp.on_created = created.append
    info = rp.create(spec(["H200", "H100 SXM"]))
    assert info.pod_id == "pod-late" and created == ["pod-late"]
    assert [b["gpu"]["id"] for b in fake.bodies] == [H200, H100]
    assert fake.calls() == ["GET /v2/catalog/gpus", "POST /v2/pods", "POST /v2/pods",
                            "GET /v2/pods", "GET /v2/pods/pod-late"]
    assert info.detail["fallback_reasons"] == [
        f"{H200}: no capacity ({CAPACITY})",
        f"{H100}: created despite an error (HTTP 500: upstream timeout)"]
    assert sleeps == [1.0]  # the first backoff, before the look-up


def test_a_lost_answer_is_looked_up_before_a_second_create(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[httpx.ConnectError("reset"), (201, {"id": "pod-2"})],
                      listings=[[]], pods={"pod-2": [pod("pod-2", A40, cost=0.44)]})
    info = provider(fake, tmp_path).create(spec(["A40"]))
    assert info.pod_id == "pod-2"
    assert fake.calls() == ["GET /v2/catalog/gpus", "POST /v2/pods", "GET /v2/pods",
                            "POST /v2/pods", "GET /v2/pods/pod-2"]


def test_a_create_that_never_answers_names_the_call(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[httpx.ConnectError("reset")] * 3, listings=[[]])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(["A40"]))
    assert caught.value.message == (
        f"RunPod could not place a pod on any of 1 GPU type(s): {A40}: the API kept failing "
        f"(RunPod: creating a pod on {A40} failed (no answer: ConnectError at "
        "http://runpod.invalid (from TAILPOD_RUNPOD_URL: a stopped sandbox or a stale value?)))")


def test_a_pod_created_but_not_readable_keeps_its_id_and_tag(tmp_path: Path) -> None:
    """The create answered with an id, every read-back 404s: the pod exists and may bill, so
    it is returned (and recorded by the caller) under its id and run tag, state unknown."""
    fake = FakeRunPod(creates=[(201, {"id": "pod-hidden"})], pods={"pod-hidden": [404]})
    sleeps: list[float] = []
    info = provider(fake, tmp_path, sleeps).create(spec(["A40"], max_price=0.5))
    assert (info.pod_id, info.run_tag, info.state) == ("pod-hidden", TAG, PodState.UNKNOWN)
    assert info.detail["readback_error"] == "not visible"
    assert sleeps == [0.0, 0.5, 0.5] and fake.deleted == []


def test_an_offer_shown_within_the_cap_is_created_under_it(tmp_path: Path) -> None:
    """L40S at 0.79333 is offered at the rounded $0.7933/h; a cap of exactly that lets `create`
    take it too (both round to 4 places)."""
    rp = provider(FakeRunPod(), tmp_path)
    assert rp.offers(["L40S"], 1, 0.7933)[0].detail["above_cap"] is False
    fake = FakeRunPod(creates=[(201, {"id": "p1"})], pods={"p1": [pod("p1", L40S, cost=0.7933)]})
    assert provider(fake, tmp_path).create(spec(["L40S"], max_price=0.7933)).pod_id == "p1"
    assert [b["gpu"]["id"] for b in fake.bodies] == [L40S]


def test_a_gpu_at_the_cap_is_not_reported_above_it(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(400, problem(400, CAPACITY))])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(["A40", "H100 SXM"], max_price=0.44))
    assert caught.value.message == (
        "RunPod could not place a pod on any of 2 GPU type(s): "
        f"{H100}: $2.69/h is above the cap; {A40}: no capacity ({CAPACITY})")


def test_a_new_pod_within_a_billionth_of_the_cap_is_kept(tmp_path: Path) -> None:
    """The after-create check allows 1e-9 of float noise over the cap, and no more."""
    stated = 0.5 + 1e-9
    fake = FakeRunPod(creates=[(201, {"id": "p1"})], pods={"p1": [pod("p1", A40, cost=stated)]})
    assert provider(fake, tmp_path).create(spec(["A40"], max_price=0.5)).price_per_hr == stated
    assert fake.deleted == []


def test_a_field_rejection_split_over_lines_still_stops_the_walk(tmp_path: Path) -> None:
    """The detail is read with its whitespace folded (summarize_body), so a line break inside
    "additional properties" is still the rejected-field answer."""
    fake = FakeRunPod(creates=[(400, problem(400, "additional\n properties 'x' not allowed"))])
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).create(spec(["H200", "A40"]))
    assert caught.value.message == ("RunPod rejected a field of tailpod's create request "
                                    "(HTTP 400): additional properties 'x' not allowed; nothing "
                                    "was created")
    assert len(fake.bodies) == 1


@pytest.mark.parametrize("answer", [(201, {"name": TAG}), (200, {"id": ""}), (201, "ok")])
def test_a_success_without_a_pod_id_is_not_a_pod(tmp_path: Path, answer: Any) -> None:
    fake = FakeRunPod(creates=[answer, answer, answer], listings=[[]])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(["A40"]))
    assert len(fake.bodies) == 3
    assert fake.calls().count("GET /v2/pods") == 3  # before the 2nd and 3rd try, and at the end
    assert caught.value.message.startswith(
        f"RunPod could not place a pod on any of 1 GPU type(s): {A40}: the API kept failing (")


def test_a_202_with_an_id_is_not_taken_as_created(tmp_path: Path) -> None:
    """Only 200/201 mean created (openapi: createPod answers 201); any other status carrying an
    id goes to the refusal rules."""
    fake = FakeRunPod(creates=[(202, {"id": "p-202"})])
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).create(spec(["A40"]))
    assert str(caught.value).startswith(f"RunPod: creating a pod on {A40} failed (HTTP 202")


# -- the read-back -----------------------------------------------------------------------------

def test_a_starting_pod_is_read_again_until_it_runs(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(201, {"id": "p1"})],
                      pods={"p1": [pod("p1", A40, "PROVISIONING"), pod("p1", A40, "STARTING"),
                                   pod("p1", A40, cost=0.44)]})
    sleeps: list[float] = []
    info = provider(fake, tmp_path, sleeps).create(spec(["A40"]))
    assert (info.state, info.price_per_hr) == (PodState.RUNNING, 0.44)
    assert sleeps == [0.5, 0.5]
    assert fake.calls().count("GET /v2/pods/p1") == 3


def test_the_read_back_waits_no_longer_than_its_attempts(tmp_path: Path) -> None:
    fake = FakeRunPod(pods={"p1": [pod("p1", A40, "STARTING")]})
    sleeps: list[float] = []
    rp = provider(fake, tmp_path, sleeps)
    info = rp._settled(rp.to_info(pod("p1", A40, "STARTING")))
    assert info.state is PodState.PENDING and sleeps == [0.5, 0.5, 0.5]
    assert len(fake.seen) == 3


def test_the_read_back_keeps_what_it_had_when_a_read_fails(tmp_path: Path) -> None:
    gone = FakeRunPod(pods={"p1": [404, pod("p1", A40, cost=0.44)]})
    rp = provider(gone, tmp_path)
    first = rp.to_info(pod("p1", A40, "STARTING", cost=0.3))
    # a 404 keeps the last reading, the next read finds it running
    assert rp._settled(first).price_per_hr == 0.44
    broken = FakeRunPod(pods={"p1": [500, pod("p1", A40, cost=0.44)]})
    rp2 = provider(broken, tmp_path)
    assert rp2._settled(first) is first  # an error ends the wait
    assert len(broken.seen) == 1


def test_a_settled_or_priced_pod_is_not_read_again(tmp_path: Path) -> None:
    fake = FakeRunPod()
    rp = provider(fake, tmp_path)
    for info in (PodInfo("p1", TAG, PodState.RUNNING, price_per_hr=None),
                 PodInfo("p1", TAG, PodState.PENDING, price_per_hr=0.4),
                 PodInfo("p1", TAG, PodState.UNKNOWN)):
        assert rp._settled(info) is info
    assert fake.seen == []


# -- GraphQL and the account -------------------------------------------------------------------

def test_graphql_sends_variables_apart_from_the_query(tmp_path: Path) -> None:
    fake = FakeRunPod(gql=[(200, {"data": {"pod": {"id": "p1"}}})])
    data = provider(fake, tmp_path).graphql("query Q($id: String!) { pod }", {"id": "p1"}, "x")
    assert data == {"pod": {"id": "p1"}}
    assert fake.gql_sent == [{"query": "query Q($id: String!) { pod }", "variables": {"id": "p1"}}]
    assert fake.calls() == ["POST /graphql"]


@pytest.mark.parametrize("status", [404, 410])
def test_a_retired_graphql_endpoint_is_unavailable(tmp_path: Path, status: int) -> None:
    with pytest.raises(GraphQLUnavailable) as caught:
        provider(FakeRunPod(gql=[(status, {"message": "this API was sunset"})]),
                 tmp_path).graphql("q", {}, "reading the thing")
    assert caught.value.message == (f"RunPod's GraphQL API is unavailable (HTTP {status} during "
                                    "reading the thing): this API was sunset")
    with pytest.raises(GraphQLUnavailable) as bare:
        provider(FakeRunPod(gql=[(status, "")]), tmp_path).graphql("q", {}, "r")
    assert bare.value.message == f"RunPod's GraphQL API is unavailable (HTTP {status} during r): " \
                                 "retired"


@pytest.mark.parametrize("word", ["retired", "Deprecated", "no longer available",
                                  "no longer supported", "sunset", "decommissioned"])
def test_a_graphql_error_saying_it_is_gone_is_unavailable(tmp_path: Path, word: str) -> None:
    answer = {"errors": [{"message": f"This endpoint is {word}"}]}
    with pytest.raises(GraphQLUnavailable) as caught:
        provider(FakeRunPod(gql=[(200, answer)]), tmp_path).graphql("q", {}, "reading x")
    assert caught.value.message == ("RunPod's GraphQL API is unavailable during reading x: "
                                    f"This endpoint is {word}")


def test_other_graphql_answers(tmp_path: Path) -> None:
    with pytest.raises(ProviderError) as caught:
        provider(FakeRunPod(gql=[(200, {"errors": [{"message": "boom"}]})]),
                 tmp_path).graphql("q", {}, "reading x")
    assert type(caught.value) is ProviderError
    assert caught.value.message == "RunPod: reading x failed: boom"
    with pytest.raises(ProviderError) as odd:
        provider(FakeRunPod(gql=[(200, "not json")]), tmp_path).graphql("q", {}, "reading x")
    assert odd.value.message == "RunPod: unexpected GraphQL answer during reading x"
    assert provider(FakeRunPod(gql=[(200, {"data": None, "errors": []})]),
                    tmp_path).graphql("q", {}, "x") == {}
    assert provider(FakeRunPod(gql=[(200, {"data": [1]})]), tmp_path).graphql("q", {}, "x") == {}
    with pytest.raises(ProviderError) as down:
        provider(FakeRunPod(gql=[(502, "")]), tmp_path).graphql("q", {}, "reading x")
    assert str(down.value) == "RunPod: reading x failed (HTTP 502)"


def test_account_spend_reads_numbers_only(tmp_path: Path) -> None:
    fake = FakeRunPod(gql=[(200, {"data": {"myself": {"currentSpendPerHr": 1,
                                                      "clientBalance": 25.5}}})])
    assert provider(fake, tmp_path).account_spend() == (1.0, 25.5)
    assert fake.gql_sent == [{"query": "query TailpodSpend { myself { currentSpendPerHr "
                                       "clientBalance } }", "variables": {}}]
    odd = FakeRunPod(gql=[(200, {"data": {"myself": {"currentSpendPerHr": "1",
                                                     "clientBalance": None}}})])
    assert provider(odd, tmp_path).account_spend() == (None, None)
    empty = FakeRunPod(gql=[(200, {"data": {"myself": None}})])
    assert provider(empty, tmp_path).account_spend() == (None, None)
    with pytest.raises(ProviderError) as caught:
        provider(FakeRunPod(gql=[(200, {"errors": [{"message": "no"}]})]),
                 tmp_path).account_spend()
    assert caught.value.message == "RunPod: reading the account spend rate failed: no"


def test_account_reads_balance_rate_and_limit(tmp_path: Path) -> None:
    fake = FakeRunPod(gql=[(200, {"data": {"myself": {"clientBalance": 40,
                                                      "currentSpendPerHr": 0.44,
                                                      "spendLimit": 80.0}}})])
    assert provider(fake, tmp_path).account() == AccountFacts(40.0, 0.44, 80.0)
    assert fake.gql_sent == [{"query": "query TailpodAccount { myself { clientBalance "
                                       "currentSpendPerHr spendLimit } }", "variables": {}}]
    odd = FakeRunPod(gql=[(200, {"data": {"myself": {"clientBalance": "40",
                                                     "spendLimit": None}}})])
    assert provider(odd, tmp_path).account() == AccountFacts(None, None, None)
    assert provider(FakeRunPod(gql=[(200, {"data": {}})]), tmp_path).account() == \
        AccountFacts(None, None, None)
    with pytest.raises(ProviderError) as caught:
        provider(FakeRunPod(gql=[(200, {"errors": [{"message": "no"}]})]), tmp_path).account()
    assert caught.value.message == "RunPod: reading the account failed: no"


def test_without_graphql_the_account_checks_the_key_over_rest(tmp_path: Path) -> None:
    fake = FakeRunPod(gql=[(410, {"message": "gone"})])
    facts = provider(fake, tmp_path).account()
    assert facts == AccountFacts(None, unavailable=(
        "RunPod's GraphQL API is unavailable (HTTP 410 during reading the account): gone"))
    assert fake.calls() == ["POST /graphql", "GET /v2/pods"]

    def refused(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404) if request.url.path == "/graphql" else httpx.Response(401)

    rp = RunPodProvider(settings_for(tmp_path), timings=TIMINGS,
                        transport=httpx.MockTransport(refused), sleep=lambda s: None)
    with pytest.raises(AuthError):
        rp.account()


# -- the provider itself -----------------------------------------------------------------------

def test_the_provider_defaults_to_the_secure_cloud_and_its_settings(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    rp = RunPodProvider(settings, transport=httpx.MockTransport(FakeRunPod()))
    assert rp.cloud == "SECURE" and rp.settings is settings
    assert rp.timings == ApiTimings()


def test_the_meter_delay_is_the_newest_measured_for_this_account(tmp_path: Path) -> None:
    rp = provider(FakeRunPod(), tmp_path)
    assert rp.meter_delay() == (
        None, "not documented by RunPod, not measured: run check-requirements --live")

    def facts(account: str, at: float, delay: float | None, image: str) -> FirstContactFacts:
        return FirstContactFacts(account=account, image=image, checked_at=at, start_form="json",
                                 start_command_ran=True, pod_key_self_kill=True,
                                 meter_delay_s=delay)

    mine = account_id(KEY)
    settings = settings_for(tmp_path)
    save(settings, facts(mine, 100.0, 42.0, "img-a"))
    save(settings, facts(mine, 150.0, 55.0, "img-b"))
    save(settings, facts(mine, 200.0, None, "img-c"))  # newest, but measured nothing
    save(settings, facts(account_id("rp_someoneELSEkey_000000000000"), 300.0, 7.0, "img-a"))
    assert rp.meter_delay() == (55.0, "measured by first contact")

"""vast.ai's listing and billing evidence (provision/vastai/provider.py), against a mock API the
test scripts answer by answer: every instance state, paging, the direct lookup and the credit
watch, on a clock the test moves. Written to kill the mutants `make mutate` found surviving in
the listing and evidence paths (docs/testing.md); expected values are the test's own arithmetic
on the rates and credits it planted."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.config import load_settings
from tailpod.errors import ProviderError
from tailpod.provision.apiclient import ApiTimings
from tailpod.provision.base import PodState
from tailpod.provision.vastai import provider as vast_module
from tailpod.provision.vastai.provider import VastProvider

KEY = "vast_LISTINGevidenceKEY_0123456789"
TAG = "tp-20260101-000000-cccccc"
OTHER = "tp-20260101-000000-dddddd"
WINDOW_S = 36.0  # the credit watch: $1/h moves the credit by exactly $0.01 in 36 s
TIMINGS = ApiTimings(request_timeout_s=5.0, attempts=1, backoff_s=0.0, backoff_max_s=0.0,
                     evidence_window_s=WINDOW_S)


def row(pod_id: int, label: str | None, status: str | None = "running", dph: Any = 0.5,
        **extra: Any) -> dict[str, Any]:
    return {"id": pod_id, "label": label, "actual_status": status, "dph_total": dph,
            "gpu_name": "RTX 4090", "num_gpus": 1, **extra}


@dataclass
class FakeVast:
    pages: list[dict[str, Any]] = field(default_factory=lambda: [{"instances": []}])
    after: list[dict[str, Any]] | None = None  # the listing after the credit watch
    direct: dict[str, Any] = field(default_factory=dict)  # GET /api/v0/instances/{id}/
    credits: list[Any] = field(default_factory=lambda: [10.0, 10.0])
    seen: list[httpx.Request] = field(default_factory=list)
    listings: int = 0
    destroy: dict[str, httpx.Response] = field(default_factory=dict)  # DELETE answers by id
    deleted: list[tuple[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] | None = None  # GET /api/v0/volumes/; None: not found (404)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        path = request.url.path
        if request.method == "DELETE":
            pod_id = path.split("/")[4]
            self.deleted.append((pod_id, json.loads(request.content or b"null")))
            return self.destroy.get(pod_id, httpx.Response(200, json={"success": True}))
        if request.method != "GET":
            return httpx.Response(405)
        if path == "/api/v1/instances/":
            token = request.url.params.get("after_token")
            if token is None:
                self.listings += 1
            pages = self.pages if self.listings < 2 or self.after is None else [
                {"instances": self.after}]
            index = 0 if token is None else int(token.removeprefix("t"))
            return httpx.Response(200, json=pages[index])
        if path.startswith("/api/v0/instances/"):
            found = self.direct.get(path.split("/")[4])
            if found == 404:
                return httpx.Response(404)
            return httpx.Response(200, json={"instances": found})
        if path == "/api/v0/volumes/" and self.volumes is not None:
            return httpx.Response(200, json={"volumes": self.volumes})
        if path == "/api/v0/users/current/":
            credit = self.credits.pop(0) if self.credits else None
            return httpx.Response(200, json={"credit": credit, "balance": 99.0})
        return httpx.Response(404)


class Clock:
    """The provider's `time`: only this test moves it (each sleep advances it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(vast_module, "time", c)
    return c


def provider(fake: FakeVast, tmp_path: Path, clock: Clock | None = None) -> VastProvider:
    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path),
                                  "TAILPOD_VAST_URL": "http://vast.invalid"},
                             dotenv_path=tmp_path / "absent.env")
    sleep = clock.sleep if clock is not None else (lambda s: None)
    return VastProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(fake),
                        sleep=sleep)


def _checks(evidence: Any) -> dict[str, Any]:
    return {c.name: c for c in evidence.checks}


# -- reading an instance ---------------------------------------------------------------------------

def test_to_info_reads_state_price_ssh_and_the_billing_facts(tmp_path: Path) -> None:
    info = provider(FakeVast(), tmp_path).to_info(row(
        7, TAG, dph=0.31, ssh_host=" ssh4.vast.ai ", ssh_port=30007, intended_status="running",
        ports={"22/tcp": [{"HostPort": "41022"}]}, public_ipaddr="5.6.7.8",
        status_msg="ok", storage_total_cost=0.02, machine_id=42, cuda_max_good=12.4,
        driver_version="550", start_date=1.5))
    assert (info.pod_id, info.run_tag, info.state) == ("7", TAG, PodState.RUNNING)
    assert (info.gpu_type, info.gpu_count, info.price_per_hr) == ("RTX 4090", 1, 0.31)
    assert (info.ssh_host, info.ssh_port) == ("ssh4.vast.ai", 30007)
    assert info.detail == {"status": "running", "label": TAG, "intended_status": "running",
                           "status_msg": "ok", "storage_per_hr": 0.02, "container_up": True,
                           "gpu_billing": True, "never_running": False, "machine_id": 42,
                           "cuda_max_good": 12.4, "driver_version": "550", "created_at": 1.5,
                           # an on-demand instance (no is_bid): not spot, never preempted
                           "spot": False, "preempted": False}


@pytest.mark.parametrize(("status", "state", "gpu_billing", "never_running"), [
    (None, PodState.PENDING, False, False), ("created", PodState.PENDING, False, False),
    ("loading", PodState.PENDING, False, False), ("scheduling", PodState.PENDING, False, False),
    ("rebooting", PodState.PENDING, False, False), ("running", PodState.RUNNING, True, False),
    ("stopped", PodState.STOPPED, False, False), ("exited", PodState.STOPPED, False, False),
    ("frozen", PodState.STOPPED, True, False), ("unknown", PodState.ERROR, False, True),
    ("offline", PodState.ERROR, False, True), ("new-word", PodState.UNKNOWN, False, False),
])
def test_every_vast_state_maps_and_says_whether_the_gpu_bills(
        tmp_path: Path, status: str | None, state: PodState, gpu_billing: bool,
        never_running: bool) -> None:
    info = provider(FakeVast(), tmp_path).to_info(row(1, TAG, status))
    assert info.state is state
    assert info.detail["gpu_billing"] is gpu_billing
    assert info.detail["never_running"] is never_running
    assert info.detail["container_up"] is (status == "running")


def test_ssh_falls_back_to_the_port_map_and_bad_values_are_unknown(tmp_path: Path) -> None:
    vp = provider(FakeVast(), tmp_path)
    mapped = vp.to_info(row(1, "mine", ports={"22/tcp": [{"HostPort": "41022"}]},
                            public_ipaddr=" 5.6.7.8 "))
    assert (mapped.ssh_host, mapped.ssh_port, mapped.run_tag) == ("5.6.7.8", 41022, None)
    no_ip = vp.to_info(row(2, TAG, ports={"22/tcp": [{"HostPort": "41022"}]}, public_ipaddr=""))
    assert (no_ip.ssh_host, no_ip.ssh_port) == (None, 41022)
    empty = vp.to_info(row(3, TAG, ports={"22/tcp": [{"HostPort": ""}]}, ssh_host="h"))
    assert (empty.ssh_host, empty.ssh_port) == ("h", None)
    # either half missing sends both to the port map (its host is the public address)
    port_only = vp.to_info(row(7, TAG, ssh_port=30007, public_ipaddr="5.6.7.8",
                               ports={"22/tcp": [{"HostPort": "41022"}]}))
    assert (port_only.ssh_host, port_only.ssh_port) == ("5.6.7.8", 41022)
    host_only = vp.to_info(row(8, TAG, ssh_host="h", public_ipaddr="5.6.7.8",
                               ports={"22/tcp": [{"HostPort": "41022"}]}))
    assert (host_only.ssh_host, host_only.ssh_port) == ("5.6.7.8", 41022)
    bad = vp.to_info(row(4, TAG, ssh_host="h", ssh_port="twenty"))
    assert bad.ssh_port is None
    assert vp.to_info(row(5, TAG, dph="0.5")).price_per_hr is None
    assert vp.to_info(row(6, TAG, dph=1)).price_per_hr == 1.0


def test_get_reads_the_instance_or_none(tmp_path: Path) -> None:
    fake = FakeVast(direct={"1": row(1, TAG), "2": [row(2, TAG)], "3": [], "4": None, "5": 404})
    vp = provider(fake, tmp_path)
    one, two = vp.get("1"), vp.get("2")
    assert one is not None and one.pod_id == "1" and two is not None and two.pod_id == "2"
    assert vp.get("3") is None and vp.get("4") is None and vp.get("5") is None
    assert fake.seen[0].url.params["owner"] == "me"


def test_get_refuses_an_answer_it_cannot_read(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=["x"])

    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path)},
                             dotenv_path=tmp_path / "absent.env")
    vp = VastProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(handler))
    with pytest.raises(ProviderError) as caught:
        vp.get("9")
    assert caught.value.message == "vast.ai: unexpected answer reading instance 9"


# -- the listing -----------------------------------------------------------------------------------

def test_the_listing_keeps_every_state_and_filters_by_label(tmp_path: Path) -> None:
    rows = [row(1, TAG), row(2, TAG, "exited"), row(3, TAG, "frozen"), row(4, TAG, "offline"),
            row(5, OTHER), row(6, "mine"), "junk"]
    fake = FakeVast(pages=[{"instances": rows}])
    vp = provider(fake, tmp_path)
    assert [p.pod_id for p in vp.list_all()] == ["1", "2", "3", "4", "5", "6"]
    assert [p.pod_id for p in vp.list_by_tag(TAG)] == ["1", "2", "3", "4"]
    assert [p.pod_id for p in vp.list_by_tag()] == ["1", "2", "3", "4", "5"]
    params = fake.seen[0].url.params
    assert params["limit"] == "25"
    assert json.loads(params["order_by"]) == [{"col": "id", "dir": "asc"}]


def test_the_listing_follows_next_token(tmp_path: Path) -> None:
    fake = FakeVast(pages=[{"instances": [row(1, TAG)], "next_token": "t1"},
                           {"instances": [row(2, TAG)], "next_token": "t2"},
                           {"instances": [row(3, TAG)], "next_token": None}])
    assert [p.pod_id for p in provider(fake, tmp_path).list_all()] == ["1", "2", "3"]
    assert [r.url.params.get("after_token") for r in fake.seen] == [None, "t1", "t2"]


def test_a_listing_without_instances_or_without_end_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProviderError) as caught:
        provider(FakeVast(pages=[{"rows": []}]), tmp_path).list_all()
    assert caught.value.message == "vast.ai: the instance list answer has no `instances` list"
    endless = [{"instances": [], "next_token": f"t{i + 1}"} for i in range(401)]
    with pytest.raises(ProviderError) as caught:
        provider(FakeVast(pages=endless), tmp_path).list_all()
    assert caught.value.message == "vast.ai: instance listing did not end after 400 pages"


def test_the_balance_is_credit_only_and_never_a_bool(tmp_path: Path) -> None:
    for credit, want in ((12.5, 12.5), (3, 3.0), (True, None), ("5", None), (None, None)):
        assert provider(FakeVast(credits=[credit]), tmp_path).balance() == want


# -- the evidence -----------------------------------------------------------------------------------

def test_a_destroyed_instance_with_the_credit_explained_is_proven(tmp_path: Path,
                                                                  clock: Clock) -> None:
    # a neighbour at $0.30/h plus this instance's $0.40/h tolerance of half: the credit may
    # drop up to $0.50/h, i.e. $0.005 in 36 s; it drops $0.004 ($0.40/h)
    fake = FakeVast(pages=[{"instances": [row(9, "mine", dph=0.3)]}], direct={"1": None},
                    credits=[10.0, 9.996])
    ev = provider(fake, tmp_path, clock).billing_evidence(TAG, "1", 0.4)
    checks = _checks(ev)
    assert list(checks) == ["tag-listing", "direct-lookup", "charges-stopped",
                            "other-tailpod-resources"]
    assert all(c.passed for c in ev.checks), ev.checks
    assert checks["direct-lookup"].detail == "GET /api/v0/instances/1/: instances: null (gone)"
    assert checks["charges-stopped"].detail.startswith(
        "not informative: credit moved $0.004000 over 36.0s (≈$0.4000/h); other instances "
        "explain ≈$0.3000/h; this instance was $0.4000/h")
    assert "the meter's update delay is unknown (vast documents no update interval for " \
           "`credit`)" in checks["charges-stopped"].detail
    assert ev.still_billing == []


def test_a_credit_still_dropping_past_the_tolerance_fails(tmp_path: Path, clock: Clock) -> None:
    # $0.30/h explained, tolerance $0.20/h: a $0.006 drop in 36 s is $0.60/h, $0.10/h too much
    fake = FakeVast(pages=[{"instances": [row(9, "mine", dph=0.3)]}], direct={"1": None},
                    credits=[10.0, 9.994])
    ev = provider(fake, tmp_path, clock).billing_evidence(TAG, "1", 0.4)
    assert not _checks(ev)["charges-stopped"].passed
    assert ev.still_billing == [
        f"vast.ai charges still move by ≈$0.300/h beyond the listed instances after destroying "
        f"{TAG} — check https://cloud.vast.ai/instances/"]


def test_an_instance_with_no_rate_is_held_to_a_cent_an_hour(tmp_path: Path, clock: Clock) -> None:
    ok = provider(FakeVast(credits=[10.0, 10.0 - 0.0001]), tmp_path, clock).billing_evidence(
        TAG, None, None)  # $0.01/h
    assert _checks(ok)["charges-stopped"].passed
    bad = provider(FakeVast(credits=[10.0, 10.0 - 0.0002]), tmp_path, clock).billing_evidence(
        TAG, None, None)  # $0.02/h
    assert not _checks(bad)["charges-stopped"].passed


def test_the_credit_watch_counts_what_stays_listed_after_it(tmp_path: Path,
                                                            clock: Clock) -> None:
    """A stopped neighbour bills its storage, a frozen one its GPU; this run's own rows never
    explain anything. Listed again after the window: the second listing is the one counted."""
    after = [row(9, "a", dph=0.2), row(10, "b", "exited", dph=0.5, storage_total_cost=0.05),
             row(11, "c", "frozen", dph=0.1, storage_total_cost=0.9),
             row(12, TAG, dph=5.0, storage_total_cost=5.0),
             row(14, TAG, "exited", dph=None, storage_total_cost=5.0),
             row(15, "e", dph=None),
             row(13, "d", "loading", dph=7.0)]
    # explained: 0.2 + 0.05 + 0.1 = 0.35/h (+ 0 for the loading one's GPU: not billing yet)
    fake = FakeVast(pages=[{"instances": []}], after=after, direct={"1": None},
                    credits=[10.0, 10.0 - 0.0035])
    ev = provider(fake, tmp_path, clock).billing_evidence(TAG, "1", 0.0)
    detail = _checks(ev)["charges-stopped"].detail
    assert "other instances explain ≈$0.3500/h" in detail, detail
    assert fake.listings == 2



def test_a_kept_volume_explains_its_share_of_the_credit_drop(tmp_path: Path,
                                                              clock: Clock) -> None:
    # a volume kept on purpose at $0.25/h (storage_total_cost) and nothing else listed: a $0.0025
    # drop in 36 s is $0.25/h, all of it explained; this instance's $0.40/h allows $0.20/h more
    fake = FakeVast(direct={"1": None}, credits=[10.0, 10.0 - 0.0025],
                    volumes=[{"id": 7, "label": "keep", "disk_space": 50,
                              "storage_total_cost": 0.25}])
    ev = provider(fake, tmp_path, clock).billing_evidence(TAG, "1", 0.4)
    check = _checks(ev)["charges-stopped"]
    assert check.passed, check.detail
    assert "other instances explain ≈$0.2500/h" in check.detail, check.detail
    assert ev.still_billing == []


def test_a_credit_drop_exactly_at_the_tolerance_passes(tmp_path: Path, clock: Clock) -> None:
    # an hour's window so the arithmetic is exact in binary: $0.50 over 3600 s is $0.50/h,
    # exactly half this instance's $1.00/h, the most it may still move
    fake = FakeVast(direct={"1": None}, credits=[10.0, 9.5])
    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path),
                                  "TAILPOD_VAST_URL": "http://vast.invalid"},
                             dotenv_path=tmp_path / "absent.env")
    hour = VastProvider(settings, timings=replace(TIMINGS, evidence_window_s=3600.0),
                        transport=httpx.MockTransport(fake), sleep=clock.sleep)
    ev = hour.billing_evidence(TAG, "1", 1.0)
    check = _checks(ev)["charges-stopped"]
    assert check.passed, check.detail
    assert check.detail.startswith("not informative: credit moved $0.500000 over 3600.0s "
                                   "(≈$0.5000/h)"), check.detail
    assert ev.still_billing == []

def test_no_credit_reported_fails_the_check(tmp_path: Path, clock: Clock) -> None:
    for credits in ([None, 10.0], [10.0, None]):
        ev = provider(FakeVast(credits=list(credits)), tmp_path, clock).billing_evidence(
            TAG, None, 0.4)
        check = _checks(ev)["charges-stopped"]
        assert check.passed is False
        assert check.detail == "vast.ai did not report the account's `credit`"


def test_the_instance_still_answering_fails_the_lookup_and_names_its_kill(
        tmp_path: Path, clock: Clock) -> None:
    fake = FakeVast(direct={"1": row(1, TAG, "exited")})
    ev = provider(fake, tmp_path, clock).billing_evidence(TAG, "1", 0.4)
    check = _checks(ev)["direct-lookup"]
    assert not check.passed and check.detail == "GET /api/v0/instances/1/: still there"
    assert ev.still_billing == [f"vast.ai still answers for instance 1 — kill: tailpod down {TAG}"
                                "  (or: vastai destroy instance 1)"]


def test_the_instance_still_listed_fails_the_listing_and_is_named_once(
        tmp_path: Path, clock: Clock) -> None:
    fake = FakeVast(pages=[{"instances": [row(1, TAG, "exited")]}],
                    direct={"1": row(1, TAG, "exited")})
    ev = provider(fake, tmp_path, clock).billing_evidence(TAG, "1", 0.4)
    assert not _checks(ev)["tag-listing"].passed and not _checks(ev)["direct-lookup"].passed
    assert len(ev.still_billing) == 1 and ev.still_billing[0].startswith("vast.ai still lists 1")


def test_no_instance_id_rests_on_the_label_listing(tmp_path: Path, clock: Clock) -> None:
    fake = FakeVast()
    ev = provider(fake, tmp_path, clock).billing_evidence(TAG, None, 0.4)
    lookup = _checks(ev)["direct-lookup"]
    assert lookup.passed is True and lookup.detail == (
        "no instance id was ever recorded; the label listing is the proof")
    assert _checks(ev)["tag-listing"].detail == f"vast.ai lists nothing tagged {TAG}"
    assert not [r for r in fake.seen if r.url.path.startswith("/api/v0/instances/")]


def test_a_known_short_meter_delay_makes_the_watch_informative(
        tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vast_module, "METER_DELAY_S", 40.0)  # longer than the 36 s window
    ev = provider(FakeVast(credits=[10.0, 10.0]), tmp_path, clock).billing_evidence(
        TAG, None, 0.4)
    check = _checks(ev)["charges-stopped"]
    assert check.passed and check.informative is not False
    assert "over 41.0s" in check.detail  # waited just past the delay


def test_an_untracked_tagged_instance_fails_the_others_check(tmp_path: Path,
                                                             clock: Clock) -> None:
    fake = FakeVast(pages=[{"instances": [row(5, OTHER, dph=0.3)]}],
                    credits=[10.0, 10.0 - 0.003])
    ev = provider(fake, tmp_path, clock).billing_evidence(TAG, None, 0.4)
    assert not _checks(ev)["other-tailpod-resources"].passed
    assert [line.split(" — ")[0] for line in ev.still_billing] == [
        f"vast.ai bills untracked 5 [{OTHER}] 1x RTX 4090, running, $0.300/h"]
    ok = provider(FakeVast(pages=[{"instances": [row(5, OTHER, dph=0.3)]}],
                           credits=[10.0, 10.0 - 0.003]), tmp_path, clock).billing_evidence(
        TAG, None, 0.4, known_active_tags=[OTHER])
    assert _checks(ok)["other-tailpod-resources"].passed


# -- destroy ---------------------------------------------------------------------------------------

def test_destroy_deletes_the_instance_and_an_instance_already_gone_is_fine(tmp_path: Path) -> None:
    fake = FakeVast(destroy={
        "2": httpx.Response(404),
        "3": httpx.Response(200, json={"success": False, "error": "no_such_instance"}),
        "4": httpx.Response(200, json={"success": False, "error": "not_found"}),
        "5": httpx.Response(204),
        # a 404 is gone whatever its body says
        "6": httpx.Response(404, json={"success": False, "error": "instance_missing"}),
    })
    vp = provider(fake, tmp_path)
    for pod_id in ("1", "2", "3", "4", "5", "6"):
        vp.terminate(pod_id)
    assert fake.deleted == [(i, {}) for i in ("1", "2", "3", "4", "5", "6")]
    assert fake.seen[0].url.path == "/api/v0/instances/1/"


def test_destroy_refused_is_an_error_naming_the_instance_and_the_reason(tmp_path: Path) -> None:
    fake = FakeVast(destroy={"7": httpx.Response(200, json={"success": False,
                                                            "error": "locked",
                                                            "msg": "instance is locked"})})
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).terminate("7")
    assert caught.value.message == "vast.ai refused to destroy 7: locked: instance is locked"
    quoted = FakeVast()
    provider(quoted, tmp_path).terminate("a/b")
    assert quoted.seen[0].url.raw_path == b"/api/v0/instances/a%2Fb/"


def test_destroy_failing_names_the_call(tmp_path: Path) -> None:
    fake = FakeVast(destroy={"8": httpx.Response(400, json={"msg": "bad"})})
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).terminate("8")
    assert str(caught.value) == "vast.ai: destroying instance 8 failed (HTTP 400: bad)"


def test_the_kill_command_is_tailpod_down_or_the_vast_cli(tmp_path: Path) -> None:
    vp = provider(FakeVast(), tmp_path)
    assert vp.kill_command(vp.to_info(row(3, TAG))) == (
        f"tailpod down {TAG}  (or: vastai destroy instance 3)")
    assert vp.kill_command(vp.to_info(row(4, "mine"))) == "vastai destroy instance 4"


def test_get_quotes_the_id_and_names_itself_in_errors(tmp_path: Path) -> None:
    fake = FakeVast(direct={"a/b": None})
    assert provider(fake, tmp_path).get("a/b") is None
    assert fake.seen[0].url.raw_path == b"/api/v0/instances/a%2Fb/?owner=me"

    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"msg": "down"})

    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path)},
                             dotenv_path=tmp_path / "absent.env")
    vp = VastProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(broken),
                      sleep=lambda s: None)
    with pytest.raises(ProviderError) as caught:
        vp.get("9")
    assert str(caught.value) == "vast.ai: reading instance 9 failed (HTTP 500: down)"


def test_a_listing_or_credit_answer_that_is_not_an_object_is_refused_or_unknown(
        tmp_path: Path) -> None:
    with pytest.raises(ProviderError) as caught:
        provider(FakeVast(pages=[["not", "an", "object"]]), tmp_path).list_all()  # type: ignore[list-item]
    assert caught.value.message == "vast.ai: the instance list answer has no `instances` list"

    def odd(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=[1, 2])

    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path)},
                             dotenv_path=tmp_path / "absent.env")
    vp = VastProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(odd),
                      sleep=lambda s: None)
    assert vp.balance() is None


def test_listing_and_credit_failures_name_the_call(tmp_path: Path) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"msg": "down"})

    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path)},
                             dotenv_path=tmp_path / "absent.env")
    vp = VastProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(down),
                      sleep=lambda s: None)
    with pytest.raises(ProviderError) as caught:
        vp.list_all()
    assert str(caught.value) == "vast.ai: listing instances failed (HTTP 500: down)"
    with pytest.raises(ProviderError) as caught:
        vp.balance()
    assert str(caught.value) == "vast.ai: reading the account credit failed (HTTP 500: down)"


def test_a_credit_move_over_no_time_reads_as_a_high_rate(tmp_path: Path, clock: Clock,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With no window at all the elapsed time is floored at 1 ms, never zero: a $0.000001 move
    reads as $3.60/h ($0.000001 / 0.001 s * 3600), far past a $0.40/h pod's tolerance."""
    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path)},
                             dotenv_path=tmp_path / "absent.env")
    vp = VastProvider(settings, timings=replace(TIMINGS, evidence_window_s=0.0),
                      transport=httpx.MockTransport(FakeVast(credits=[10.0, 10.0 - 1e-6])),
                      sleep=clock.sleep)
    check = _checks(vp.billing_evidence(TAG, None, 0.4))["charges-stopped"]
    assert check.passed is False and "over 0.0s (≈$3.6000/h)" in check.detail

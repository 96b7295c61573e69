"""`reconcile` in provision/reconcile.py, walked one rule at a time: a real Ledger in tmp_path, an
in-memory provider whose answers each test scripts, and a fixed `now`. Each test asserts what a
user of `tailpod status` depends on (which rows are ghosts, orphans, unknown; the reasons; the
spend), with every expected value worked out from the scripted answers. Written to kill the
mutants `make mutate` found surviving (docs/testing.md, "#### reconcile()")."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tailpod.errors import ProviderError
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import BillingEvidence, PodInfo, PodSpec, PodState, Provider
from tailpod.provision.reconcile import StatusRow, reconcile

NOW = 1_800_000_000.0  # a fixed clock, far from the real one, so a mutant reading time.time() shows
T1 = "tp-20260101-000000-aaaaaa"
T2 = "tp-20260101-000000-bbbbbb"
T3 = "tp-20260101-000000-cccccc"
DEAD_PID = 99_999_999  # above Linux's largest pid_max (2**22), so never a live process
GONE = "ended outside tailpod (deleted by hand or by the provider)"  # no dead-man switch armed


class Scripted(Provider):
    """Lists `pods`; `listing_error` / `get_error` make those calls fail; `got` records gets."""

    name = "scripted"

    def __init__(self, pods: Iterable[PodInfo] = (), *, listing_error: str | None = None,
                 get_error: str | None = None, by_id: dict[str, PodInfo] | None = None) -> None:
        self.pods = list(pods)
        self.listing_error = listing_error
        self.get_error = get_error
        self.by_id = by_id or {}
        self.got: list[str] = []
        self.listed_with: list[str | None] = []

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Any]:
        return []

    def create(self, spec: PodSpec) -> PodInfo:
        raise AssertionError("reconcile never creates")

    def get(self, pod_id: str) -> PodInfo | None:
        self.got.append(pod_id)
        if self.get_error is not None:
            raise ProviderError(self.get_error)
        return self.by_id.get(pod_id)

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        self.listed_with.append(run_tag)
        if self.listing_error is not None:
            raise ProviderError(self.listing_error)
        return list(self.pods)

    def terminate(self, pod_id: str) -> None:
        raise AssertionError("reconcile never terminates")

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        raise AssertionError("reconcile asks for no evidence")


def _ledger(tmp_path: Path, *records: PodRecord) -> Ledger:
    ledger = Ledger(tmp_path / "home")
    for rec in records:
        ledger.put(rec)
    return ledger


def _rec(tag: str = T1, provider: str = "cloud", **fields: Any) -> PodRecord:
    fields.setdefault("status", "running")
    fields.setdefault("created_at", NOW - 7200.0)
    return PodRecord(run_tag=tag, provider=provider, **fields)


def _row(**fields: Any) -> StatusRow:
    """A row with every field a test does not name at the value an unremarkable row has."""
    base: dict[str, Any] = dict(run_tag=T1, provider="cloud", pod_id=None, ledger_status="running",
                                provider_state=None, gpu=None, gpu_count=1, price_per_hr=None,
                                uptime_s=7200.0, spend_usd=None, ttl_expires_at=None)
    base.update(fields)
    return StatusRow(**base)


# -- a pod the provider lists ---------------------------------------------------------------------

def test_a_listed_pod_joins_its_record_with_the_providers_facts(tmp_path: Path) -> None:
    rec = _rec(pod_id="p1", gpu="A40", gpu_count=1, price_per_hr=0.5, ttl_expires_at=NOW + 60.0)
    rec.extra.fallback_from = "H100"
    ledger = _ledger(tmp_path, rec)
    cloud = Scripted([PodInfo("p1", T1, PodState.RUNNING, gpu_type="L40S", gpu_count=2,
                              price_per_hr=0.79)])
    report = reconcile({"cloud": cloud}, ledger, now=NOW)
    assert cloud.listed_with == [None]  # one listing of every tagged pod, not one per tag
    assert cloud.got == []  # listed: no lookup by id
    assert report.errors == [] and report.checked_at == NOW
    # The provider's card, count and price win over the ledger's; 0.79 $/h for 2 h = 1.58 $.
    assert report.rows == [_row(pod_id="p1", provider_state="running", gpu="L40S", gpu_count=2,
                                price_per_hr=0.79, spend_usd=1.58, ttl_expires_at=NOW + 60.0,
                                fallback_from="H100")]
    assert report.ghosts == [] and report.orphans == [] and report.expired == []


def test_the_first_listed_pod_under_a_tag_is_the_one_shown(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(pod_id=None))
    cloud = Scripted([PodInfo("other", T2, PodState.RUNNING, price_per_hr=9.0),
                      PodInfo("first", T1, PodState.STOPPED, price_per_hr=0.25),
                      PodInfo("second", T1, PodState.RUNNING, price_per_hr=3.0)])
    ledger.put(_rec(T2, pod_id="other", created_at=NOW - 3600.0))
    rows = {r.run_tag: r for r in reconcile({"cloud": cloud}, ledger, now=NOW).rows}
    # The ledger knew no pod id: the listed pod's is shown. 0.25 $/h for 2 h = 0.5 $.
    assert rows[T1] == _row(pod_id="first", provider_state="stopped", price_per_hr=0.25,
                            spend_usd=0.5)
    assert rows[T2] == _row(run_tag=T2, pod_id="other", provider_state="running",
                            price_per_hr=9.0, spend_usd=9.0, uptime_s=3600.0)
    assert len(rows) == 2  # the second pod under T1 is not an orphan: its tag is in the ledger


def test_the_ledgers_facts_stand_where_the_provider_gives_none(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(pod_id="p1", gpu="A40", gpu_count=4, price_per_hr=1.2,
                                    created_at=NOW - 1800.0))
    cloud = Scripted([PodInfo("p1", T1, PodState.PENDING, gpu_type="", gpu_count=0,
                              price_per_hr=None)])
    (row,) = reconcile({"cloud": cloud}, ledger, now=NOW).rows
    # 1.2 $/h for half an hour = 0.6 $.
    assert row == _row(pod_id="p1", provider_state="pending", gpu="A40", gpu_count=4,
                       price_per_hr=1.2, uptime_s=1800.0, spend_usd=0.6)


def test_a_price_of_zero_from_the_provider_is_a_price(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(pod_id="p1", price_per_hr=2.0))
    cloud = Scripted([PodInfo("p1", T1, PodState.RUNNING, price_per_hr=0.0)])
    (row,) = reconcile({"cloud": cloud}, ledger, now=NOW).rows
    assert row.price_per_hr == 0.0 and row.spend_usd == 0.0


def test_spend_is_rounded_to_four_places_and_uptime_never_negative(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(T1, pod_id="p1", price_per_hr=0.33333, created_at=NOW - 100.0),
                     _rec(T2, pod_id="p2", price_per_hr=5.0, created_at=NOW + 50.0))
    cloud = Scripted([PodInfo("p1", T1, PodState.RUNNING), PodInfo("p2", T2, PodState.RUNNING)])
    rows = {r.run_tag: r for r in reconcile({"cloud": cloud}, ledger, now=NOW).rows}
    # 0.33333 * 100 / 3600 = 0.0092591..., to four places 0.0093.
    assert rows[T1].uptime_s == 100.0 and rows[T1].spend_usd == 0.0093
    # Created after `now` (another machine's clock ahead): no time up, nothing spent.
    assert rows[T2].uptime_s == 0.0 and rows[T2].spend_usd == 0.0


def test_no_price_anywhere_is_an_unknown_spend_not_zero(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(pod_id="p1", price_per_hr=None))
    cloud = Scripted([PodInfo("p1", T1, PodState.RUNNING, price_per_hr=None)])
    (row,) = reconcile({"cloud": cloud}, ledger, now=NOW).rows
    assert row.price_per_hr is None and row.spend_usd is None and row.uptime_s == 7200.0


def test_without_now_the_clock_is_read(tmp_path: Path) -> None:
    import time

    ledger = _ledger(tmp_path, _rec(pod_id="p1", created_at=time.time() - 10.0))
    before = time.time()
    report = reconcile({"cloud": Scripted([PodInfo("p1", T1, PodState.RUNNING)])}, ledger)
    after = time.time()
    assert before <= report.checked_at <= after
    (row,) = report.rows
    assert row.uptime_s is not None and 10.0 <= row.uptime_s <= after - before + 10.5


# -- a pod the listing lacks: looked up by id, else a ghost ------------------------------------------

def test_a_pod_missing_from_the_listing_is_looked_up_by_its_id(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(pod_id="p1", price_per_hr=0.5))
    # Some providers list only running pods; `get` still finds a stopped one.
    cloud = Scripted([], by_id={"p1": PodInfo("p1", None, PodState.STOPPED, gpu_type="A6000",
                                              gpu_count=3, price_per_hr=0.1)})
    (row,) = reconcile({"cloud": cloud}, ledger, now=NOW).rows
    assert cloud.got == ["p1"]
    assert row == _row(pod_id="p1", provider_state="stopped", gpu="A6000", gpu_count=3,
                       price_per_hr=0.1, spend_usd=0.2)


def test_a_pod_neither_listed_nor_found_is_a_ghost_that_needs_down(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(pod_id="p1", price_per_hr=0.5))
    cloud = Scripted([PodInfo("x", T2, PodState.RUNNING)])  # another tag only
    ledger.put(_rec(T2, pod_id="x", created_at=NOW - 60.0))
    report = reconcile({"cloud": cloud}, ledger, now=NOW)
    rows = {r.run_tag: r for r in report.rows}
    assert cloud.got == ["p1"]
    # The ledger still bills it at its own price until `down` proves it gone: 0.5 $/h for 2 h.
    assert rows[T1] == _row(pod_id="p1", provider_state="gone", price_per_hr=0.5, spend_usd=1.0,
                            flags=["ghost", GONE], settle=f"tailpod down {T1}")
    assert [r.run_tag for r in report.ghosts] == [T1]
    assert rows[T2].flags == [] and rows[T2].settle is None


def test_a_record_with_no_pod_id_that_is_not_listed_is_a_ghost_without_a_lookup(tmp_path: Path
                                                                                 ) -> None:
    ledger = _ledger(tmp_path, _rec(status="creating"))
    cloud = Scripted([])
    (row,) = reconcile({"cloud": cloud}, ledger, now=NOW).rows
    assert cloud.got == []
    assert row == _row(ledger_status="creating", provider_state="gone", flags=["ghost", GONE],
                       settle=f"tailpod down {T1}")


def test_a_failed_lookup_is_unknown_never_a_ghost(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(pod_id="p1", price_per_hr=0.5))
    cloud = Scripted([], get_error="HTTP 502 from the API")
    report = reconcile({"cloud": cloud}, ledger, now=NOW)
    (row,) = report.rows
    assert row == _row(pod_id="p1", provider_state=None, price_per_hr=0.5, spend_usd=1.0,
                       flags=["lookup failed: HTTP 502 from the API"])
    assert report.ghosts == [] and report.errors == []


def test_a_ghosts_reason_reads_its_dead_man_switch(tmp_path: Path) -> None:
    rec = _rec(pod_id="p1", ttl_expires_at=NOW - 5.0)
    rec.extra.deadman = {"ttl_at": NOW - 5.0, "heartbeat_timeout_s": 600}
    ledger = _ledger(tmp_path, rec)
    (row,) = reconcile({"cloud": Scripted([])}, ledger, now=NOW).rows
    assert row.flags == ["ghost", "ended, most likely by its dead-man switch at its TTL", "expired"]
    assert row.provider_state == "gone" and row.settle == f"tailpod down {T1}"


# -- a provider that cannot be asked ---------------------------------------------------------------

def test_an_unreachable_provider_makes_its_rows_unknown_and_says_why(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(T1, "down", pod_id="p1", price_per_hr=0.5),
                     _rec(T2, "up", pod_id="p2", created_at=NOW - 3600.0))
    down = Scripted([], listing_error="HTTP 503 Service Unavailable")
    up = Scripted([PodInfo("p2", T2, PodState.RUNNING, price_per_hr=1.0)])
    report = reconcile({"down": down, "up": up}, ledger, now=NOW)
    assert report.errors == ["down: HTTP 503 Service Unavailable"]
    rows = {r.run_tag: r for r in report.rows}
    # Never "gone", never "nothing is running": unknown, with the ledger's price still counting.
    assert rows[T1] == _row(provider="down", pod_id="p1", provider_state=None, price_per_hr=0.5,
                            spend_usd=1.0, flags=["provider unreachable"])
    assert down.got == []
    assert rows[T2] == _row(run_tag=T2, provider="up", pod_id="p2", provider_state="running",
                            price_per_hr=1.0, spend_usd=1.0, uptime_s=3600.0)
    assert report.ghosts == [] and report.orphans == []
    out = report.to_json()
    assert out["rate_per_hr_now"] is None
    assert out["rate_unknown_reason"] == "could not ask down: HTTP 503 Service Unavailable"


def test_a_provider_not_configured_is_not_checked_and_not_a_ghost(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(T1, "elsewhere", pod_id="p1"))
    report = reconcile({"cloud": Scripted([])}, ledger, now=NOW)
    (row,) = report.rows
    assert row == _row(provider="elsewhere", pod_id="p1", flags=["provider not checked"])
    assert report.errors == [] and report.ghosts == []


def test_every_provider_that_fails_is_named_in_order(tmp_path: Path) -> None:
    report = reconcile({"a": Scripted(listing_error="timed out"),
                        "b": Scripted([PodInfo("o", None, PodState.RUNNING)]),
                        "c": Scripted(listing_error="HTTP 401")}, _ledger(tmp_path), now=NOW)
    assert report.errors == ["a: timed out", "c: HTTP 401"]
    # b's untagged pod is still an orphan although a and c could not be asked.
    assert [(r.provider, r.run_tag, r.flags) for r in report.rows] == [("b", "?", ["orphan"])]


# -- expired, interrupted, owner -------------------------------------------------------------------

def test_a_ttl_at_now_exactly_has_expired_and_one_a_second_later_has_not(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(T1, pod_id="p1", ttl_expires_at=NOW),
                     _rec(T2, pod_id="p2", ttl_expires_at=NOW + 1.0))
    cloud = Scripted([PodInfo("p1", T1, PodState.RUNNING), PodInfo("p2", T2, PodState.RUNNING)])
    report = reconcile({"cloud": cloud}, ledger, now=NOW)
    rows = {r.run_tag: r for r in report.rows}
    assert rows[T1].flags == ["expired"] and rows[T1].settle == f"tailpod down {T1}"
    assert rows[T2].flags == [] and rows[T2].settle is None
    assert [r.run_tag for r in report.expired] == [T1]


def test_an_operation_whose_owner_died_is_interrupted_and_names_its_owner(tmp_path: Path) -> None:
    host = socket.gethostname()
    ledger = _ledger(tmp_path, _rec(pod_id="p1", operation={"step": "engine start",
                                                            "pid": DEAD_PID, "host": host}))
    (row,) = reconcile({"cloud": Scripted([PodInfo("p1", T1, PodState.RUNNING)])}, ledger,
                       now=NOW).rows
    assert row.flags == ["interrupted during engine start"]
    assert row.settle == f"tailpod down {T1}"
    assert row.owner == f"pid {DEAD_PID} on {host}"


def test_an_operation_on_another_host_is_not_known_to_be_interrupted(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(pod_id="p1", operation={"step": "create", "pid": 42,
                                                            "host": "not-this-host.invalid"}))
    (row,) = reconcile({"cloud": Scripted([PodInfo("p1", T1, PodState.RUNNING)])}, ledger,
                       now=NOW).rows
    assert row.flags == [] and row.settle is None
    assert row.owner == "pid 42 on not-this-host.invalid"


# -- what the ledger holds as ended ------------------------------------------------------------------

def test_ended_records_are_not_rows_but_a_listed_pod_under_one_is_an_orphan(tmp_path: Path
                                                                           ) -> None:
    # The ended records are the oldest, so a live one is read after them.
    ledger = _ledger(tmp_path, _rec(T1, status="terminated", pod_id="p1", price_per_hr=9.0,
                                    created_at=NOW - 9000.0),
                     _rec(T2, status="terminated", pod_id="p2", created_at=NOW - 8000.0),
                     _rec(T3, pod_id="p3", price_per_hr=0.5))
    cloud = Scripted([PodInfo("p3", T3, PodState.RUNNING),
                      PodInfo("p1", T1, PodState.RUNNING, gpu_type="A40", gpu_count=1,
                              price_per_hr=0.4, detail={"created_at": NOW - 900.0})])
    report = reconcile({"cloud": cloud}, ledger, now=NOW)
    # T2 ended and is not listed: no row (no ghost, no spend). T1 ended in the ledger but its pod
    # is still up: an orphan billed at the provider's price, 0.4 $/h for a quarter hour = 0.1 $.
    # T3 is live and listed: its row, and its pod (listed first) is no orphan.
    assert cloud.got == []
    assert report.rows == [_row(run_tag=T3, pod_id="p3", provider_state="running",
                                price_per_hr=0.5, spend_usd=1.0), StatusRow(
        run_tag=T1, provider="cloud", pod_id="p1", ledger_status="terminated",
        provider_state="running", gpu="A40", gpu_count=1, price_per_hr=0.4, uptime_s=900.0,
        spend_usd=0.1, ttl_expires_at=None, flags=["orphan", "ledger says terminated"],
        settle=f"tailpod down {T1}")]
    assert [r.run_tag for r in report.orphans] == [T1]


# -- orphans: listed, not in the ledger --------------------------------------------------------------

def test_orphans_are_shown_with_their_uptime_spend_and_settling_command(tmp_path: Path) -> None:
    cloud = Scripted([
        PodInfo("o1", T3, PodState.RUNNING, gpu_type="H100", gpu_count=8, price_per_hr=2.99,
                detail={"created_at": int(NOW) - 1000}),
        PodInfo("o2", None, PodState.STOPPED, price_per_hr=1.0, detail={"created_at": "yesterday"}),
        PodInfo("o3", "", PodState.UNKNOWN, price_per_hr=None, detail={"created_at": NOW - 60.0}),
    ])
    report = reconcile({"cloud": cloud}, _ledger(tmp_path), now=NOW)
    # 2.99 $/h for 1000 s = 0.83055..., to four places 0.8306.
    assert report.rows == [
        StatusRow(run_tag=T3, provider="cloud", pod_id="o1", ledger_status=None,
                  provider_state="running", gpu="H100", gpu_count=8, price_per_hr=2.99,
                  uptime_s=1000.0, spend_usd=0.8306, ttl_expires_at=None, flags=["orphan"],
                  settle=f"tailpod down {T3}"),
        # A creation time that is not a number: uptime and spend unknown, not zero.
        StatusRow(run_tag="?", provider="cloud", pod_id="o2", ledger_status=None,
                  provider_state="stopped", gpu=None, gpu_count=None, price_per_hr=1.0,
                  uptime_s=None, spend_usd=None, ttl_expires_at=None, flags=["orphan"],
                  settle="tailpod down --all"),
        StatusRow(run_tag="?", provider="cloud", pod_id="o3", ledger_status=None,
                  provider_state="unknown", gpu=None, gpu_count=None, price_per_hr=None,
                  uptime_s=60.0, spend_usd=None, ttl_expires_at=None, flags=["orphan"],
                  settle="tailpod down --all"),
    ]
    assert len(report.orphans) == 3 and report.ghosts == []
    assert all(r.owner is None and r.fallback_from is None for r in report.rows)


def test_an_orphan_with_no_creation_time_has_unknown_uptime(tmp_path: Path) -> None:
    cloud = Scripted([PodInfo("o1", T3, PodState.RUNNING, price_per_hr=0.5)])
    (row,) = reconcile({"cloud": cloud}, _ledger(tmp_path), now=NOW).rows
    assert row.uptime_s is None and row.spend_usd is None and row.flags == ["orphan"]

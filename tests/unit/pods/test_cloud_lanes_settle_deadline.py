"""`down`'s settle step of a lanes run on a rented pod (the final counts read, both lanes and the
proxy stopped by the pod's agent) comes before the pod's terminate, so under `down --timeout` it
spends at most half of what the deadline leaves, each SSH wait and agent call cut to that, and
with too little left it asks the pod nothing (tailpod/pods/cloud_lanes.py settle)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tailpod.config import load_settings
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import cloud_lanes, lanes
from tailpod.provision.apiclient import call_deadline
from tailpod.provision.teardown import run_dir_for

LANES = {"on_pod": True, "admission_limit": 2,
         "haproxy": {"state_dir": "/pod/lanes/proxy", "stats_socket": "/pod/lanes/proxy/s.sock"},
         "lanes": {"spec": {"port": 8001, "state_dir": "/pod/lanes/spec"},
                   "plain": {"port": 8002, "state_dir": "/pod/lanes/plain"}}}
# The first 18 fields of HAProxy's `show stat` CSV, in its order (HAProxy management guide,
# "show stat"), for the two lanes: parse_stats reads svname, scur, smax, stot and status
SHOW_STAT = ("# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,"
             "wretr,wredis,status\n"
             "lanes,spec,0,0,0,2,,7,0,0,0,0,,0,0,0,0,UP\n"
             "lanes,plain,0,0,0,1,,3,0,0,0,0,,0,0,0,0,UP\n")


class ScriptedAgent:
    """The pod's agent: records each call's verb and the timeout it was given."""

    def __init__(self, fail_stop_of: str | None = None) -> None:
        self.calls: list[tuple[str, float]] = []
        self.fail_stop_of = fail_stop_of

    def __enter__(self) -> ScriptedAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def call(self, verb: str, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.calls.append((verb, timeout_s))
        if verb == "proxy stats":
            return {"show_stat": SHOW_STAT}
        if payload.get("state_dir") == self.fail_stop_of:
            raise TailpodError("agent call 'engine stop' timed out")
        return {"stopped": True}


@pytest.fixture()
def pod(tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> tuple[Any, Ledger, PodRecord, list[float], ScriptedAgent]:
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    record = ledger.put(PodRecord(run_tag="tp-lanes-deadline", provider="runpod",
                                  status="running", endpoint="http://tailpod-x:8000",
                                  ssh={"host": "127.0.0.1", "port": 9, "user": "root"},
                                  extra={"lanes": LANES}))
    waits: list[float] = []
    agent = ScriptedAgent()

    def opened(_settings: Any, _record: Any, wait_s: float = 15) -> ScriptedAgent:
        waits.append(wait_s)
        return agent

    monkeypatch.setattr(cloud_lanes, "_agent", opened)
    return settings, ledger, record, waits, agent


def test_without_a_deadline_the_settle_keeps_its_own_timeouts(pod: Any) -> None:
    settings, ledger, record, waits, agent = pod
    settled = cloud_lanes.settle(settings, ledger, record)
    assert waits == [15]
    assert agent.calls == [("proxy stats", 60), ("engine stop", 180), ("engine stop", 180),
                           ("engine stop", 180)]
    assert [p["lane"] for p in settled.extra.lanes_down] == ["spec", "plain", "proxy"]
    saved = json.loads((run_dir_for(settings, record.run_tag) / lanes.LANES_FILE).read_text())
    assert saved["counts_final"] is True
    assert {n: r["requests"] for n, r in saved["lanes"].items()} == {"spec": 7, "plain": 3}


def test_under_a_deadline_every_wait_is_cut_to_half_of_what_is_left(pod: Any) -> None:
    settings, ledger, record, waits, agent = pod
    with call_deadline(time.monotonic() + 40):
        cloud_lanes.settle(settings, ledger, record)
    # half of 40 s: no SSH wait or agent call may be given more than 20 s
    assert 0 < waits[0] <= 15
    assert len(agent.calls) == 4 and all(0 < t <= 20 for _verb, t in agent.calls)
    assert agent.calls[0][1] <= 20 and agent.calls[0][1] > 19  # the counts: 60 cut to ~20


def test_with_too_little_left_the_pod_is_not_asked_and_the_counts_are_not_final(
        pod: Any) -> None:
    settings, ledger, record, waits, agent = pod
    run_dir = run_dir_for(settings, record.run_tag)
    lanes.write_lanes_json(record, run_dir, {"spec": {"stot": 5, "smax": 1},
                                             "plain": {"stot": 2, "smax": 1}})
    with call_deadline(time.monotonic() + 8):  # half is 4 s, under the 5 s a settle needs
        settled = cloud_lanes.settle(settings, ledger, record)
    assert waits == [] and agent.calls == []
    assert "too little to ask the pod" in settled.extra.lanes_down["unknown"]
    saved = json.loads((run_dir / lanes.LANES_FILE).read_text())
    assert saved["counts_final"] is False
    assert {n: r["requests"] for n, r in saved["lanes"].items()} == {"spec": 5, "plain": 2}


def test_one_stop_that_fails_is_its_own_entry_and_the_counts_stay_final(pod: Any) -> None:
    settings, ledger, record, _waits, agent = pod
    agent.fail_stop_of = "/pod/lanes/plain"
    settled = cloud_lanes.settle(settings, ledger, record)
    down = {p["lane"]: p for p in settled.extra.lanes_down}
    assert down["spec"]["stopped"] is True and down["proxy"]["stopped"] is True
    assert down["plain"]["unknown"] == "agent call 'engine stop' timed out"
    saved = json.loads((run_dir_for(settings, record.run_tag) / lanes.LANES_FILE).read_text())
    assert saved["counts_final"] is True

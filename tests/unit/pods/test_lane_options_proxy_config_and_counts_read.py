"""The two-lane deployment's pure steps (pods/lanes.py), each against its exact words and bytes:
`--lanes` and its numbers refused before anything rents, the whole haproxy.cfg, HAProxy's
`show stat` CSV read into per-lane counters, the stats socket found from a record or its config,
lanes.json, and the (K, limit) a decision.json gives. No HAProxy and no engine: each mutant `make
mutate` makes of these functions runs in milliseconds (the slower tests start real processes).
Every expected value is written out by hand."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import lanes
from tailpod.pods.lanes import LaneSpec

TAG = "tp-20260101-000000-aaaaaa"
SPECS = [LaneSpec("spec", 3), LaneSpec("plain", 0)]


# -- --lanes and the lane numbers -----------------------------------------------------------------

@pytest.mark.parametrize("text", ["spec:3,plain", " spec:3 , plain ", "spec:3,plain,", "spec:16,plain",
                                  "spec:1,plain"])
def test_lanes_read_spec_k_then_plain(text: str) -> None:
    k = int(text.split(":")[1].split(",")[0])
    assert lanes.parse_lanes(text) == [LaneSpec("spec", k), LaneSpec("plain", 0)]


@pytest.mark.parametrize("text", ["spec:3", "spec:3,plain,plain", ""])
def test_lanes_that_are_not_two_are_refused_with_the_form(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        lanes.parse_lanes(text)
    assert caught.value.message == f"--lanes takes spec:K,plain; got {text!r}"


@pytest.mark.parametrize("text", ["plain,spec:3", "spec:0,plain", "spec:17,plain", "spec:x,plain",
                                  "spec:,plain", "spec:3,spec", "fast:3,plain"])
def test_a_bad_lane_is_refused_with_k_s_range(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        lanes.parse_lanes(text)
    assert caught.value.message == f"--lanes takes spec:K,plain with K from 1 to 16; got {text!r}"


@pytest.mark.parametrize(("kv", "frac", "port", "spec_k"), [
    (None, None, 8000, 0), (0.5, None, 8000, 3), (None, 0.01, 65533, 0), (None, 0.99, 1, 3),
])
def test_lane_numbers_in_range_pass(kv: float | None, frac: float | None, port: int,
                                    spec_k: int) -> None:
    assert lanes.check_lane_settings(SPECS, port, spec_k, kv, frac) is None


@pytest.mark.parametrize("frac", [0.0, 1.0, -0.5, 1.5, float("nan"), float("inf")])
def test_a_memory_fraction_outside_zero_to_one_is_refused(frac: float) -> None:
    with pytest.raises(ConfigError) as caught:
        lanes.check_lane_settings(SPECS, 8000, 0, None, frac)
    assert caught.value.message == ("--lane-mem-fraction must be a number between 0 and 1 (each "
                                    f"lane's share of GPU memory), got {frac!r}")


@pytest.mark.parametrize("kv", [0.0, -1.0, float("nan"), float("inf")])
def test_a_kv_budget_that_is_not_positive_is_refused(kv: float) -> None:
    with pytest.raises(ConfigError) as caught:
        lanes.check_lane_settings(SPECS, 8000, 0, kv, None)
    assert caught.value.message == f"--lane-kv-gib must be a positive number of GiB, got {kv!r}"


def test_a_port_with_no_room_for_both_lanes_is_refused() -> None:
    # 65534 + 2 lanes = 65536 > 65535; 65533 + 2 = 65535 passed above
    with pytest.raises(ConfigError) as caught:
        lanes.check_lane_settings(SPECS, 65534, 0, None, None)
    assert caught.value.message == ("--port 65534 leaves no room for the lanes: they listen on "
                                    "the 2 ports after the proxy's (up to 65536; the last is "
                                    "65535)")


def test_a_spec_k_other_than_the_lanes_k_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        lanes.check_lane_settings(SPECS, 8000, 4, None, None)
    assert caught.value.message == ("--spec-k 4 disagrees with --lanes spec:3: the spec lane's K "
                                    "comes from --lanes (drop --spec-k)")


def test_a_spec_k_with_no_spec_lane_is_not_compared() -> None:
    assert lanes.check_lane_settings([LaneSpec("plain", 0)], 8000, 4, None, None) is None


# -- haproxy.cfg --------------------------------------------------------------------------------

def test_the_whole_haproxy_config() -> None:
    cfg = lanes.haproxy_config(9000, [("spec", 9001), ("plain", 9002)], 3, "/run/h.sock")
    assert cfg == "\n".join([
        "global",
        "    stats socket /run/h.sock mode 600 level user",
        "    maxconn 8192",
        "defaults",
        "    mode http",
        "    option http-server-close",
        "    http-reuse never",
        "    timeout connect 5s",
        "    timeout client 1h",
        "    timeout server 1h",
        "    timeout queue 1h",
        "frontend lanes_in",
        "    bind 127.0.0.1:9000",
        "    monitor-uri /health",
        "    acl no_lane nbsrv(lanes) lt 1",
        "    monitor fail if no_lane",
        "    default_backend lanes",
        "backend lanes",
        "    balance first",
        "    option httpchk GET /health",
        "    server spec 127.0.0.1:9001 maxconn 3 check inter 2s",
        "    server plain 127.0.0.1:9002 maxconn 1024 check inter 2s",
        "",
    ])


def test_the_config_binds_the_host_and_caps_plain_as_asked() -> None:
    cfg = lanes.haproxy_config(80, [("spec", 81), ("plain", 82)], 1, "s", plain_maxconn=7,
                               host="0.0.0.0")
    assert "    bind 0.0.0.0:80" in cfg.splitlines()
    assert "    server spec 0.0.0.0:81 maxconn 1 check inter 2s" in cfg.splitlines()
    assert "    server plain 0.0.0.0:82 maxconn 7 check inter 2s" in cfg.splitlines()


def test_an_admission_limit_below_one_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        lanes.haproxy_config(9000, [("spec", 9001)], 0, "s")
    assert caught.value.message == "the admission limit must be at least 1"


# -- show stat ------------------------------------------------------------------------------------

STAT = "\n".join([
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,status",
    "lanes,spec,0,2,3,3,3,30,UP",  # the first row after the header is read too
    "lanes_in,FRONTEND,,,1,4,8192,40,OPEN",
    "lanes,FRONTEND,,,1,4,8192,40,OPEN",  # a proxy's own rows are no lane, whatever it is called
    "lanes,plain,1,,0,5,1024,12,DOWN",
    "lanes,BACKEND,0,2,3,8,,42,UP",
    "lanes,short,7",  # a row cut short: the fields it lacks are None
    "other,spec,9,9,9,9,9,9,UP",
    "lanes",
])


def test_show_stat_is_read_per_lane_server() -> None:
    assert lanes.parse_stats(STAT) == {
        "spec": {"scur": 3, "smax": 3, "stot": 30, "qcur": 0, "qmax": 2, "slim": 3,
                 "status": "UP"},
        "plain": {"scur": 0, "smax": 5, "stot": 12, "qcur": 1, "qmax": None, "slim": 1024,
                  "status": "DOWN"},
        "short": {"scur": None, "smax": None, "stot": None, "qcur": 7, "qmax": None,
                  "slim": None, "status": None},
    }


@pytest.mark.parametrize("text", ["", "pxname,svname\nlanes,spec", "#pxname,svname"])
def test_an_answer_without_the_csv_header_is_refused(text: str) -> None:
    with pytest.raises(TailpodError) as caught:
        lanes.parse_stats(text)
    assert caught.value.message == "HAProxy's stats socket answered no CSV"


# -- the stats socket, lanes.json --------------------------------------------------------------

def test_the_socket_is_the_one_the_config_names(tmp_path: Path) -> None:
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text("global\n    stats\n    stats socket /run/x.sock mode 600\n"
                   "    stats socket /run/y.sock\n")
    assert lanes._socket_in_config(cfg) == "/run/x.sock"
    cfg.write_text("global\n    stats socket /run/y.sock\n")  # the path alone after the words
    assert lanes._socket_in_config(cfg) == "/run/y.sock"
    cfg.write_text("global\n    stats socket\n")
    assert lanes._socket_in_config(cfg) is None
    assert lanes._socket_in_config(tmp_path / "absent.cfg") is None


def test_a_short_socket_path_stays_in_the_lanes_directory(tmp_path: Path) -> None:
    home = Path("/h")
    assert lanes._socket_path(home, TAG) == Path("/h/haproxy.sock")
    # 97 bytes is the most: /h/ (3) + 81 x's + /haproxy.sock (13) = 97
    fits = Path("/h/" + "x" * 81)
    assert len(str(fits / "haproxy.sock")) == 97
    assert lanes._socket_path(fits, TAG) == fits / "haproxy.sock"


def test_a_long_socket_path_moves_to_a_private_temp_directory(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    long_home = Path("/h/" + "x" * 82)  # 98 bytes with /haproxy.sock
    short = tmp_path / f"tailpod-lanes-{os.getuid()}"
    short.mkdir(mode=0o755)
    assert lanes._socket_path(long_home, TAG) == short / f"{TAG}.sock"
    assert short.stat().st_mode & 0o777 == 0o700


@pytest.fixture
def stats_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """read_stats answers one count per socket path it is given (the path logged), or raises
    what a path named `oserror`/`nocsv` stands for."""
    asked: list[str] = []

    def read_stats(sock: str) -> dict[str, dict[str, Any]]:
        asked.append(str(sock))
        if str(sock).endswith("oserror"):
            raise OSError("connection refused")
        if str(sock).endswith("nocsv"):
            raise TailpodError("HAProxy's stats socket answered no CSV")
        return {"spec": {"stot": len(asked), "smax": 1}}

    monkeypatch.setattr(lanes, "read_stats", read_stats)
    return asked


def test_counts_are_read_from_the_records_socket(tmp_path: Path, stats_read: list[str]) -> None:
    sock = tmp_path / "h.sock"
    sock.write_text("")
    record = PodRecord(run_tag=TAG, provider="local",
                       extra={"lanes": {"haproxy": {"stats_socket": str(sock)}}})
    settings: Any = SimpleNamespace(home=tmp_path / "home")  # its haproxy.cfg is not read
    assert lanes.lane_counts(record, settings) == {"spec": {"stot": 1, "smax": 1}}
    assert stats_read == [str(sock)]


def test_a_record_that_lost_its_lanes_reads_the_socket_its_config_names(
        tmp_path: Path, stats_read: list[str]) -> None:
    sock = tmp_path / "cfg.sock"
    sock.write_text("")
    cfg = tmp_path / "home" / "lanes" / TAG / "haproxy.cfg"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f"global\n    stats socket {sock} mode 600 level user\n")
    settings: Any = SimpleNamespace(home=tmp_path / "home")
    record = PodRecord(run_tag=TAG, provider="local")
    assert lanes.lane_counts(record, settings) == {"spec": {"stot": 1, "smax": 1}}
    assert stats_read == [str(sock)]
    assert lanes.lane_counts(record) is None  # no settings: no config to look in
    assert stats_read == [str(sock)]


@pytest.mark.parametrize("name", ["oserror", "nocsv"])
def test_a_proxy_that_does_not_answer_gives_no_counts(tmp_path: Path, stats_read: list[str],
                                                      name: str) -> None:
    sock = tmp_path / name
    sock.write_text("")
    record = PodRecord(run_tag=TAG, provider="local",
                       extra={"lanes": {"haproxy": {"stats_socket": str(sock)}}})
    assert lanes.lane_counts(record) is None
    assert stats_read == [str(sock)]


def test_lanes_json_reads_the_counts_when_none_are_given(tmp_path: Path,
                                                          stats_read: list[str]) -> None:
    sock = tmp_path / "h.sock"
    sock.write_text("")
    record = PodRecord(run_tag=TAG, provider="local",
                       extra={"lanes": {"haproxy": {"stats_socket": str(sock)},
                                        "lanes": {"spec": {"port": 9001}}}})
    out = json.loads(lanes.write_lanes_json(record, tmp_path / "run").read_text())
    assert stats_read == [str(sock)]
    assert (out["lanes"]["spec"]["requests"], out["lanes"]["spec"]["max_in_flight"]) == (1, 1)
    assert out["counts_source"] == "haproxy stats socket (show stat: stot, smax)"


def test_no_counts_without_a_socket_that_exists(tmp_path: Path) -> None:
    record = PodRecord(run_tag=TAG, provider="local",
                       extra={"lanes": {"haproxy": {"stats_socket": str(tmp_path / "gone")}}})
    assert lanes.lane_counts(record) is None
    assert lanes.lane_counts(PodRecord(run_tag=TAG, provider="local")) is None


def test_lanes_json_holds_each_lanes_facts_and_final_counts(tmp_path: Path) -> None:
    lane_rows: dict[str, Any] = {
        "spec": {"port": 9001, "budget": {"mem_fraction": 0.4}, "engine_config": {"k": 3},
                 "startup": {"kv_tokens": 100}, "startup_s": 12.5, "started_after": None,
                 "pid": 77},
        "plain": {"port": 9002},
    }
    record = PodRecord(run_tag=TAG, provider="local", endpoint="http://127.0.0.1:9000",
                       extra={"lanes": {"admission_limit": 3, "haproxy": {"pid": 5},
                                        "lanes": lane_rows, "gate": {"passed": True}}})
    counts = {"spec": {"stot": 30, "smax": 3}, "plain": {"stot": 12}}
    before = time.time()
    path = lanes.write_lanes_json(record, tmp_path / "a" / "run", counts=counts, final=True)
    assert path == tmp_path / "a" / "run" / "lanes.json"  # the missing parents made
    text = path.read_text()
    assert text.startswith('{\n  "admission_limit": 3,\n  "counted_at": ')  # 2-space indent
    assert text.endswith("}\n")
    out = json.loads(text)
    counted_at = out.pop("counted_at")
    assert before <= counted_at <= time.time()
    assert out == {
        "run_tag": TAG, "endpoint": "http://127.0.0.1:9000", "admission_limit": 3,
        "haproxy": {"pid": 5},
        "lanes": {
            "spec": {"port": 9001, "budget": {"mem_fraction": 0.4}, "engine_config": {"k": 3},
                     "startup": {"kv_tokens": 100}, "startup_s": 12.5, "started_after": None,
                     "requests": 30, "max_in_flight": 3},
            "plain": {"port": 9002, "budget": None, "engine_config": None, "startup": None,
                      "startup_s": None, "started_after": None, "requests": 12,
                      "max_in_flight": None},
        },
        "counts_source": "haproxy stats socket (show stat: stot, smax)",
        "counts_final": True,
        "gate": {"passed": True},
    }
    assert list(json.loads(text)) == sorted(json.loads(text))  # sorted keys


def test_lanes_json_without_counts_says_none_were_read(tmp_path: Path) -> None:
    record = PodRecord(run_tag=TAG, provider="local",
                       extra={"lanes": {"lanes": {"spec": {"port": 9001}}}})
    out = json.loads(lanes.write_lanes_json(record, tmp_path, counts=None, final=True)
                     .read_text())
    assert (out["counted_at"], out["counts_source"], out["counts_final"]) == (None, None, False)
    assert out["lanes"]["spec"]["requests"] is None and "gate" not in out
    assert out["admission_limit"] is None and out["haproxy"] is None


def test_lanes_json_with_counts_not_final(tmp_path: Path) -> None:
    record = PodRecord(run_tag=TAG, provider="local", extra={"lanes": {"gate": {}}})
    out = json.loads(lanes.write_lanes_json(record, tmp_path, counts={}).read_text())
    # an empty read is still a read: counted, from no server
    assert (out["counts_final"], out["counts_source"], out["lanes"]) == (False, None, {})
    assert out["counted_at"] is not None and "gate" not in out


# -- decision.json --------------------------------------------------------------------------------

def test_a_two_lane_decision_gives_k_and_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.results import deployment

    decisions = {Path("d.json"): {"kind": "lanes", "lanes": [{"k": "4"}, {"k": 0}],
                                  "admission_limit": 6.0}}
    monkeypatch.setattr(deployment, "read_decision", decisions.__getitem__)
    assert lanes.limit_from_decision(Path("d.json")) == (4, 6)


def test_a_decision_that_is_not_two_lanes_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.results import deployment

    monkeypatch.setattr(deployment, "read_decision", lambda path: {"kind": "static"})
    with pytest.raises(ConfigError) as caught:
        lanes.limit_from_decision(Path("d.json"))
    assert caught.value.message == "d.json: the deployment is 'static', not two lanes"
    assert caught.value.hint == "a static deployment needs no proxy: `tailpod up --spec-k K`"


# -- lanes.json at `down`: final counts, or the old ones said not final ---------------------------

def down_settings(tmp_path: Path) -> Any:
    return SimpleNamespace(home=tmp_path / "home", results_dir=tmp_path / "results")


def lanes_record(sock: Path | None = None) -> PodRecord:
    haproxy = {"stats_socket": str(sock)} if sock else {"pid": 5}
    return PodRecord(run_tag=TAG, provider="local", endpoint="http://127.0.0.1:9000",
                     extra={"lanes": {"admission_limit": 2, "haproxy": haproxy,
                                      "lanes": {"spec": {"port": 9001}, "plain": {"port": 9002}}}})


def test_counts_given_at_down_are_written_final(tmp_path: Path) -> None:
    settings = down_settings(tmp_path)
    path = tmp_path / "results" / TAG / "lanes.json"
    out = lanes.record_final_counts(settings, lanes_record(),
                                    counts={"spec": {"stot": 9, "smax": 2}}, read=False)
    assert out == {"counts_final": True, "lanes_json": str(path)}
    doc = json.loads(path.read_text())
    assert (doc["counts_final"], doc["lanes"]["spec"]["requests"],
            doc["lanes"]["spec"]["max_in_flight"], doc["lanes"]["plain"]["requests"]) == \
        (True, 9, 2, None)


def test_counts_are_read_at_down_from_the_records_socket(tmp_path: Path,
                                                         stats_read: list[str]) -> None:
    sock = tmp_path / "h.sock"
    sock.write_text("")
    out = lanes.record_final_counts(down_settings(tmp_path), lanes_record(sock))
    assert out["counts_final"] is True and stats_read == [str(sock)]
    doc = json.loads((tmp_path / "results" / TAG / "lanes.json").read_text())
    assert doc["lanes"]["spec"]["requests"] == 1


def test_counts_not_read_when_told_not_to(tmp_path: Path, stats_read: list[str]) -> None:
    sock = tmp_path / "h.sock"
    sock.write_text("")
    path = tmp_path / "results" / TAG / "lanes.json"
    out = lanes.record_final_counts(down_settings(tmp_path), lanes_record(sock), read=False)
    # no lanes.json yet: the record's facts, no counts, not final
    assert out == {"counts_final": False, "lanes_json": str(path)}
    assert stats_read == []
    doc = json.loads(path.read_text())
    assert (doc["counts_final"], doc["counts_source"], doc["lanes"]["spec"]["requests"]) == \
        (False, None, None)
    assert doc["admission_limit"] == 2


@pytest.mark.parametrize("written", [None, "{not json"])
def test_no_record_lanes_and_no_readable_lanes_json_writes_nothing(tmp_path: Path,
                                                                   written: str | None) -> None:
    path = tmp_path / "results" / TAG / "lanes.json"
    if written is not None:
        path.parent.mkdir(parents=True)
        path.write_text(written)
    out = lanes.record_final_counts(down_settings(tmp_path), PodRecord(run_tag=TAG,
                                                                       provider="local"))
    assert out == {"counts_final": False, "lanes_json": None}
    assert (path.read_text() if written is not None else path.exists()) == (written or False)


def test_unread_counts_leave_the_old_ones_said_not_final(tmp_path: Path) -> None:
    path = tmp_path / "results" / TAG / "lanes.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"lanes": {"spec": {"requests": 4}}, "counts_final": True,
                                "run_tag": TAG}))
    before = path.read_text()
    record = PodRecord(run_tag=TAG, provider="local")  # lost extra.lanes: no socket to read
    # final already (a second down): left as it is
    assert lanes.record_final_counts(down_settings(tmp_path), record) == \
        {"counts_final": True, "lanes_json": str(path)}
    assert path.read_text() == before
    # not final: said so, the old counts kept
    path.write_text(json.dumps({"lanes": {"spec": {"requests": 4}}, "run_tag": TAG}))
    assert lanes.record_final_counts(down_settings(tmp_path), record) == \
        {"counts_final": False, "lanes_json": str(path)}
    assert path.read_text() == ('{\n  "counts_final": false,\n  "lanes": {\n    "spec": {\n'
                                '      "requests": 4\n    }\n  },\n  "run_tag": "' + TAG
                                + '"\n}\n')


def test_a_lost_record_updates_the_lanes_json_written_at_up(tmp_path: Path,
                                                            stats_read: list[str]) -> None:
    """`down --all` adopted the proxy without extra.lanes: the socket from the lanes directory's
    haproxy.cfg, the counts into the lanes.json that `up` wrote."""
    settings = down_settings(tmp_path)
    sock = tmp_path / "cfg.sock"
    sock.write_text("")
    cfg = tmp_path / "home" / "lanes" / TAG / "haproxy.cfg"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f"global\n    stats socket {sock} mode 600 level user\n")
    path = tmp_path / "results" / TAG / "lanes.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"lanes": {"spec": {"requests": None, "port": 9001},
                                          "plain": {"requests": 3, "max_in_flight": 1}},
                                "counts_final": False, "counts_source": None}))
    before = time.time()
    out = lanes.record_final_counts(settings, PodRecord(run_tag=TAG, provider="local"))
    assert out == {"counts_final": True, "lanes_json": str(path)}
    assert stats_read == [str(sock)]
    text = path.read_text()
    assert text.startswith('{\n  "counted_at": ') and text.endswith("}\n")
    doc = json.loads(text)
    assert before <= doc.pop("counted_at") <= time.time()
    assert doc == {"lanes": {"spec": {"requests": 1, "max_in_flight": 1, "port": 9001},
                             "plain": {"requests": None, "max_in_flight": None}},
                   "counts_final": True,
                   "counts_source": "haproxy stats socket (show stat: stot, smax)"}


# -- status: each lane alive, healthy, counted; the proxy alive -----------------------------------

@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Each lane's engine state by its state_dir's name (None: no state), which pids run, which
    ports answer health (and at what path), and the proxy's state."""
    world: dict[str, Any] = {"states": {}, "running": set(), "healthy": set(), "asked": [],
                             "proxy": None, "homes": [], "stopped": [], "stays": set(),
                             "open": set(), "ports_asked": []}

    def read_state(path: Path) -> dict[str, Any] | None:
        state: dict[str, Any] | None = world["states"].get(path.name)
        return state

    def is_running(state: dict[str, Any]) -> bool:
        return state["pid"] in world["running"]

    def healthy(host: str, port: int, path: str) -> bool:
        world["asked"].append((host, port, path))
        return (port, path) in world["healthy"]

    class Local:
        def __init__(self, home: Path) -> None:
            world["homes"].append(home)

        def engine_state(self, run_tag: str) -> dict[str, Any] | None:
            return world["proxy"] if run_tag == TAG else None

    def stop(state: dict[str, Any]) -> bool:
        world["stopped"].append(state["pgid"])
        return state["pgid"] not in world["stays"]

    def port_open(host: str, port: int) -> bool:
        world["ports_asked"].append((host, port))
        return port in world["open"]

    monkeypatch.setattr(lanes.engine, "stop", stop)
    monkeypatch.setattr(lanes.engine, "port_open", port_open)
    monkeypatch.setattr(lanes.engine, "read_state", read_state)
    monkeypatch.setattr(lanes.engine, "is_running", is_running)
    monkeypatch.setattr(lanes.engine, "healthy", healthy)
    monkeypatch.setattr(lanes, "LocalProvider", Local)
    return world


def test_status_of_a_run_without_lanes_is_none(tmp_path: Path, engines: dict[str, Any]) -> None:
    assert lanes.lanes_status(down_settings(tmp_path), PodRecord(run_tag=TAG,
                                                                 provider="local")) is None


def test_status_reads_each_lane_and_the_proxy(tmp_path: Path, engines: dict[str, Any],
                                              stats_read: list[str]) -> None:
    sock = tmp_path / "h.sock"
    sock.write_text("")
    engines["states"] = {"spec-dir": {"pid": 11, "health_path": "/ready"},
                         "plain-dir": {"pid": 12}, "gone-dir": {"pid": 13}}
    engines["running"] = {11, 12, 20}
    engines["healthy"] = {(9001, "/ready")}  # plain runs but its /health does not answer
    engines["proxy"] = {"pid": 20}
    record = PodRecord(run_tag=TAG, provider="local", endpoint="http://127.0.0.1:9000",
                       extra={"lanes": {"admission_limit": 2,
                                        "haproxy": {"stats_socket": str(sock)},
                                        "lanes": {"spec": {"port": 9001, "state_dir": "/x/spec-dir"},
                                                  "plain": {"port": "9002",
                                                            "state_dir": "/x/plain-dir"},
                                                  "old": {"port": 9003,
                                                          "state_dir": "/x/gone-dir"},
                                                  "lost": {"port": 9004,
                                                           "state_dir": "/x/none"}}}})
    settings = down_settings(tmp_path)
    assert lanes.lanes_status(settings, record) == {
        "admission_limit": 2,
        "proxy": {"endpoint": "http://127.0.0.1:9000", "alive": True},
        "lanes": {
            "spec": {"port": 9001, "alive": True, "healthy": True, "requests": 1,
                     "in_flight": None, "proxy_status": None},
            "plain": {"port": "9002", "alive": True, "healthy": False, "requests": None,
                      "in_flight": None, "proxy_status": None},
            "old": {"port": 9003, "alive": False, "healthy": False, "requests": None,
                    "in_flight": None, "proxy_status": None},
            "lost": {"port": 9004, "alive": False, "healthy": False, "requests": None,
                     "in_flight": None, "proxy_status": None},
        },
    }
    # health asked only of the running lanes, on the loopback, at each one's own path
    assert engines["asked"] == [("127.0.0.1", 9001, "/ready"), ("127.0.0.1", 9002, "/health")]
    assert engines["homes"] == [settings.home]


def test_status_gives_the_proxys_counts_per_lane(tmp_path: Path, engines: dict[str, Any],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lanes, "lane_counts", lambda record: {
        "spec": {"stot": 30, "scur": 2, "status": "UP"}})
    engines["states"] = {"spec-dir": {"pid": 11}}
    record = PodRecord(run_tag=TAG, provider="local",
                       extra={"lanes": {"lanes": {"spec": {"port": 9001,
                                                           "state_dir": "/x/spec-dir"}}}})
    status = lanes.lanes_status(down_settings(tmp_path), record)
    assert status is not None
    assert status["lanes"]["spec"] == {"port": 9001, "alive": False, "healthy": False,
                                       "requests": 30, "in_flight": 2, "proxy_status": "UP"}
    assert status["proxy"] == {"endpoint": None, "alive": False}
    assert status["admission_limit"] is None


def test_status_with_no_counts_says_none(tmp_path: Path, engines: dict[str, Any],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lanes, "lane_counts", lambda record: None)
    engines["proxy"] = {"pid": 20}  # a state, but its process is gone
    record = PodRecord(run_tag=TAG, provider="local",
                       extra={"lanes": {"lanes": {"spec": {"port": 9001, "state_dir": "/x/n"}}}})
    status = lanes.lanes_status(down_settings(tmp_path), record)
    assert status is not None and status["proxy"]["alive"] is False
    assert status["lanes"]["spec"]["requests"] is None


# -- stopping the lanes at `down`: each proven gone, or the run is not settled -------------------

def lanes_to_stop() -> PodRecord:
    return PodRecord(run_tag=TAG, provider="local",
                     extra={"lanes": {"lanes": {
                         "never": {"state_dir": "/x/none"},  # first: the others still stopped
                         "spec": {"state_dir": "/x/spec-dir"},
                         "plain": {"state_dir": "/x/plain-dir"}}}})


def test_every_lane_is_stopped_and_proven_gone(tmp_path: Path, engines: dict[str, Any]) -> None:
    engines["states"] = {"spec-dir": {"pgid": 101, "port": 9001},
                         "plain-dir": {"pgid": 102, "port": "9002"}}
    engines["open"] = {9002}  # plain's group is gone but its port still answers
    assert lanes.stop_lanes(down_settings(tmp_path), lanes_to_stop()) == [
        {"lane": "never", "gone": True, "detail": "never started"},
        {"lane": "spec", "gone": True, "pgid": 101, "port_closed": True},
        {"lane": "plain", "gone": True, "pgid": 102, "port_closed": False},
    ]
    assert engines["stopped"] == [101, 102]
    assert engines["ports_asked"] == [("127.0.0.1", 9001), ("127.0.0.1", 9002)]


def test_a_lane_that_outlives_its_stop_is_named_with_its_kill(tmp_path: Path,
                                                              engines: dict[str, Any]) -> None:
    engines["states"] = {"spec-dir": {"pgid": 101, "port": 9001},
                         "plain-dir": {"pgid": 102, "port": 9002}}
    engines["stays"] = {101, 102}
    with pytest.raises(TailpodError) as caught:
        lanes.stop_lanes(down_settings(tmp_path), lanes_to_stop())
    assert caught.value.message == ("lane engines still alive: lane spec: kill -9 -101; "
                                    "lane plain: kill -9 -102")
    assert engines["stopped"] == [101, 102]  # the second is still tried after the first


def test_a_run_without_lanes_stops_nothing(tmp_path: Path, engines: dict[str, Any]) -> None:
    assert lanes.stop_lanes(down_settings(tmp_path), PodRecord(run_tag=TAG,
                                                               provider="local")) == []
    assert lanes.stop_lanes(down_settings(tmp_path), PodRecord(
        run_tag=TAG, provider="local", extra={"lanes": {"admission_limit": 2}})) == []


# -- settle_lanes: the one path of every `down` of a lanes run ------------------------------------

@pytest.fixture
def settle_steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    steps: list[str] = []
    # each step logs the run and the settings' home it was given
    monkeypatch.setattr(lanes, "record_final_counts", lambda settings, record: steps.append(
        f"count {record.run_tag} {settings.home.name}")
        or {"counts_final": True, "lanes_json": "/r/lanes.json"})
    monkeypatch.setattr(lanes, "stop_lanes", lambda settings, record: steps.append(
        f"stop {record.run_tag} {settings.home.name}") or [{"lane": "spec", "gone": True}])
    return steps


def settle_ledger(tmp_path: Path, record: PodRecord) -> Ledger:
    home = tmp_path / "state"
    home.mkdir(mode=0o700)
    ledger = Ledger(home)
    ledger.put(record)
    return ledger


def test_a_lanes_run_is_counted_then_stopped_and_the_ledger_told(
        tmp_path: Path, settle_steps: list[str]) -> None:
    record = PodRecord(run_tag=TAG, provider="local", status="running",
                       extra={"lanes": {"admission_limit": 2}})
    ledger = settle_ledger(tmp_path, record)
    settled = lanes.settle_lanes(down_settings(tmp_path), ledger, record)
    assert settle_steps == [f"count {TAG} home", f"stop {TAG} home"]
    assert settled.extra.lanes_down == [{"lane": "spec", "gone": True}]
    assert settled.extra.lanes_counts == {"counts_final": True, "lanes_json": "/r/lanes.json"}
    assert settled.extra.lanes == {"admission_limit": 2}
    stored = ledger.get(TAG)
    assert stored is not None and stored.events[-1]["event"] == "lanes-stopped"
    assert stored.extra.lanes_down == [{"lane": "spec", "gone": True}]


def test_a_lost_record_with_a_lanes_directory_is_settled_too(tmp_path: Path,
                                                             settle_steps: list[str]) -> None:
    (tmp_path / "home" / "lanes" / TAG).mkdir(parents=True)
    record = PodRecord(run_tag=TAG, provider="local", status="running")
    settled = lanes.settle_lanes(down_settings(tmp_path), settle_ledger(tmp_path, record), record)
    assert settle_steps == [f"count {TAG} home", f"stop {TAG} home"]
    assert settled.extra.lanes_down == [{"lane": "spec", "gone": True}]


@pytest.mark.parametrize(("provider", "lanes_extra"), [("local", None), ("runpod", {"a": 1})])
def test_a_run_that_is_no_local_lanes_run_is_returned_as_it_is(
        tmp_path: Path, settle_steps: list[str], provider: str,
        lanes_extra: dict[str, Any] | None) -> None:
    extra = {"lanes": lanes_extra} if lanes_extra else {}
    record = PodRecord(run_tag=TAG, provider=provider, status="running", extra=extra)
    (tmp_path / "home" / "lanes").mkdir(parents=True)  # another run's lanes: not this one's
    ledger = settle_ledger(tmp_path, record)
    assert lanes.settle_lanes(down_settings(tmp_path), ledger, record) is record
    assert settle_steps == []

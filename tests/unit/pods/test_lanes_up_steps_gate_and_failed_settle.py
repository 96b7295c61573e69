"""A lanes `up` step by step (pods/lanes.py `up_lanes`): the lanes one after the other, each
healthy before the next, then HAProxy; the ledger told at each step, with the settings' TTL; the
token-identity gate's verdict; and on any failure every process it started stopped, the record
`terminated` only when every lane is proven gone (else `failed`, for `down`). Also the gate's
request and verdict words, the HAProxy binary looked up, its config checked and its version read.

No engine and no HAProxy: the local provider, the engine's health wait, its process groups, the
ports and the clock are the test's, so each mutant `make mutate` makes of these functions runs in
milliseconds (tests/unit/pods/test_lanes_up_failure_and_local_ttl.py starts real processes).
Every expected value is written out by hand from what is planted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tailpod.agent.bootstrap.start_error import EngineStartError
from tailpod.config import load_settings
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger
from tailpod.pods import lanes
from tailpod.pods.lanes import LaneGateFailed, LaneLaunch

TAG = "tp-20260101-000000-aaaaaa"
NOW = 1_000_000.0
BINARY = "/opt/haproxy/sbin/haproxy"
FRONT, SPEC_PORT, PLAIN_PORT = 9000, 9001, 9002


class World:
    """What the fakes were asked, and how they answer."""

    def __init__(self) -> None:
        self.homes: list[Path] = []
        self.created: list[dict[str, Any]] = []
        self.states: dict[str, dict[str, Any]] = {}  # run tag -> engine state
        self.terminated: list[str] = []
        self.waited: list[tuple[str, str, float, Any, Any]] = []
        self.fail_health: dict[int, EngineStartError] = {}  # port -> the wait's error
        self.took = {SPEC_PORT: 11.5, PLAIN_PORT: 9.25, FRONT: 0.75}
        self.alive: set[int] = set()  # pgids that outlive their stop
        self.open_ports: set[int] = set()
        self.ports_asked: list[int] = []
        self.checked: list[tuple[str, Path]] = []
        self.terminate_error: set[str] = set()
        self.ledger: Ledger | None = None  # read at each create: the record's operation then
        self.operations: list[str | None] = []


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    w = World()

    class Local:
        def __init__(self, home: Path) -> None:
            self.home = Path(home)
            w.homes.append(self.home)

        def state_dir(self, run_tag: str) -> Path:
            return self.home / "local" / run_tag

        @staticmethod
        def pod_id_for(run_tag: str) -> str:
            return f"local:{run_tag}"

        def create(self, spec: Any) -> Any:
            port = spec.ports[0]
            log = self.state_dir(spec.run_tag) / "engine.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_bytes(f"engine on {port}\nready ".encode() + b"\xff\n")  # one bad byte
            w.created.append({"home": self.home, "run_tag": spec.run_tag, "argv": spec.start_command,
                              "env": spec.env, "ports": spec.ports, "image": spec.image,
                              "gpus": spec.gpu_preference})
            w.states[spec.run_tag] = {"log": str(log), "pgid": port * 10, "port": port}
            if w.ledger is not None:
                held = w.ledger.get(TAG)
                w.operations.append(held.operation.get("step") if held else None)
            return SimpleNamespace(endpoint=f"http://127.0.0.1:{port}",
                                   pod_id=f"local:{spec.run_tag}")

        def engine_state(self, run_tag: str) -> dict[str, Any] | None:
            state = w.states.get(run_tag)
            return None if state is None else dict(state)

        def terminate(self, pod_id: str) -> None:
            w.terminated.append(pod_id)
            if pod_id in w.terminate_error:
                raise TailpodError(f"{pod_id} would not stop")

    def wait_healthy(state: dict[str, Any], timeout: float, progress: Any = None,
                     poll: Any = None) -> float:
        w.waited.append((state["log"], state.get("health_path", "-"), timeout, progress, poll))
        if state["port"] in w.fail_health:
            raise w.fail_health[state["port"]]
        return w.took[state["port"]]

    def port_open(host: str, port: int) -> bool:
        assert host == "127.0.0.1"
        w.ports_asked.append(port)
        return port in w.open_ports

    monkeypatch.setattr(lanes, "LocalProvider", Local)
    monkeypatch.setattr(lanes.engine, "wait_healthy", wait_healthy)
    monkeypatch.setattr(lanes.engine, "port_open", port_open)
    monkeypatch.setattr(lanes.engine, "group_alive", lambda pgid: pgid in w.alive)
    monkeypatch.setattr(lanes, "_haproxy", lambda: BINARY)
    monkeypatch.setattr(lanes, "_check_config", lambda b, p: w.checked.append((b, p)))
    monkeypatch.setattr(lanes, "_haproxy_version", lambda b: f"HAProxy version 2.8 at {b}")
    monkeypatch.setattr(lanes, "new_run_tag", lambda: TAG)
    monkeypatch.setattr(lanes, "time", SimpleNamespace(time=lambda: NOW))
    return w


@pytest.fixture
def settings(tmp_path: Path) -> Any:
    return load_settings(env={"TAILPOD_HOME": str(tmp_path / "home"), "TAILPOD_TTL_HOURS": "0.5",
                              "TAILPOD_STARTUP_TIMEOUT": "321",
                              "TAILPOD_RESULTS_DIR": str(tmp_path / "results")},
                         dotenv_path=tmp_path / "absent.env")


def launches() -> list[LaneLaunch]:
    return [LaneLaunch("spec", ["engine", "--k", "3"], SPEC_PORT, env={"A": "1"},
                       health_path="/v1/health", budget={"mem_fraction": 0.45},
                       served_model="m-spec", engine_config={"k": 3},
                       parse_startup=lambda text: {"lines": text.splitlines()}),
            LaneLaunch("plain", ["engine"], PLAIN_PORT, budget={"mem_fraction": 0.45},
                       served_model="m-plain", engine_config={"k": 0})]


def new_ledger(settings: Any) -> Ledger:
    settings.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Ledger(settings.state_dir)


def lane_row(settings: Any, name: str, port: int) -> dict[str, Any]:
    spec = name == "spec"
    return {"port": port, "endpoint": f"http://127.0.0.1:{port}", "pod_id": f"local:{TAG}-{name}",
            "state_dir": str(settings.home / "lanes" / TAG / "local" / f"{TAG}-{name}"),
            "argv": ["engine", "--k", "3"] if spec else ["engine"],
            "budget": {"mem_fraction": 0.45}, "engine_config": {"k": 3 if spec else 0},
            "startup": {"lines": [f"engine on {port}", "ready \ufffd"]} if spec else {},
            "startup_s": 11.5 if spec else 9.25, "started_after": f"{TAG}-spec" if not spec else None}


# -- the steps of a good `up` ---------------------------------------------------------------------

def test_lanes_start_one_after_the_other_then_the_proxy_and_the_ledger_holds_each(
        world: World, settings: Any, tmp_path: Path) -> None:
    ledger = new_ledger(settings)
    world.ledger = ledger
    progress = object()
    record = lanes.up_lanes(settings, ledger, launches(), 2, FRONT, progress,  # type: ignore[arg-type]
                            engine_cfg={"model": "m"}, run_dir=tmp_path / "run",
                            startup_timeout_s=45.0, gpu="NVIDIA L4", gpu_count=1)
    lanes_dir = settings.home / "lanes" / TAG
    assert world.homes == [lanes_dir, settings.home]
    assert world.ports_asked == [FRONT, SPEC_PORT, PLAIN_PORT]
    assert world.created == [
        {"home": lanes_dir, "run_tag": f"{TAG}-spec", "argv": ["engine", "--k", "3"],
         "env": {"A": "1", "TAILPOD_ARM_LABEL": "spec"}, "ports": [SPEC_PORT], "image": "local",
         "gpus": []},
        {"home": lanes_dir, "run_tag": f"{TAG}-plain", "argv": ["engine"],
         "env": {"TAILPOD_ARM_LABEL": "plain"}, "ports": [PLAIN_PORT], "image": "local",
         "gpus": []},
        {"home": settings.home, "run_tag": TAG,
         "argv": [BINARY, "-db", "-f", str(lanes_dir / "haproxy.cfg")],
         "env": {"TAILPOD_ARM_LABEL": "haproxy"}, "ports": [FRONT], "image": "local",
         "gpus": []}]
    assert [(w[1], w[2], w[3], w[4]) for w in world.waited] == [
        ("/v1/health", 45.0, progress, None), ("/health", 45.0, progress, None),
        ("-", 30.0, progress, 0.2)]
    cfg = (lanes_dir / "haproxy.cfg").read_text()
    sock = lanes._socket_path(lanes_dir, TAG)  # tmp_path is too long for a socket's path
    assert f"    stats socket {sock} mode 600 level user" in cfg.splitlines()
    assert "    bind 127.0.0.1:9000" in cfg.splitlines()
    assert "    server spec 127.0.0.1:9001 maxconn 2 check inter 2s" in cfg.splitlines()
    assert "    server plain 127.0.0.1:9002 maxconn 1024 check inter 2s" in cfg.splitlines()
    assert world.checked == [(BINARY, lanes_dir / "haproxy.cfg")]

    spec_row = lane_row(settings, "spec", SPEC_PORT)
    plain_row = lane_row(settings, "plain", PLAIN_PORT)
    assert (record.run_tag, record.provider, record.status, record.pod_id, record.endpoint,
            record.gpu, record.gpu_count, record.price_per_hr, record.engine,
            record.ttl_expires_at) == (TAG, "local", "running", f"local:{TAG}",
                                       "http://127.0.0.1:9000", "NVIDIA L4", 1, 0.0,
                                       {"model": "m"}, NOW + 1800.0)
    assert record.extra.lanes == {
        "admission_limit": 2, "front_port": FRONT,
        "haproxy": {"binary": BINARY, "config": str(lanes_dir / "haproxy.cfg"),
                    "stats_socket": str(sock), "version": f"HAProxy version 2.8 at {BINARY}",
                    "startup_s": 0.75},
        "lanes": {"spec": spec_row, "plain": plain_row}}
    assert record.extra.startup == {"lines": ["engine on 9001", "ready \ufffd"]}
    assert record.extra.startup_s == 0.75
    assert record.extra.arms == {
        "spec": {"startup": spec_row["startup"], "startup_s": 11.5, "argv": spec_row["argv"]},
        "plain": {"startup": {}, "startup_s": 9.25, "argv": ["engine"]}}
    assert [e["event"] for e in record.events] == ["lane-spec-healthy", "lane-plain-healthy",
                                                   "lanes-up"]
    assert ledger.get(TAG) == record
    # who runs the `up` is stamped while it starts things, and cleared once it is up
    assert world.operations == ["lanes-start"] * 3 and record.operation == {}
    doc = json.loads((tmp_path / "run" / "lanes.json").read_text())
    assert (doc["run_tag"], doc["admission_limit"], sorted(doc["lanes"])) == (
        TAG, 2, ["plain", "spec"])
    assert doc["lanes"]["plain"]["started_after"] == f"{TAG}-spec"
    assert "gate" not in doc and world.terminated == []


def test_the_settings_startup_timeout_and_results_dir_apply_when_none_is_given(
        world: World, settings: Any) -> None:
    ledger = new_ledger(settings)
    record = lanes.up_lanes(settings, ledger, launches(), 1, FRONT)
    assert [w[2] for w in world.waited] == [321.0, 321.0, 30.0]
    assert (record.gpu, record.gpu_count, record.engine) == ("local CPU", 0, {})
    assert (settings.results_dir / TAG / "lanes.json").is_file()


def test_a_long_lanes_directory_puts_the_socket_in_the_temp_dir(
        world: World, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 90)
    settings = load_settings(env={"TAILPOD_HOME": str(deep), "TAILPOD_RESULTS_DIR":
                                  str(tmp_path / "r")}, dotenv_path=tmp_path / "absent.env")
    record = lanes.up_lanes(settings, new_ledger(settings), launches(), 1, FRONT)
    sock = record.extra.lanes["haproxy"]["stats_socket"]
    assert sock.endswith(f"/{TAG}.sock") and len(sock) <= lanes.SOCKET_PATH_MAX


# -- refused before anything starts -------------------------------------------------------------

def test_lanes_out_of_order_are_refused_before_haproxy_is_looked_up(
        world: World, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[int] = []
    monkeypatch.setattr(lanes, "_haproxy", lambda: looked.append(1) or BINARY)
    ledger = new_ledger(settings)
    with pytest.raises(ConfigError) as caught:
        lanes.up_lanes(settings, ledger, launches()[::-1], 1, FRONT)
    assert caught.value.message == "lanes must be spec then plain, got ['plain', 'spec']"
    assert looked == [] and ledger.all() == []


def test_ports_that_clash_or_are_taken_are_refused_before_anything_is_recorded(
        world: World, settings: Any) -> None:
    ledger = new_ledger(settings)
    with pytest.raises(ConfigError) as caught:
        lanes.up_lanes(settings, ledger, launches(), 1, PLAIN_PORT)
    assert caught.value.message == ("the proxy and the lanes need distinct ports, got "
                                    "[9002, 9001, 9002]")
    assert world.ports_asked == []
    world.open_ports = {SPEC_PORT, PLAIN_PORT}
    with pytest.raises(ConfigError) as caught:
        lanes.up_lanes(settings, ledger, launches(), 1, FRONT)
    assert (caught.value.message, caught.value.hint) == ("port 9001 is already in use",
                                                         "pass another --port")
    assert world.ports_asked == [FRONT, SPEC_PORT]
    assert ledger.all() == [] and world.created == []


# -- a failed `up`: everything stopped, the record terminated only when every lane is gone -------

def test_a_lane_that_never_gets_healthy_stops_what_started_and_names_its_log(
        world: World, settings: Any, tmp_path: Path) -> None:
    world.fail_health[PLAIN_PORT] = EngineStartError(
        "the engine exited with code 1", [f"line {i}" for i in range(1, 15)])
    ledger = new_ledger(settings)
    with pytest.raises(TailpodError) as caught:
        lanes.up_lanes(settings, ledger, launches(), 2, FRONT, run_dir=tmp_path / "run")
    log = settings.home / "lanes" / TAG / "local" / f"{TAG}-plain" / "engine.log"
    tail = "\n    ".join(f"line {i}" for i in range(3, 15))  # the last 12 of 14
    assert caught.value.message == (f"lane plain: the engine exited with code 1; last lines of "
                                    f"{log}:\n    {tail}")
    assert caught.value.__suppress_context__
    assert world.terminated == [f"local:{TAG}-plain", f"local:{TAG}-spec"]  # last started first
    record = ledger.get(TAG)
    assert record is not None and record.status == "terminated"
    assert [e["event"] for e in record.events] == ["lane-spec-healthy", "lanes-failed"]
    assert record.extra.lanes == {"admission_limit": 2,
                                  "lanes": {"spec": lane_row(settings, "spec", SPEC_PORT)}}
    assert record.ttl_expires_at == NOW + 1800.0 and record.operation == {}
    assert not (tmp_path / "run" / "lanes.json").exists()  # no gate verdict to keep


def test_a_spec_lane_that_fails_stops_only_itself_and_records_no_lane(
        world: World, settings: Any, tmp_path: Path) -> None:
    world.fail_health[SPEC_PORT] = EngineStartError("no health", ["only line"])
    ledger = new_ledger(settings)
    with pytest.raises(TailpodError, match="^lane spec: no health; last lines of .*\n    only line$"):
        lanes.up_lanes(settings, ledger, launches(), 2, FRONT, run_dir=tmp_path / "run")
    assert [c["run_tag"] for c in world.created] == [f"{TAG}-spec"]
    assert world.terminated == [f"local:{TAG}-spec"]
    record = ledger.get(TAG)
    assert record is not None and record.status == "terminated"
    assert record.extra.lanes == {"admission_limit": 2, "lanes": {}}
    assert [e["event"] for e in record.events] == ["lanes-failed"]


def test_a_lane_still_alive_after_a_failed_up_leaves_the_record_failed(
        world: World, settings: Any, tmp_path: Path) -> None:
    world.fail_health[PLAIN_PORT] = EngineStartError("no health", [])
    world.alive = {SPEC_PORT * 10}  # the spec lane's process group outlives its stop
    world.terminate_error = {f"local:{TAG}-plain"}  # a stop that raises: the next still sent
    ledger = new_ledger(settings)
    with pytest.raises(TailpodError, match="^lane plain: no health; last lines of "):
        lanes.up_lanes(settings, ledger, launches(), 2, FRONT, run_dir=tmp_path / "run")
    assert world.terminated == [f"local:{TAG}-plain", f"local:{TAG}-spec"]
    record = ledger.get(TAG)
    assert record is not None and record.status == "failed" and record.active


def test_a_proxy_that_never_gets_healthy_is_stopped_with_the_lanes(
        world: World, settings: Any, tmp_path: Path) -> None:
    stop = KeyboardInterrupt()
    world.fail_health[FRONT] = stop  # type: ignore[assignment]
    ledger = new_ledger(settings)
    with pytest.raises(KeyboardInterrupt) as caught:
        lanes.up_lanes(settings, ledger, launches(), 2, FRONT, run_dir=tmp_path / "run")
    assert caught.value is stop
    assert world.terminated == [f"local:{TAG}-plain", f"local:{TAG}-spec", f"local:{TAG}"]
    record = ledger.get(TAG)
    assert record is not None and record.status == "terminated"


# -- the token-identity gate --------------------------------------------------------------------

def test_a_passing_gate_is_kept_in_the_record_and_lanes_json(
        world: World, settings: Any, tmp_path: Path) -> None:
    asked: list[dict[str, Any]] = []

    def gate(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        return {"status": "pass", "prompts": 4}

    record = lanes.up_lanes(settings, new_ledger(settings), launches(), 2, FRONT,
                            run_dir=tmp_path / "run", gate=gate)
    verdict = {"status": "pass", "prompts": 4, "reference": "plain lane",
               "candidate": "spec lane"}
    assert asked == [{"reference_url": "http://127.0.0.1:9002",
                      "candidate": "http://127.0.0.1:9001", "reference_model": "m-plain",
                      "candidate_model": "m-spec", "max_tokens": 48}]
    assert record.extra.lanes["gate"] == verdict
    assert [e["event"] for e in record.events] == [
        "lane-spec-healthy", "lane-plain-healthy", "lanes-gate-pass", "lanes-up"]
    assert json.loads((tmp_path / "run" / "lanes.json").read_text())["gate"] == verdict


def test_a_failing_gate_refuses_the_deployment_before_the_proxy_starts(
        world: World, settings: Any, tmp_path: Path) -> None:
    def gate(request: dict[str, Any]) -> dict[str, Any]:
        return {"status": "fail", "first_mismatch": {"prompt": 2, "position": 5,
                                                     "reference_token": "a",
                                                     "candidate_token": "b"}}

    ledger = new_ledger(settings)
    with pytest.raises(LaneGateFailed) as caught:
        lanes.up_lanes(settings, ledger, launches(), 2, FRONT, run_dir=tmp_path / "run",
                       gate=gate)
    reason = ("token-identity gate failed: prompt 2 differs from the plain lane at token 5 "
              "(plain 'a', spec 'b')")
    assert caught.value.message == f"the spec lane is refused: {reason}"
    assert [c["run_tag"] for c in world.created] == [f"{TAG}-spec", f"{TAG}-plain"]
    assert world.checked == []
    record = ledger.get(TAG)
    assert record is not None and record.status == "terminated"
    assert [e["event"] for e in record.events] == [
        "lane-spec-healthy", "lane-plain-healthy", "lanes-gate-fail", "lanes-failed"]
    assert record.extra.lanes == {
        "admission_limit": 2, "gate": {**record.extra.lanes["gate"], "reason": reason},
        "lanes": {"spec": lane_row(settings, "spec", SPEC_PORT),
                  "plain": lane_row(settings, "plain", PLAIN_PORT)}}
    doc = json.loads((tmp_path / "run" / "lanes.json").read_text())
    assert doc["gate"]["reason"] == reason
    # the counts are the empty ones the refusal gives: read at NOW, none from the proxy
    assert (doc["counted_at"], doc["counts_source"], doc["counts_final"]) == (NOW, None, False)
    assert doc["lanes"]["spec"]["requests"] is None


def test_a_refusal_without_a_run_directory_keeps_lanes_json_in_the_results(
        world: World, settings: Any) -> None:
    with pytest.raises(LaneGateFailed):
        lanes.up_lanes(settings, new_ledger(settings), launches(), 2, FRONT,
                       gate=lambda r: {"status": "fail"})
    doc = json.loads((settings.results_dir / TAG / "lanes.json").read_text())
    assert doc["gate"]["status"] == "fail"


def test_the_gates_request_names_each_lanes_port_and_model() -> None:
    asked: list[dict[str, Any]] = []
    verdict = lanes.gate_lanes(lambda r: asked.append(r) or {"status": "pass"}, launches(),
                               max_tokens=7)
    assert asked == [{"reference_url": "http://127.0.0.1:9002",
                      "candidate": "http://127.0.0.1:9001", "reference_model": "m-plain",
                      "candidate_model": "m-spec", "max_tokens": 7}]
    assert verdict == {"status": "pass", "reference": "plain lane", "candidate": "spec lane"}


def test_a_gate_verdict_other_than_pass_is_a_failure_with_its_reason() -> None:
    verdict = lanes.gate_lanes(lambda r: {"status": "mismatch", "n": 1}, launches())
    assert verdict == {"status": "fail", "n": 1, "reference": "plain lane",
                       "candidate": "spec lane",
                       "reason": ("token-identity gate failed: prompt None differs from the "
                                  "plain lane at token None (plain None, spec None)")}


def test_a_gate_that_cannot_run_is_an_error_verdict() -> None:
    def gate(request: dict[str, Any]) -> dict[str, Any]:
        raise TailpodError("the agent exited")

    assert lanes.gate_lanes(gate, launches()) == {
        "status": "error", "reason": "the token-identity gate could not run: the agent exited"}


def test_a_refused_spec_lane_says_why_and_what_it_must_do() -> None:
    exc = LaneGateFailed({"status": "error", "reason": "the gate could not run"})
    assert exc.message == "the spec lane is refused: the gate could not run"
    assert exc.hint == ("the spec lane must return the plain lane's tokens under greedy "
                        "decoding; check the draft method and K")
    assert exc.verdict == {"status": "error", "reason": "the gate could not run"}


# -- HAProxy: found, its config checked, its version read, its stats asked ----------------------

def test_haproxy_is_found_on_the_path_or_in_sbin_or_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = lanes._haproxy
    present: set[str] = set()
    which: dict[str, str | None] = {"haproxy": None}
    monkeypatch.setattr(lanes.shutil, "which", lambda name: which.get(name))
    monkeypatch.setattr(lanes.Path, "exists", lambda self: str(self) in present)
    which["haproxy"] = "/opt/bin/haproxy"
    assert real() == "/opt/bin/haproxy"
    which["haproxy"] = None
    present.update({"/usr/local/sbin/haproxy"})
    assert real() == "/usr/local/sbin/haproxy"
    present.add("/usr/sbin/haproxy")
    assert real() == "/usr/sbin/haproxy"
    present.clear()
    with pytest.raises(ConfigError) as caught:
        real()
    assert (caught.value.message, caught.value.hint) == (
        "haproxy is not installed", "apt-get install -y haproxy (scripts/system-requirements.sh)")


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """subprocess.run answers what `ran["answer"]` holds (an exception is raised)."""
    calls: dict[str, Any] = {"calls": [], "answer": None}

    def run(argv: list[str], **kwargs: Any) -> Any:
        calls["calls"].append((argv, kwargs))
        if isinstance(calls["answer"], BaseException):
            raise calls["answer"]
        return calls["answer"]

    monkeypatch.setattr(subprocess, "run", run)
    return calls


def test_a_config_haproxy_rejects_is_refused_with_the_end_of_its_output(
        ran: dict[str, Any]) -> None:
    ran["answer"] = SimpleNamespace(returncode=0, stdout="ok", stderr="")
    assert lanes._check_config(BINARY, Path("/x/haproxy.cfg")) is None
    assert ran["calls"] == [([BINARY, "-c", "-f", "/x/haproxy.cfg"],
                             {"capture_output": True, "text": True, "timeout": 30})]
    ran["answer"] = SimpleNamespace(returncode=1, stdout="a" * 500, stderr="b" * 400)
    with pytest.raises(TailpodError) as caught:
        lanes._check_config(BINARY, Path("/x/haproxy.cfg"))
    assert caught.value.message == "haproxy rejected /x/haproxy.cfg: " + "a" * 400 + "b" * 400


def test_the_version_is_the_first_line_of_haproxy_v_or_unknown(ran: dict[str, Any]) -> None:
    ran["answer"] = SimpleNamespace(returncode=0, stdout="HAProxy version 2.8.5\nStatus: LTS\n")
    assert lanes._haproxy_version(BINARY) == "HAProxy version 2.8.5"
    assert ran["calls"] == [([BINARY, "-v"], {"capture_output": True, "text": True,
                                              "timeout": 10})]
    ran["answer"] = SimpleNamespace(returncode=0, stdout="")
    assert lanes._haproxy_version(BINARY) is None
    for error in (OSError("no such file"), subprocess.TimeoutExpired([BINARY], 10)):
        ran["answer"] = error
        assert lanes._haproxy_version(BINARY) is None


def test_stats_are_asked_of_the_socket_as_a_string_with_five_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.agent.bootstrap import haproxy

    asked: list[tuple[Any, float]] = []
    csv = ("# pxname,svname,scur,smax,stot,status\n"
           "lanes,spec,1,2,30,UP\nlanes,BACKEND,1,2,30,UP\n")
    monkeypatch.setattr(haproxy, "show_stat", lambda sock, timeout: asked.append(
        (sock, timeout)) or csv)
    assert lanes.read_stats(Path("/run/h.sock")) == {
        "spec": {"scur": 1, "smax": 2, "stot": 30, "qcur": None, "qmax": None, "slim": None,
                 "status": "UP"}}
    assert lanes.read_stats("/run/g.sock", timeout=0.5) is not None
    assert asked == [("/run/h.sock", 5.0), ("/run/g.sock", 0.5)]


def test_the_lanes_live_under_the_home_by_run_tag(settings: Any) -> None:
    assert lanes.lanes_home(settings, TAG) == settings.home / "lanes" / TAG


# -- each lane's launch, `up --lanes` on this machine, and its gate -----------------------------

@pytest.fixture
def adapter(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str]]:
    """The engine adapter: each launch plan it was asked for (the lane's config, the python)."""
    from tailpod.engines import adapters

    asked: list[tuple[Any, str]] = []

    def get_adapter(engine: str) -> Adapter:
        asked.append(("engine", engine))
        return Adapter()

    class Adapter:
        def launch_plan(self, cfg: Any, python: str) -> Any:
            asked.append((cfg, python))
            return SimpleNamespace(argv=["serve", str(cfg.port)], health_path="/ready",
                                   env={"PLAN": "1", "TAILPOD_ARM_LABEL": "plan",
                                        "VLLM_CPU_KVCACHE_SPACE": "99"})

        def parse_startup(self, text: str) -> Any:
            return SimpleNamespace(to_json=lambda: {"parsed": text})

    monkeypatch.setattr(adapters, "get_adapter", get_adapter)
    return asked


def lane_settings(tmp_path: Path) -> Any:
    return load_settings(env={"TAILPOD_HOME": str(tmp_path / "home"),
                              "TAILPOD_ENGINE_PYTHON": "/opt/engine/bin/python"},
                         dotenv_path=tmp_path / "absent.env")


def base_cfg(method: str | None = None) -> Any:
    from tailpod.engines.base import EngineConfig, SpecArm

    return EngineConfig(engine="vllm", model="m", served_name="svc", port=8000, mem_fraction=0.9,
                        spec=SpecArm(k=5, method=method, draft_model="d"))


def test_cpu_lanes_take_k_from_the_lanes_and_a_kv_budget_each(
        adapter: list[tuple[Any, str]], tmp_path: Path) -> None:
    from tailpod.engines.base import SpecArm

    settings = lane_settings(tmp_path)
    got = lanes.engine_lanes(settings, base_cfg(), [lanes.LaneSpec("spec", 3),
                                                    lanes.LaneSpec("plain", 0)], on_cpu=True)
    assert adapter.pop(0) == ("engine", "vllm")
    cfgs = [c for c, _ in adapter]
    assert [(c.port, c.spec, c.mem_fraction) for c in cfgs] == [
        (8001, SpecArm(3, "ngram", "d"), 0.9), (8002, SpecArm(0, None, None), 0.9)]
    assert [p for _, p in adapter] == ["/opt/engine/bin/python"] * 2
    local = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
             "VLLM_CACHE_ROOT": str(settings.home / "cache" / "vllm"),
             "VLLM_LOGGING_LEVEL": "INFO"}
    for launch, name, port, cfg in zip(got, ("spec", "plain"), (8001, 8002), cfgs, strict=True):
        assert (launch.name, launch.argv, launch.port, launch.health_path, launch.served_model,
                launch.budget, launch.engine_config) == (
            name, ["serve", str(port)], port, "/ready", "svc",
            {"VLLM_CPU_KVCACHE_SPACE_gib": 1.0}, cfg.to_json())
        assert launch.env == {"PLAN": "1", **local, "TAILPOD_ARM_LABEL": name,
                              "VLLM_CPU_KVCACHE_SPACE": "1"}
        assert launch.parse_startup is not None
        assert launch.parse_startup("INFO ready") == {"parsed": "INFO ready"}
    got = lanes.engine_lanes(settings, base_cfg("eagle"), [lanes.LaneSpec("spec", 2)],
                             on_cpu=True, kv_gib=0.5)
    assert adapter[-2] == ("engine", "vllm")
    assert (got[0].env["VLLM_CPU_KVCACHE_SPACE"], got[0].budget) == (
        "0.5", {"VLLM_CPU_KVCACHE_SPACE_gib": 0.5})
    assert adapter[-1][0].spec == SpecArm(2, "eagle", "d")


def test_gpu_lanes_each_get_a_memory_fraction(adapter: list[tuple[Any, str]],
                                              tmp_path: Path) -> None:
    from tailpod.engines.base import SpecArm

    settings = lane_settings(tmp_path)
    specs = [lanes.LaneSpec("spec", 3), lanes.LaneSpec("plain", 0)]
    got = lanes.engine_lanes(settings, base_cfg(), specs, on_cpu=False)
    assert adapter.pop(0) == ("engine", "vllm")
    assert [(launch.budget, c.mem_fraction, c.port, c.spec) for launch, (c, _) in zip(
        got, adapter, strict=True)] == [
        ({"mem_fraction": 0.45}, 0.45, 8001, SpecArm(3, "ngram", "d")),
        ({"mem_fraction": 0.45}, 0.45, 8002, SpecArm(0, None, None))]
    assert got[0].env["VLLM_CPU_KVCACHE_SPACE"] == "99"  # the plan's own: no CPU budget set
    got = lanes.engine_lanes(settings, base_cfg(), specs, on_cpu=False, kv_gib=2.0,
                             mem_fraction=0.3)
    assert [launch.budget for launch in got] == [{"mem_fraction": 0.3}] * 2
    assert [c.mem_fraction for c, _ in adapter[3:]] == [0.3, 0.3]


def test_up_local_lanes_checks_everything_then_starts_both_lanes_gated(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tailpod.engines import checkpoint, local_install

    steps: list[Any] = []
    settings = lane_settings(tmp_path)
    cfg = SimpleNamespace(model="m", engine="vllm", port=8000, tensor_parallel=2,
                          to_json=lambda: {"model": "m"})
    gpus: list[dict[str, Any]] = [{"name": "NVIDIA L4"}, {"name": "NVIDIA A10"}]
    built = [LaneLaunch("spec", ["a"], 8001, engine_config={"engine": "vllm", "model": "m"}),
             LaneLaunch("plain", ["b"], 8002, engine_config={"engine": "vllm", "model": "m2"})]
    gate = object()
    monkeypatch.setattr(local_install, "check_model", lambda m: steps.append(("model", m)))
    monkeypatch.setattr(local_install, "engine_python", lambda s: f"{s.home}/py")
    monkeypatch.setattr(local_install, "check_engine_installed",
                        lambda p, e: steps.append(("engine", p, e)))
    monkeypatch.setattr(local_install, "check_local_gpus",
                        lambda c: steps.append(("gpus", c)) or {"gpus": gpus})
    monkeypatch.setattr(lanes, "engine_lanes", lambda *a: steps.append(("launches", a)) or built)
    monkeypatch.setattr(checkpoint, "check_arms", lambda cfgs, s: steps.append(
        ("arms", [c.model for c in cfgs], s)))
    monkeypatch.setattr(lanes, "local_gate", lambda s: gate if s is settings else None)
    monkeypatch.setattr(lanes, "up_lanes", lambda *a, **k: steps.append(("up", a, k)) or "rec")
    specs = [lanes.LaneSpec("spec", 3), lanes.LaneSpec("plain", 0)]
    progress = object()
    ledger = object()
    assert lanes.up_local_lanes(settings, cfg, ledger, specs, 4, True, 0.5, None,  # type: ignore[arg-type]
                                progress) == "rec"  # type: ignore[arg-type]
    assert steps == [
        ("model", "m"), ("engine", f"{settings.home}/py", "vllm"), ("gpus", cfg),
        ("launches", (settings, cfg, specs, True, 0.5, None)),
        ("arms", ["m", "m2"], settings),
        ("up", (settings, ledger, built, 4, 8000, progress),
         {"engine_cfg": {"model": "m"}, "gpu": "NVIDIA L4", "gpu_count": 2, "gate": gate})]
    cfg.tensor_parallel = 0
    steps.clear()
    lanes.up_local_lanes(settings, cfg, ledger, specs, 4, False, None, 0.4)  # type: ignore[arg-type]
    assert steps[-1][2]["gpu_count"] == 1 and steps[-1][1][5] is None  # no progress given
    assert steps[3] == ("launches", (settings, cfg, specs, False, None, 0.4))
    gpus.clear()
    steps.clear()
    lanes.up_local_lanes(settings, cfg, ledger, specs, 4, True, None, None)  # type: ignore[arg-type]
    assert (steps[-1][2]["gpu"], steps[-1][2]["gpu_count"]) == ("local CPU", 0)


def test_the_local_gate_runs_the_agent_as_a_child_of_this_machine(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tailpod.agent_client import driver

    seen: list[Any] = []

    class Transport:
        def __init__(self, path: Path) -> None:
            seen.append(("transport", path))

    class Agent:
        def __init__(self, transport: Any) -> None:
            seen.append(("agent", type(transport).__name__))

        def __enter__(self) -> Agent:
            return self

        def __exit__(self, *exc: Any) -> None:
            seen.append("closed")

        def gate(self, request: dict[str, Any]) -> dict[str, Any]:
            seen.append(("gate", request))
            return {"status": "pass"}

    monkeypatch.setattr(driver, "SubprocessTransport", Transport)
    monkeypatch.setattr(driver, "PodAgent", Agent)
    settings = lane_settings(tmp_path)
    assert lanes.local_gate(settings)({"max_tokens": 3}) == {"status": "pass"}
    assert seen == [("transport", settings.home / "agent"), ("agent", "Transport"),
                    ("gate", {"max_tokens": 3}), "closed"]

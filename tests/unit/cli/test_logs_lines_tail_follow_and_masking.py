"""What `tailpod logs` reads and prints (cli/logs.py), against an in-memory engine log and
provider the test scripts: `logs TAG` as `logs show TAG`, the tail's window (`--tail 0` is the
whole log), follow's new lines, the container log's refusals and its follow without repeats, and
every printed line masked, a secret by its value whatever its shape. Written to kill the module's
mutants (docs/testing.md, "first contact, gpus, logs (session 19)"); expected values are written
out by hand. tests/unit/cli/test_cli_logs.py and test_logs_container_masks_secrets.py run the
command against a local pod and the sandbox clouds."""

from __future__ import annotations

import io
import itertools
import os
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import tailpod.cli.logs as logs
import tailpod.pods.kinds as kinds
import tailpod.provision.providers as providers
from tailpod.config import load_settings
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import PodRecord
from tailpod.provision.base import SupportsContainerLog
from tailpod.secrets import Secret

TAG = "tp-20260101-000000-10a9a9"


# -- `logs TAG` is `logs show TAG` ---------------------------------------------------------------

def group(seen: list[tuple[str, str | None]]) -> typer.Typer:
    app = typer.Typer(cls=logs.LogsGroup)

    @app.command("show")
    def show(tag: str = typer.Argument(None)) -> None:
        seen.append(("show", tag))

    @app.command("parse")
    def parse(file: str) -> None:
        seen.append(("parse", file))

    return app


@pytest.mark.parametrize(("args", "ran"), [
    (["tp-1"], ("show", "tp-1")),  # a tag first: show it
    (["show", "tp-2"], ("show", "tp-2")),
    (["parse", "f.log"], ("parse", "f.log")),
    (["parse"], None),  # parse without its file: parse's own usage error, not `show parse`
])
def test_a_first_word_that_is_no_subcommand_is_the_tag(args: list[str],
                                                       ran: tuple[str, str] | None) -> None:
    seen: list[tuple[str, str | None]] = []
    result = CliRunner().invoke(group(seen), args)
    assert seen == ([ran] if ran else [])
    assert result.exit_code == (0 if ran else 2)


def test_help_stays_help() -> None:
    seen: list[tuple[str, str | None]] = []
    result = CliRunner().invoke(group(seen), ["--help"])
    assert result.exit_code == 0 and seen == []
    assert "show" in result.output and "parse" in result.output


# -- the engine log ------------------------------------------------------------------------------

class Log:
    """An engine log held in memory; `grow` is appended, one piece a read, after the first."""

    def __init__(self, text: str, grow: list[str] | None = None) -> None:
        self.text = text
        self.grow = list(grow or [])
        self.reads: list[int] = []

    def size(self) -> int:
        return len(self.text)

    def read_from(self, offset: int) -> tuple[str, int]:
        self.reads.append(offset)
        if len(self.reads) > 1 and self.grow:
            self.text += self.grow.pop(0)
        return self.text[offset:], len(self.text)

    def close(self) -> None:
        pass


def test_last_lines() -> None:
    assert logs.last_lines("a\nb\nc\n", 2) == ["b", "c"]
    assert logs.last_lines("a\nb\nc", 1) == ["c"]
    assert logs.last_lines("a\nb\nc\n", 0) == ["a", "b", "c"]
    assert logs.last_lines("a\nb", 5) == ["a", "b"]


def test_a_short_log_is_read_whole_and_its_tail_shown() -> None:
    log = Log("one\ntwo\nthree\n")
    assert list(logs.engine_lines(log, 2, False)) == ["two", "three"]
    assert log.reads == [0]
    # read from its start, the first line is whole and kept
    assert list(logs.engine_lines(Log("one\ntwo\nthree\n"), 5, False)) == ["one", "two", "three"]


def test_a_long_log_is_read_from_a_window_of_400_bytes_a_line() -> None:
    lines = [f"{i:09d}" for i in range(100)]  # 10 bytes a line with its newline: 1,000 bytes
    log = Log("".join(line + "\n" for line in lines))
    assert list(logs.engine_lines(log, 2, False)) == lines[-2:]
    assert log.reads == [1000 - 2 * 400]
    one = Log(log.text)
    assert list(logs.engine_lines(one, 1, False)) == lines[-1:]
    assert one.reads == [1000 - 400]


def test_the_windows_first_line_is_dropped_as_partial() -> None:
    # lines of 500 bytes: a tail of 2 reads the last 800 bytes, 300 of them the end of the
    # second-last line, which is dropped: one whole line is shown
    lines = [f"{i:03d}" + " x" * 248 for i in range(10)]  # words: the cut is at a line's end
    log = Log("".join(line + "\n" for line in lines))
    assert list(logs.engine_lines(log, 2, False)) == [lines[-1]]
    assert log.reads == [5000 - 800]


def test_a_window_one_byte_in_drops_its_first_partial_line() -> None:
    # 801 bytes: "ab" and a line of 797; a tail of 2 reads from byte 1, whose "b" is partial
    log = Log("ab\n" + "y" * 797 + "\n")
    assert list(logs.engine_lines(log, 2, False)) == ["y" * 797]
    assert log.reads == [1]


def test_a_window_inside_one_long_line_shows_that_lines_end() -> None:
    # no newline in the window: nothing to cut, the end of the line is shown
    log = Log("z" * 600 + "w" * 400)
    assert list(logs.engine_lines(log, 1, False)) == ["w" * 400]
    assert log.reads == [600]


def test_tail_zero_is_the_whole_log() -> None:
    lines = [f"line {i:04d} of a long engine log" for i in range(500)]
    log = Log("\n".join(lines) + "\n")
    assert list(logs.engine_lines(log, 0, False)) == lines
    assert log.reads == [0]


def test_follow_prints_each_new_whole_line_once() -> None:
    slept: list[float] = []
    log = Log("a\nb\n", grow=["", "c\nd", "", "\ne\n", "f\n"])
    got = list(itertools.islice(logs.engine_lines(log, 10, True, sleep=slept.append), 6))
    assert got == ["a", "b", "c", "d", "e", "f"]
    assert slept == [1.0] * 5
    assert log.reads == [0, 4, 4, 7, 7, 10]


# -- the container log ---------------------------------------------------------------------------

class Cloud(SupportsContainerLog):
    """A provider's container log, one answer a read (the last one repeats)."""

    def __init__(self, answers: list[list[str] | None]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    def container_log(self, pod_id: str, tail: int = 200) -> list[str] | None:
        self.asked.append((pod_id, tail))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    made: dict[str, Any] = {}

    def get_provider(name: str, settings: Any) -> Any:
        made.setdefault("asked", []).append(name)
        made.setdefault("settings", []).append(settings)
        return made[name]

    monkeypatch.setattr(providers, "get_provider", get_provider)
    return made


def record(pod_id: str | None = "pod-9", provider: str = "runpod") -> PodRecord:
    return PodRecord(run_tag=TAG, provider=provider, status="running", pod_id=pod_id)


def test_the_container_log_tail_then_only_new_lines(cloud: dict[str, Any]) -> None:
    cloud["runpod"] = Cloud([["a", "b"], ["a", "b", "c"], ["b", "c"], ["c", "d", "e"]])
    slept: list[float] = []
    got = list(itertools.islice(
        logs.container_lines(None, record(), 50, True, sleep=slept.append), 5))  # type: ignore[arg-type]
    assert got == ["a", "b", "c", "d", "e"]
    assert cloud["runpod"].asked == [("pod-9", 50), ("pod-9", 1000), ("pod-9", 1000),
                                     ("pod-9", 1000)]
    assert slept == [2.0] * 3
    assert cloud["asked"] == ["runpod"]


def test_the_container_log_without_follow_is_read_once(cloud: dict[str, Any]) -> None:
    cloud["vastai"] = Cloud([["x"]])
    settings: Any = object()
    assert list(logs.container_lines(settings, record(provider="vastai"), 0, False)) == ["x"]
    assert cloud["vastai"].asked == [("pod-9", 0)]
    assert cloud["settings"] == [settings]  # the provider is made with the command's settings


def test_an_empty_answer_while_following_is_no_new_line(cloud: dict[str, Any]) -> None:
    # a read that gives nothing (None, or no line) is no answer: the lines already shown are
    # not shown again when the log comes back
    cloud["runpod"] = Cloud([["a"], None, [], ["a", "b"]])
    got = list(itertools.islice(
        logs.container_lines(None, record(), 5, True, sleep=lambda _s: None), 2))  # type: ignore[arg-type]
    assert got == ["a", "b"]


def test_the_container_log_refusals(cloud: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as caught:
        list(logs.container_lines(None, record(pod_id=None), 5, False))  # type: ignore[arg-type]
    assert caught.value.message == f"{TAG} has no provider pod id recorded"
    assert "asked" not in cloud  # refused before any provider is made
    cloud["local"] = object()
    with pytest.raises(ConfigError) as caught:
        list(logs.container_lines(None, record(provider="local"), 5, False))  # type: ignore[arg-type]
    assert caught.value.message == "local does not serve container logs"
    assert caught.value.hint == "--engine reads the engine's own log over SSH"
    cloud["runpod"] = Cloud([None])
    with pytest.raises(TailpodError) as unknown:
        list(logs.container_lines(None, record(), 5, False))  # type: ignore[arg-type]
    assert unknown.value.message == "runpod has no container log for pod-9"


@pytest.mark.parametrize(("before", "now", "new"), [
    (["a", "b", "c"], ["b", "c", "d", "e"], ["d", "e"]),
    (["a"], ["x", "y"], ["x", "y"]),
    (["a", "b"], ["a", "b"], []),
    ([], ["a"], ["a"]),
    (["a", "b"], [], []),
    (["x", "a", "a"], ["a", "a", "b"], ["b"]),  # the longest overlap, not the first found
    (["a", "b", "a"], ["a", "b", "a", "c"], ["c"]),
    (["b", "c"], ["a", "b", "c", "d"], ["a", "b", "c", "d"]),  # `before`'s end must start `now`
])
def test_new_lines_after_the_longest_overlap(before: list[str], now: list[str],
                                             new: list[str]) -> None:
    assert logs._new_lines(before, now) == new


# -- the engine log's reader and what is printed ---------------------------------------------------

def test_the_engine_log_is_opened_by_the_pods_kind(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    opened: list[tuple[Any, PodRecord]] = []
    reader = Log("x\n")

    class Kind:
        def engine_log(self, settings: Any, rec: PodRecord, say: Any) -> Log:
            opened.append((settings, rec))
            say("connecting with token hf_" + "Zq7" * 10)
            return reader

    kinds_asked: list[str] = []
    monkeypatch.setattr(kinds, "kind_for", lambda name: kinds_asked.append(name) or Kind())
    rec = record(provider="vastai")
    assert logs.open_engine_log("settings", rec) is reader  # type: ignore[arg-type]
    assert opened == [("settings", rec)] and kinds_asked == ["vastai"]
    err = capsys.readouterr().err
    assert "connecting with token ***" in err and "Zq7" not in err


def test_every_line_printed_is_masked_a_secret_by_its_value() -> None:
    value = "plainvalue-with-no-known-shape-7"  # no credential's shape, no name before it
    secret = Secret(value)
    out = io.StringIO()
    logs.write_lines(["first", f"the value {value} here", "HF_TOKEN=hf_" + "Zq7" * 10, ""],
                     out)
    assert out.getvalue() == "first\nthe value *** here\nHF_TOKEN=***\n\n"
    assert secret.reveal() == value


def test_written_lines_are_flushed_each_as_it_comes() -> None:
    class Out(io.StringIO):
        flushed: list[str] = []

        def flush(self) -> None:
            self.flushed.append(self.getvalue())

    out = Out()
    logs.write_lines(iter(["a", "b"]), out)
    assert out.flushed == ["a\n", "a\nb\n"]


def test_show_engine_log_is_closed_after_printing(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[bool] = []

    class Closing(Log):
        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(logs, "open_engine_log", lambda settings, rec: Closing("p\nq\n"))
    settings = load_settings(env={"TAILPOD_HOME": str(tmp_path)},
                             dotenv_path=tmp_path / "absent.env")
    from tailpod.ledger import Ledger

    Ledger(settings.state_dir).put(record())
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    from tailpod.cli.main import app

    result = CliRunner().invoke(app, ["logs", TAG, "-n", "1"])
    assert result.exit_code == 0, result.output
    assert result.output == "q\n" and closed == [True]

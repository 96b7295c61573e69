"""Multi-turn session replay (docs/probe.md, "Sessions"): conversations whose context grows turn
by turn, with think and tool-wait times between turns and prefixes shared across sessions.

Two file formats, one JSON object per session a line:
- `session`, tailpod's own: {"session_id", "start_s", "shared_prefix", "turns": [{"user" text or
  "input_tokens" N, "think_s" or "tool_wait_s" (the wait before the turn, after the previous
  answer), "max_tokens"}]};
- `aiperf-multi-turn`, AIPerf's `multi_turn` custom dataset (ai-dynamo/aiperf
  src/aiperf/dataset/loader/models.py, classes MultiTurn and SingleTurn): {"session_id",
  "turns": [{"text", "delay" (ms before the turn) or "timestamp" (ms), "output_length",
  "role"}]}, a leading text-only system turn being the conversation's system message.

Each session is closed (a turn goes out only after the previous answer ended and its wait passed);
sessions start on the trace's own schedule, independently of each other. Every turn sends the
whole conversation so far: the shared prefix as a system message, then each earlier user turn
and the assistant answer the server actually gave it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .arrival import SESSION_FORMATS, approx_prompt, json_object_lines, shown
from .basics import ProbeError
from .rows import LoopOutcome
from .stream import RequestResult, RequestSpec
from .transport import AsyncConnection, Endpoint, _auth_headers, exchange_recorded

_SESSION_KEYS = ("session_id", "start_s", "shared_prefix", "turns")
_TURN_KEYS = ("user", "input_tokens", "think_s", "tool_wait_s", "max_tokens")
_AIPERF_LINE_KEYS = ("session_id", "turns", "type")
_AIPERF_TURN_KEYS = ("text", "delay", "timestamp", "role", "output_length", "type",
                     "session_id")
# AIPerf turn fields tailpod does not replay: media, several texts, and `extra` (fields merged
# into the request body, which would change what the gate compares).
_AIPERF_REFUSED = ("texts", "image", "images", "image_uuids", "audio", "audios", "video",
                   "videos", "extra")


@dataclass(frozen=True)
class Turn:
    user: str | None  # the user message's text, or None when only its length is given
    input_tokens: int | None  # the user message's length in tokens (approximate words)
    wait_s: float  # before the turn: after the previous answer (turn 1: after the start)
    wait_kind: str | None  # "think" | "tool" | None (no wait)
    max_tokens: int | None  # None: the run's max_tokens


@dataclass(frozen=True)
class Session:
    session_id: str
    start_s: float  # from the trace's first session start
    shared_prefix: str | None  # the system message, the same text in every session that names it
    turns: tuple[Turn, ...]


def _num(obj: dict[str, Any], key: str, where: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise ProbeError(f"{where}: {key} must be a number >= 0, not {shown(value)}")
    return float(value)


def _count(obj: dict[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProbeError(f"{where}: {key} must be an integer >= 1, not {shown(value)}")
    return value


def _unknown(obj: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(set(obj) - set(allowed))
    if extra:
        raise ProbeError(f"{where}: unknown key(s) {', '.join(extra)} (allowed: "
                         f"{', '.join(allowed)})")


def _session_id(obj: dict[str, Any], where: str, default: str) -> str:
    sid = obj.get("session_id", default)
    if not isinstance(sid, str) or not sid:
        raise ProbeError(f"{where}: session_id must be a non-empty string")
    return sid


def _turn_list(obj: dict[str, Any], where: str) -> list[Any]:
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns:
        raise ProbeError(f"{where}: turns must be a non-empty list")
    return turns


def _tailpod_session(obj: dict[str, Any], where: str, lineno: int) -> Session:
    _unknown(obj, _SESSION_KEYS, where)
    sid = _session_id(obj, where, f"session-{lineno}")
    prefix = obj.get("shared_prefix")
    if prefix is not None and (not isinstance(prefix, str) or not prefix.strip()):
        raise ProbeError(f"{where}: shared_prefix must be a non-empty string")
    turns: list[Turn] = []
    for i, raw in enumerate(_turn_list(obj, where), 1):
        at = f"{where}: turn {i}"
        if not isinstance(raw, dict):
            raise ProbeError(f"{at}: not a JSON object")
        _unknown(raw, _TURN_KEYS, at)
        user = raw.get("user")
        tokens = _count(raw, "input_tokens", at)
        if (user is None) == (tokens is None):
            raise ProbeError(f"{at}: give exactly one of user (text), input_tokens")
        if user is not None and (not isinstance(user, str) or not user.strip()):
            raise ProbeError(f"{at}: user must be a non-empty string")
        think, tool = _num(raw, "think_s", at), _num(raw, "tool_wait_s", at)
        if think is not None and tool is not None:
            raise ProbeError(f"{at}: give at most one of think_s, tool_wait_s")
        wait = think if think is not None else tool
        kind = None if not wait else ("think" if think is not None else "tool")
        turns.append(Turn(user, tokens, wait or 0.0, kind, _count(raw, "max_tokens", at)))
    return Session(sid, _num(obj, "start_s", where) or 0.0, prefix, tuple(turns))


def _aiperf_session(obj: dict[str, Any], where: str, lineno: int) -> Session:
    _unknown(obj, _AIPERF_LINE_KEYS, where)
    if obj.get("type", "multi_turn") != "multi_turn":
        raise ProbeError(f"{where}: type must be multi_turn, not {shown(obj.get('type'))}")
    sid = _session_id(obj, where, f"session-{lineno}")
    raw_turns = _turn_list(obj, where)
    prefix: str | None = None
    first = raw_turns[0]
    # AIPerf hoists a leading text-only system turn that sets no dispatch field into the
    # conversation's system message (docs/tutorials/custom-dataset.md, "Persistent System Prompt")
    if isinstance(first, dict) and first.get("role") == "system" and set(first) <= {
            "role", "text", "type"}:
        prefix = first.get("text")
        if not isinstance(prefix, str) or not prefix.strip():
            raise ProbeError(f"{where}: turn 1 (system): text must be a non-empty string")
        raw_turns = raw_turns[1:]
        if not raw_turns:
            raise ProbeError(f"{where}: a system turn and no user turn")
    start = 0.0
    turns: list[Turn] = []
    for i, raw in enumerate(raw_turns, 1):
        at = f"{where}: turn {i}"
        if not isinstance(raw, dict):
            raise ProbeError(f"{at}: not a JSON object")
        refused = sorted(set(raw) & set(_AIPERF_REFUSED))
        if refused:
            raise ProbeError(f"{at}: {', '.join(refused)} not replayed by tailpod (text turns "
                             "only)")
        _unknown(raw, _AIPERF_TURN_KEYS, at)
        if raw.get("role") not in (None, "user"):
            raise ProbeError(f"{at}: role {shown(raw.get('role'))} not replayed (user turns, and one "
                             "leading system turn)")
        text = raw.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ProbeError(f"{at}: text must be a non-empty string")
        delay, stamp = _num(raw, "delay", at), _num(raw, "timestamp", at)
        if delay is not None and stamp is not None:
            raise ProbeError(f"{at}: timestamp and delay cannot be set together")
        if stamp is not None:
            if i > 1:
                raise ProbeError(f"{at}: a timestamp only on a session's first turn (tailpod "
                                 "replays later turns by delay after the previous answer)")
            start = stamp / 1000.0
        wait = (delay or 0.0) / 1000.0
        turns.append(Turn(text, None, wait, "think" if wait else None,
                          _count(raw, "output_length", at)))
    return Session(sid, start, prefix, tuple(turns))


def parse_session_lines(lines: Any, fmt: str, source: str = "trace") -> list[Session]:
    """The sessions of a session trace, in file order, start times from the earliest start.
    Bad input raises ProbeError naming the file, line, turn and key."""
    if fmt not in SESSION_FORMATS:
        raise ProbeError(f"session format must be one of {', '.join(SESSION_FORMATS)}")
    out: list[Session] = []
    seen: set[str] = set()
    for lineno, where, obj in json_object_lines(lines, source, "one session a line"):
        session = (_tailpod_session if fmt == "session" else _aiperf_session)(obj, where, lineno)
        if session.session_id in seen:
            raise ProbeError(f"{where}: session_id {shown(session.session_id)} appears twice")
        seen.add(session.session_id)
        out.append(session)
    if not out:
        raise ProbeError(f"{source}: no sessions in the trace")
    t0 = min(s.start_s for s in out)
    return [Session(s.session_id, s.start_s - t0, s.shared_prefix, s.turns) for s in out]


def read_sessions(path: str, fmt: str) -> list[Session]:
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_session_lines(fh, fmt, path)
    except OSError as exc:
        raise ProbeError(f"trace {path}: {exc.strerror or exc}") from None


def session_span_s(sessions: list[Session], speed: float) -> float:
    """The least time the replay takes at `speed`: the last session's start plus its waits
    (the answers' own time comes on top, and is not known before they are served)."""
    return max(s.start_s + sum(t.wait_s for t in s.turns) for s in sessions) / speed


def longest_context_tokens(sessions: list[Session], max_tokens: int) -> int:
    """An estimate of the longest prompt a session reaches (its last turn's): every user turn's
    and the prefix's tokens (about TOKENS_PER_WORD a word of text) plus every earlier answer's
    max_tokens."""
    def tokens(text: str | None, n: int | None) -> int:
        return n if n is not None else int(round(len((text or "").split()) * 1.3))

    best = 0
    for s in sessions:
        total = tokens(s.shared_prefix, None)
        for i, t in enumerate(s.turns):
            total += tokens(t.user, t.input_tokens)
            if i < len(s.turns) - 1:
                total += t.max_tokens or max_tokens
        best = max(best, total)
    return best


def turn_text(session: Session, index: int, source_text: str) -> str:
    """A turn's user text: its own, or about `input_tokens` tokens of the prompt class's text,
    rotated by the session and turn (so two turns never read alike) and tagged with both."""
    turn = session.turns[index]
    if turn.user is not None:
        return turn.user
    assert turn.input_tokens is not None
    words = source_text.split() or ["hello"]
    k = zlib.crc32(f"{session.session_id}/{index}".encode()) % len(words)
    text, _ = approx_prompt(" ".join(words[k:] + words[:k]), turn.input_tokens)
    return f"[{session.session_id} turn {index + 1}] {text}"


def answer_digest(text: str | None) -> str | None:
    """What the session gate compares between arms: the answer text's SHA-256 (16 hex digits)."""
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Monitor(Protocol):
    """The probe's scheduling-lag monitor (load.LagMonitor), passed in: load.py imports this."""

    max_lag: float

    async def run_async(self) -> None: ...

    def stop(self) -> None: ...


def _not_sent(index: int, cache: str, why: str) -> RequestResult:
    return RequestResult(index=index, cache=cache, ok=False, error=why, prompt_tokens=None,
                         completion_tokens=None, ttft_s=None, e2e_s=None, decode_tok_s=None,
                         tpot_s=None, chunks=0, chunk_gap_p50_s=None, chunk_gap_max_s=None,
                         t_start=time.time(), flags=["not_sent"])


async def _replay(ep: Endpoint, sessions: list[Session], texts: list[list[str]],
                  build: Callable[[list[dict[str, Any]], int | None], tuple[str, bytes]],
                  cache: str, cap: int, timeout: float, api: str, monitor: Monitor,
                  speed: float) -> tuple[LoopOutcome, list[dict[str, Any]]]:
    firsts = [0]
    for s in sessions:
        firsts.append(firsts[-1] + len(s.turns))
    results: list[RequestResult | None] = [None] * firsts[-1]
    extra: list[dict[str, Any]] = [{} for _ in range(firsts[-1])]
    headers = _auth_headers()
    sem = asyncio.Semaphore(cap) if cap > 0 else None
    t0 = time.perf_counter() + 0.01

    async def one(n: int, s: Session) -> None:
        due = t0 + s.start_s / speed
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        if sem is not None:
            await sem.acquire()
        conn = AsyncConnection(ep, headers)
        history: list[dict[str, Any]] = (
            [{"role": "system", "content": s.shared_prefix}] if s.shared_prefix else [])
        failed: str | None = None
        try:
            await conn.open(timeout)
            for k, turn in enumerate(s.turns):
                index = firsts[n] + k
                extra[index] = {"session_id": s.session_id, "turn": k + 1,
                                "turn_wait_s": turn.wait_s / speed,
                                "turn_wait_kind": turn.wait_kind}
                if failed is not None:
                    results[index] = _not_sent(index, cache, failed)
                    continue
                due += turn.wait_s / speed
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                messages = [*history, {"role": "user", "content": texts[n][k]}]
                path, body = build(messages, turn.max_tokens)
                spec = RequestSpec(index, path, body, cache, api, True)
                res = await exchange_recorded(conn, spec, api, timeout)
                now = res.t_end_perf  # the answer's end: the next turn's wait starts here
                res.t_sched_perf = due
                results[index] = res
                extra[index]["cached_tokens"] = res.cached_tokens
                extra[index]["answer_digest"] = answer_digest(res.content) if res.ok else None
                if not res.ok:
                    # the next turn's history would lack this answer: the session stops here
                    failed = f"turn {k + 1} of the session failed; later turns not sent"
                    continue
                history = [*messages, {"role": "assistant", "content": res.content or ""}]
                due = now
        finally:
            conn.close()
            if sem is not None:
                sem.release()

    mon_task = asyncio.ensure_future(monitor.run_async())
    cpu0 = time.process_time()
    await asyncio.gather(*(one(n, s) for n, s in enumerate(sessions)))
    t1, cpu1 = time.perf_counter(), time.process_time()
    monitor.stop()
    mon_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await mon_task
    done = [r for r in results if r is not None]
    sent = [r for r in done if "not_sent" not in r.flags]
    start = min((r.t_send_perf for r in sent), default=t0)
    end = max((r.t_end_perf for r in sent), default=t1)
    return LoopOutcome(done, max(0.0, end - start), cpu1 - cpu0, monitor.max_lag), extra


def replay_sessions(ep: Endpoint, sessions: list[Session], texts: list[list[str]],
                    build: Callable[[list[dict[str, Any]], int | None], tuple[str, bytes]],
                    cache: str, cap: int, timeout: float, api: str, monitor: Monitor,
                    speed: float = 1.0) -> tuple[LoopOutcome, list[dict[str, Any]]]:
    """Replay every session (at most `cap` at once, 0 = no cap) and return the outcome, one
    result per turn in (session, turn) order, and each turn's session fields for its row."""
    if api != "chat":
        raise ProbeError("session replay needs the chat API (a conversation of messages)")
    return asyncio.run(_replay(ep, sessions, texts, build, cache, cap, timeout, api, monitor,
                               speed))

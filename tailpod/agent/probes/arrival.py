"""Open-loop arrival schedules and SLO maths (docs/agent.md, "probe run": a cell's `arrival`).

A schedule is computed up front from the cell's seed, so it is the same on every run and every
machine: the offsets (seconds from the cell's start) at which each request is due. The load loop
sends each request at its offset whether or not earlier ones have finished (open loop), and its
latencies are also measured from the offset, so a server that falls behind shows its queue in
the figures instead of slowing the client down (no coordinated omission).
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .basics import ProbeError

PROCESSES = ("poisson", "gamma", "constant", "trace")
ARRIVAL_KEYS = ("process", "rate", "burstiness", "seed", "requests", "duration_s", "trace")
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")
TRACE_KEYS = ("path", "format", "speed")
# Session traces (session_replay.py): multi-turn conversations replayed closed per session.
SESSION_FORMATS = ("session", "aiperf-multi-turn")
TRACE_FORMATS = ("tailpod", "mooncake", *SESSION_FORMATS)
# Without the engine's tokenizer a prompt of N tokens is built as N / TOKENS_PER_WORD words of
# the prompt class's own text: English prose runs near 1.3 tokens a word in BPE vocabularies,
# so the length is approximate and every such row says so (`prompt_length: "approx_words"`).
TOKENS_PER_WORD = 1.3
# Mooncake's hash_ids name the prompt's KV blocks of this many tokens, shared ids a shared
# prefix ("the block_size ... is assumed to be 512. The length of the hash_ids array equals
# input_length // block_size": yuekaizhang/dynamo benchmarks/data_generator/README.md at
# 9cdba76d529aa9ea8397747ea099be0ed35506b2, the tools that read the Mooncake trace format).
MOONCAKE_BLOCK_TOKENS = 512
# A request sent this much later than its scheduled time means the client fell behind.
SCHEDULE_LAG_FLAG_S = 0.010


@dataclass
class Arrival:
    process: str
    rate: float | None  # requests/s; None only for a trace (its own times)
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson
    seed: int = 0
    requests: int | None = None
    duration_s: float | None = None
    trace: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        # rows are strict JSON: an infinite rate is written as the string "inf"
        rate: Any = "inf" if self.rate == math.inf else self.rate
        out: dict[str, Any] = {"process": self.process, "rate": rate,
                               "burstiness": self.burstiness, "seed": self.seed}
        if self.requests is not None:
            out["requests"] = self.requests
        if self.duration_s is not None:
            out["duration_s"] = self.duration_s
        if self.trace is not None:
            out["trace"] = dict(self.trace)
        return out


def _number(raw: Any, what: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ProbeError(f"arrival {what} must be a number, not {raw!r}")
    value = float(raw)
    if not math.isfinite(value) and not (what == "rate" and value == math.inf):
        raise ProbeError(f"arrival {what} must be finite")
    return value


def parse_arrival(raw: Any) -> Arrival:
    """A cell's `arrival` object, checked: unknown keys and impossible values are errors."""
    if not isinstance(raw, dict):
        raise ProbeError("arrival must be an object")
    unknown = sorted(set(raw) - set(ARRIVAL_KEYS))
    if unknown:
        raise ProbeError("unknown arrival key(s): " + ", ".join(unknown))
    process = raw.get("process", "poisson")
    if process not in PROCESSES:
        raise ProbeError(f"arrival process must be one of {', '.join(PROCESSES)}")
    if process == "trace":
        return _parse_trace_arrival(raw)
    if raw.get("rate") is None:
        raise ProbeError("arrival rate is required")
    rate = math.inf if raw["rate"] == "inf" else _number(raw["rate"], "rate")
    if rate <= 0:
        raise ProbeError("arrival rate must be > 0 (or inf: all at once)")
    burst = _number(raw.get("burstiness", 1.0), "burstiness")
    if burst <= 0:
        raise ProbeError("arrival burstiness must be > 0")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ProbeError("arrival seed must be an integer")
    requests = raw.get("requests")
    duration = raw.get("duration_s")
    if (requests is None) == (duration is None):
        raise ProbeError("arrival needs exactly one of requests, duration_s")
    if requests is not None and (isinstance(requests, bool) or not isinstance(requests, int)
                                 or requests < 1):
        raise ProbeError("arrival requests must be an integer >= 1")
    if duration is not None:
        duration = _number(duration, "duration_s")
        if duration <= 0:
            raise ProbeError("arrival duration_s must be > 0")
        if rate == math.inf:
            raise ProbeError("arrival rate inf needs requests, not duration_s")
    return Arrival(process, rate, burst, seed, requests, duration)


@dataclass
class TraceRequest:
    offset: float  # s from the trace's first arrival, already divided by the speed
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()  # Mooncake: the prompt's leading blocks, shared = same text


def _parse_trace_arrival(raw: dict[str, Any]) -> Arrival:
    if raw.get("rate") is not None:
        raise ProbeError("arrival rate is not allowed with process trace (the trace's own times)")
    trace = raw.get("trace")
    if not isinstance(trace, dict):
        raise ProbeError("arrival process trace needs trace: {path, format, speed}")
    unknown = sorted(set(trace) - set(TRACE_KEYS))
    if unknown:
        raise ProbeError("unknown trace key(s): " + ", ".join(unknown))
    path = trace.get("path")
    if not isinstance(path, str) or not path:
        raise ProbeError("trace path must be a non-empty string")
    fmt = trace.get("format", "tailpod")
    if fmt not in TRACE_FORMATS:
        raise ProbeError(f"trace format must be one of {', '.join(TRACE_FORMATS)}")
    speed = _number(trace.get("speed", 1.0), "trace speed")
    if speed <= 0:
        raise ProbeError("trace speed must be > 0")
    requests = raw.get("requests")
    duration = raw.get("duration_s")
    if requests is not None and duration is not None:
        raise ProbeError("a trace takes at most one of requests, duration_s (its first N, or "
                         "its first seconds)")
    if requests is not None and (isinstance(requests, bool) or not isinstance(requests, int)
                                 or requests < 1):
        raise ProbeError("arrival requests must be an integer >= 1")
    if duration is not None:
        duration = _number(duration, "duration_s")
        if duration <= 0:
            raise ProbeError("arrival duration_s must be > 0")
    arrival = Arrival("trace", None, 1.0, 0, requests, duration,
                      {"path": path, "format": fmt, "speed": speed})
    if fmt in SESSION_FORMATS:
        # read and checked by session_replay.read_sessions (load.run_cells, before any request)
        if requests is not None or duration is not None:
            raise ProbeError("a session trace is replayed whole (no requests or duration_s)")
        return arrival
    trace_requests(arrival)  # the file is read and checked here, before any request is sent
    return arrival


_WORD = re.compile(r"[A-Za-z0-9_.-]{1,16}")  # a role, a type, a short session id


def shown(value: Any) -> str:
    """A trace file's value as a refusal may show it: a number, a boolean or null as written, a
    short word (a role, a type) quoted; any other string only by its length, since the file is
    checked before tailpod can mask the user's secrets by value and it may carry one."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if _WORD.fullmatch(value) else f"a string of {len(value)} characters"
    return f"a JSON {'object' if isinstance(value, dict) else 'array'}"


def _int_field(obj: dict[str, Any], key: str, where: str, minimum: int) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProbeError(f"{where}: {key} must be an integer >= {minimum}, not {shown(value)}")
    return value


def json_object_lines(lines: Any, source: str, one: str = ""
                      ) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """The JSON objects of a JSON-lines trace, blank lines skipped: (line number, "FILE:LINE",
    object). A line that is not JSON, nested past the decoder's recursion, or not an object is
    refused naming FILE:LINE; `one` says what a line holds, for that last message."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            obj = json.loads(line)
        except ValueError:
            raise ProbeError(f"{where}: not valid JSON") from None
        except RecursionError:  # json's decoder recurses once per nesting level
            raise ProbeError(f"{where}: JSON nested too deeply") from None
        if not isinstance(obj, dict):
            raise ProbeError(f"{where}: not a JSON object" + (f" ({one})" if one else ""))
        yield lineno, where, obj


def parse_trace_lines(lines: Any, fmt: str,
                      source: str = "trace") -> list[tuple[float, int, int, tuple[int, ...]]]:
    """(arrival time in s, input tokens, output tokens, hash_ids) per request, in file order
    (hash_ids empty but for Mooncake's).

    tailpod: the request log `tailpod cost --log` reads (rows.jsonl included): `t_start`
    (or `ts`/`timestamp`, epoch s), `prompt_tokens`, `completion_tokens`; lines whose `kind` is
    not "request", and failed requests (`ok` false or no completion_tokens), are skipped.
    mooncake: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`."""
    out: list[tuple[float, int, int, tuple[int, ...]]] = []
    for _lineno, where, obj in json_object_lines(lines, source):
        if fmt == "mooncake":
            ts = obj.get("timestamp")
            if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
                raise ProbeError(f"{where}: timestamp (ms) must be a number")
            ids = obj.get("hash_ids", [])
            if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int)
                                                for h in ids):
                raise ProbeError(f"{where}: hash_ids must be a list of integers")
            out.append((float(ts) / 1000.0, _int_field(obj, "input_length", where, 1),
                        _int_field(obj, "output_length", where, 1), tuple(ids)))
            continue
        if obj.get("kind", "request") != "request" or obj.get("ok") is False \
                or obj.get("completion_tokens") is None:
            continue
        ts = next((obj[k] for k in ("t_start", "ts", "timestamp") if obj.get(k) is not None),
                  None)
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            raise ProbeError(f"{where}: t_start (epoch s) must be a number")
        out.append((float(ts), _int_field(obj, "prompt_tokens", where, 1),
                    _int_field(obj, "completion_tokens", where, 1), ()))
    if not out:
        raise ProbeError(f"{source}: no requests in the trace")
    return out


def trace_from_lines(entries: list[tuple[float, int, int, tuple[int, ...]]], speed: float,
                     requests: int | None = None,
                     duration_s: float | None = None) -> list[TraceRequest]:
    """Sorted by arrival; offsets from the first arrival divided by speed; then the first
    `requests`, or those due before `duration_s`."""
    ordered = sorted(entries, key=lambda e: e[0])  # stable: ties keep file order
    t0 = ordered[0][0]
    reqs = [TraceRequest((t - t0) / speed, i, o, h) for t, i, o, h in ordered]
    if requests is not None:
        reqs = reqs[:requests]
    if duration_s is not None:
        reqs = [r for r in reqs if r.offset < duration_s]
    return reqs


def trace_requests(arrival: Arrival) -> list[TraceRequest]:
    """The requests of a trace arrival, read from its file on this machine."""
    assert arrival.trace is not None
    path = arrival.trace["path"]
    try:
        with open(path, encoding="utf-8") as fh:
            entries = parse_trace_lines(fh, arrival.trace["format"], path)
    except OSError as exc:
        raise ProbeError(f"trace {path}: {exc.strerror or exc}") from None
    return trace_from_lines(entries, float(arrival.trace["speed"]), arrival.requests,
                            arrival.duration_s)


def block_source(block_text: str, source_text: str, hash_ids: tuple[int, ...],
                 input_tokens: int) -> str:
    """The text a trace request's prompt is cut from: one block of about MOONCAKE_BLOCK_TOKENS
    tokens per hash id, the same words for the same id (`block_text`, one text for the whole
    trace, rotated by the id, with the id written first, so two ids never read alike), then
    `source_text` (the request's own class prompt) for the rest. Two
    requests whose hash_ids start alike share that prefix word for word; the cut to the logged
    length (approx_prompt, fit_prompt) takes words from the end, so whole blocks survive it.
    Without hash_ids, the class text itself."""
    if not hash_ids:
        return source_text
    words = block_text.split() or ["hello"]
    per_block = max(1, int(round(MOONCAKE_BLOCK_TOKENS / TOKENS_PER_WORD)))
    blocks = []
    # the trace says how many blocks the prompt spans; no more than its length can hold
    for h in hash_ids[: max(1, -(-input_tokens // MOONCAKE_BLOCK_TOKENS))]:
        k = h % len(words)
        rotated = words[k:] + words[:k]
        blocks.append(words_prompt(f"block-{h} " + " ".join(rotated), per_block))
    return " ".join([*blocks, source_text])


def words_prompt(source_text: str, n: int) -> str:
    """The source text's words repeated and cut at n words."""
    words = source_text.split() or ["hello"]
    reps = -(-n // len(words))
    return " ".join((words * reps)[:n])


def approx_prompt(source_text: str, tokens: int) -> tuple[str, int]:
    """A prompt of about `tokens` tokens: the source text's words repeated, cut at
    round(tokens / TOKENS_PER_WORD) words (at least 1). Returns the text and its word count."""
    n = max(1, int(round(tokens / TOKENS_PER_WORD)))
    return words_prompt(source_text, n), n


def fit_prompt(source_text: str, tokens: int,
               count: Callable[[str], int | None]) -> tuple[str, int, int | None]:
    """A prompt as close to `tokens` tokens as whole words allow, by the engine's own count
    (`count`: text -> tokens as the request will be templated, or None when it cannot say).
    From the approximate word count, steps by the measured tokens a word until a count repeats
    or 8 tries; then the closest (ties: the shorter). Returns (text, words, its token count);
    the count is None when `count` failed, and the text is then the approximate one."""
    _, n = approx_prompt(source_text, tokens)
    seen: dict[int, int] = {}
    for _ in range(8):
        got = count(words_prompt(source_text, n))
        if got is None:
            text, words = approx_prompt(source_text, tokens)
            return text, words, None
        seen[n] = got
        if got == tokens:
            break
        per = got / n
        step = int(round((tokens - got) / per)) if per > 0 else 0
        if step == 0:
            step = 1 if got < tokens else -1
        nxt = max(1, n + step)
        if nxt in seen:
            break
        n = nxt
    best = min(seen, key=lambda k: (abs(seen[k] - tokens), seen[k] > tokens))
    return words_prompt(source_text, best), best, seen[best]


def schedule(arrival: Arrival) -> list[float]:
    """The offsets (s, from the cell's start; the first is 0) at which each request is due.

    Inter-arrival times: exponential with mean 1/rate (poisson), gamma with shape = burstiness
    and mean 1/rate (gamma; shape 1 is Poisson, < 1 burstier, > 1 smoother), or exactly 1/rate
    (constant). Rate inf sends every request at offset 0. With `duration_s`, the requests due
    before that offset. A trace: its own arrival times (trace_requests)."""
    if arrival.process == "trace":
        return [r.offset for r in trace_requests(arrival)]
    rate = arrival.rate
    assert rate is not None
    if rate == math.inf:
        return [0.0] * int(arrival.requests or 0)
    rng = random.Random(arrival.seed)
    shape = 1.0 if arrival.process == "poisson" else arrival.burstiness

    def gap() -> float:
        if arrival.process == "constant":
            return 1.0 / rate
        if shape == 1.0:
            return rng.expovariate(rate)
        return rng.gammavariate(shape, 1.0 / (rate * shape))

    out: list[float] = [0.0]
    if arrival.requests is not None:
        while len(out) < arrival.requests:
            out.append(out[-1] + gap())
        return out
    assert arrival.duration_s is not None
    while True:
        nxt = out[-1] + gap()
        if nxt >= arrival.duration_s:
            return out
        out.append(nxt)


def parse_slo(raw: Any) -> dict[str, float] | None:
    """`options.slo`: any subset of ttft_ms, tpot_ms, e2el_ms, each > 0; None when absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProbeError("slo must be an object")
    unknown = sorted(set(raw) - set(SLO_KEYS))
    if unknown:
        raise ProbeError("unknown slo key(s): " + ", ".join(unknown))
    out: dict[str, float] = {}
    for key in SLO_KEYS:
        if raw.get(key) is None:
            continue
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or not math.isfinite(value):
            raise ProbeError(f"slo {key} must be a number > 0")
        out[key] = float(value)
    return out or None


def meets_slo(slo: dict[str, float], ttft_s: float | None, tpot_s: float | None,
              e2e_s: float | None, ok: bool) -> bool:
    """Does one request meet every target? A failed request never does; a target whose figure
    the request lacks (no first token; a one-token answer has no TPOT) fails only for TTFT and
    end-to-end (a missing TPOT is not held against it, as in vLLM's goodput)."""
    if not ok:
        return False
    if "ttft_ms" in slo and (ttft_s is None or ttft_s * 1000.0 > slo["ttft_ms"]):
        return False
    if "e2el_ms" in slo and (e2e_s is None or e2e_s * 1000.0 > slo["e2el_ms"]):
        return False
    return not ("tpot_ms" in slo and tpot_s is not None and tpot_s * 1000.0 > slo["tpot_ms"])

"""The load loop (asyncio and threads), the request bodies, and one measured cell.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.client
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import OFF_POD_FLAG
from .arrival import (
    approx_prompt,
    block_source,
    fit_prompt,
    parse_arrival,
    schedule,
    trace_requests,
)
from .basics import (
    CLIENT_BOUND_CPU_FRACTION,
    DEFAULT_BASE_URL,
    PROBE_ENGINES,
    USER_AGENT,
    ProbeError,
    log,
)
from .metrics import (
    PER_REQUEST_MISMATCH_FLAG,
    _delta,
    acceptance_from_sglang_meta,
    acceptance_from_sglang_metrics,
    acceptance_from_vllm,
    per_request_disagrees,
    per_request_summary,
    request_acceptance,
    spec_snapshot,
)
from .procs import round_robin, run_parts, split_counts
from .prompt_classes import load_prompt_classes, prompt_text
from .rows import CellPlan, LoopOutcome, RowWriter, cell_row, request_row
from .session_replay import SESSION_FORMATS, Session, read_sessions, replay_sessions, turn_text
from .stream import ProtocolError, RequestResult, RequestSpec, StreamRecorder, result_from_recorder
from .structure import check_output, is_structured, structure_summary, unique_schema
from .transport import (
    AsyncConnection,
    Endpoint,
    _auth_headers,
    _new_connection,
    _scrub,
    _thread_exchange,
    detect_engine,
    discover_model,
    exchange_recorded,
    http_request,
    measured_from,
    scrape_metrics,
)

if TYPE_CHECKING:
    from .procs import Start


class LagMonitor:
    """How late a 10 ms timer fires: the probe's own scheduling lag (event loop or GIL)."""

    INTERVAL = 0.01

    def __init__(self) -> None:
        self.max_lag = 0.0
        self._stop = threading.Event()

    async def run_async(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(self.INTERVAL)
            self.max_lag = max(self.max_lag, time.perf_counter() - t - self.INTERVAL)

    def run_thread(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(self.INTERVAL)
            self.max_lag = max(self.max_lag, time.perf_counter() - t - self.INTERVAL)

    def stop(self) -> None:
        self._stop.set()


def _outcome(
    results: list[RequestResult | None], t0: float, t1: float, cpu_s: float, lag: float
) -> LoopOutcome:
    """The cell's wall time runs from its first request sent to its last stream ended (not
    from before the connections were opened), so it compares with what the server saw."""
    done = [r for r in results if r is not None]
    if done:
        t0 = min(r.t_send_perf for r in done)
        t1 = max(r.t_end_perf for r in done)
    return LoopOutcome(done, max(0.0, t1 - t0), cpu_s, lag)


def _slots(specs: list[RequestSpec]) -> list[RequestResult | None]:
    """One result slot per spec index (a worker process holds only its share of the indices)."""
    return [None] * (max((s.index for s in specs), default=-1) + 1)




async def _run_workers(worker: Callable[[], Any], n_workers: int,
                       results: list[RequestResult | None]) -> LoopOutcome:
    """Run `n_workers` copies of `worker` to the end under the event-loop lag monitor: the
    cell's wall clock, CPU time and largest lag around them (closed and timed loops alike)."""
    monitor = LagMonitor()
    mon_task = asyncio.ensure_future(monitor.run_async())
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(n_workers)))
    t1, cpu1 = time.perf_counter(), time.process_time()
    monitor.stop()
    mon_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await mon_task
    return _outcome(results, t0, t1, cpu1 - cpu0, monitor.max_lag)


async def _run_async(
    ep: Endpoint, specs: list[RequestSpec], concurrency: int, timeout: float, api: str,
    start: Start | None = None,
) -> LoopOutcome:
    results = _slots(specs)
    cursor = [0]
    headers = _auth_headers()
    n_workers = max(1, min(concurrency, len(specs)))
    connected = [0]
    all_connected = asyncio.Event()

    async def worker() -> None:
        conn = AsyncConnection(ep, headers)
        try:
            # Every worker connects first and they start together: the cell measures
            # requests, not a storm of connection set-ups ahead of the first wave.
            await conn.open(timeout)
            connected[0] += 1
            if connected[0] == n_workers:
                if start is not None:  # a worker process: wait for the common start
                    await asyncio.sleep(max(0.0, start() - time.perf_counter()))
                all_connected.set()
            await all_connected.wait()
            while cursor[0] < len(specs):
                spec = specs[cursor[0]]
                cursor[0] += 1
                results[spec.index] = await exchange_recorded(conn, spec, api, timeout)
        finally:
            conn.close()

    return await _run_workers(worker, n_workers, results)


def run_loop_asyncio(
    ep: Endpoint, specs: list[RequestSpec], concurrency: int, timeout: float, api: str
) -> LoopOutcome:
    return asyncio.run(_run_async(ep, specs, concurrency, timeout, api))


def run_loop_threads(
    ep: Endpoint, specs: list[RequestSpec], concurrency: int, timeout: float, api: str
) -> LoopOutcome:
    results: list[RequestResult | None] = [None] * len(specs)
    lock = threading.Lock()
    cursor = [0]
    headers = {"User-Agent": USER_AGENT, "Accept": "text/event-stream",
               "Content-Type": "application/json"}
    headers.update(_auth_headers())

    n = max(1, min(concurrency, len(specs)))
    barrier = threading.Barrier(n)

    def worker() -> None:
        first = _new_connection(ep, timeout)
        box: list[http.client.HTTPConnection | None] = [first]
        try:
            try:  # connect ahead, then start together (as the asyncio transport does)
                first.connect()
            except OSError:
                box[0] = None  # the first request reconnects and records any failure
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout)
            while True:
                with lock:
                    if cursor[0] >= len(specs):
                        return
                    spec = specs[cursor[0]]
                    cursor[0] += 1
                rec = StreamRecorder(api, structured=spec.structured)
                rec.start()
                try:
                    _thread_exchange(box, ep, spec, rec, headers, timeout)
                except (OSError, http.client.HTTPException, ProtocolError) as exc:
                    rec.fail(_scrub(f"{type(exc).__name__}: {exc}"))
                    if box[0] is not None:
                        box[0].close()
                        box[0] = None
                rec.finish(time.perf_counter())
                results[spec.index] = result_from_recorder(spec, rec)
        finally:
            if box[0] is not None:
                box[0].close()

    monitor = LagMonitor()
    mon = threading.Thread(target=monitor.run_thread, daemon=True)
    mon.start()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1, cpu1 = time.perf_counter(), time.process_time()
    monitor.stop()
    mon.join()
    return _outcome(results, t0, t1, cpu1 - cpu0, monitor.max_lag)


async def _run_open_async(
    ep: Endpoint, specs: list[RequestSpec], offsets: list[float], cap: int, timeout: float,
    api: str, start: Start | None = None,
) -> LoopOutcome:
    """Send specs[i] at offsets[i] after the start, whether or not earlier ones have ended;
    at most `cap` in flight (0 = no cap: a request due while the cap is full waits, and that
    wait counts in its latency from the schedule). Idle keep-alive connections are reused.
    `start` (a worker process's) gives the common start time the offsets count from."""
    results = _slots(specs)
    headers = _auth_headers()
    sem = asyncio.Semaphore(cap) if cap > 0 else None
    idle: list[AsyncConnection] = []
    for _ in range(min(len(specs), cap if cap > 0 else 16)):
        conn = AsyncConnection(ep, headers)
        await conn.open(timeout)
        idle.append(conn)

    async def one(spec: RequestSpec, due: float) -> None:
        conn = idle.pop() if idle else AsyncConnection(ep, headers)
        try:
            res = await exchange_recorded(conn, spec, api, timeout)
        finally:
            if sem is not None:
                sem.release()
        res.t_sched_perf = due
        results[spec.index] = res
        idle.append(conn)

    monitor = LagMonitor()
    mon_task = asyncio.ensure_future(monitor.run_async())
    t0 = start() if start is not None else time.perf_counter() + 0.01
    cpu0 = time.process_time()
    tasks = []
    for spec, off in zip(specs, offsets):
        due = t0 + off
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        if sem is not None:
            await sem.acquire()
        tasks.append(asyncio.ensure_future(one(spec, due)))
    await asyncio.gather(*tasks)
    t1, cpu1 = time.perf_counter(), time.process_time()
    monitor.stop()
    mon_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await mon_task
    for conn in idle:
        conn.close()
    return _outcome(results, t0, t1, cpu1 - cpu0, monitor.max_lag)


def _open_part(ep: Endpoint, specs: list[RequestSpec], offsets: list[float], cap: int,
               timeout: float, api: str, start: Start) -> LoopOutcome:
    return asyncio.run(_run_open_async(ep, specs, offsets, cap, timeout, api, start))


def _closed_part(ep: Endpoint, specs: list[RequestSpec], concurrency: int, timeout: float,
                 api: str, start: Start) -> LoopOutcome:
    return asyncio.run(_run_async(ep, specs, concurrency, timeout, api, start))


def run_open_loop(
    ep: Endpoint, specs: list[RequestSpec], offsets: list[float], cap: int, timeout: float,
    api: str, workers: int = 1,
) -> LoopOutcome:
    """The open loop, in this process or spread over `workers` processes (procs.py): each
    takes every workers-th request of the schedule, and a cap is shared out among them."""
    n = min(workers, len(specs), cap if cap > 0 else workers)
    if n <= 1:
        return asyncio.run(_run_open_async(ep, specs, offsets, cap, timeout, api))
    caps = split_counts(cap, n) if cap > 0 else [0] * n
    return run_parts([
        functools.partial(_open_part, ep, [specs[i] for i in share], [offsets[i] for i in share],
                          c, timeout, api)
        for share, c in zip(round_robin(len(specs), n), caps)])


def run_closed_loop(
    ep: Endpoint, specs: list[RequestSpec], concurrency: int, timeout: float, api: str,
    workers: int,
) -> LoopOutcome:
    """The asyncio closed loop over `workers` processes: the concurrency shared out, each with
    every workers-th request (a fixed share each, not one shared queue)."""
    n = min(workers, concurrency, len(specs))
    if n <= 1:
        return run_loop_asyncio(ep, specs, concurrency, timeout, api)
    return run_parts([
        functools.partial(_closed_part, ep, [specs[i] for i in share], c, timeout, api)
        for share, c in zip(round_robin(len(specs), n), split_counts(concurrency, n))])


async def _run_timed_async(ep: Endpoint, make_spec: Callable[[int], RequestSpec],
                           concurrency: int, duration_s: float, timeout: float,
                           api: str) -> LoopOutcome:
    results: list[RequestResult | None] = []
    headers = _auth_headers()
    n_workers = max(1, concurrency)
    connected = [0]
    all_connected = asyncio.Event()
    deadline = [0.0]

    async def worker() -> None:
        conn = AsyncConnection(ep, headers)
        try:
            await conn.open(timeout)  # connect first, then start together (as _run_async)
            connected[0] += 1
            if connected[0] == n_workers:
                deadline[0] = time.perf_counter() + duration_s
                all_connected.set()
            await all_connected.wait()
            while time.perf_counter() < deadline[0]:
                spec = make_spec(len(results))
                results.append(None)
                results[spec.index] = await exchange_recorded(conn, spec, api, timeout)
        finally:
            conn.close()

    return await _run_workers(worker, n_workers, results)


def run_timed_loop(ep: Endpoint, make_spec: Callable[[int], RequestSpec], concurrency: int,
                   duration_s: float, timeout: float, api: str) -> LoopOutcome:
    """The soak cell's closed loop (docs/probe.md, "Soak"): `concurrency` workers each send the
    next request as soon as their last one ended, until `duration_s` has passed since they
    started together; a request in flight then runs to its end and counts. Requests are built
    on demand (`make_spec(i)`), so an hour's soak never holds an hour of request bodies."""
    return asyncio.run(_run_timed_async(ep, make_spec, concurrency, duration_s, timeout, api))


# The concurrent warm-up of an open-loop cell (after its `warmup` requests one at a time; none
# when warmup is 0). On the H200 (vLLM 0.26, draft_model K=2, docs/benchmarks.md) the first
# open-loop cell after an engine start, warmed by one request, kept requests 2-9 waiting
# 1.2-1.4 s from their scheduled send, and every later one ~20 ms: the first batched
# speculative steps pay a one-off cost that a closed loop's warm-up at c=1 never reached either.
OPEN_LOOP_WARM_BURST = 8

TRANSPORTS: dict[str, Callable[..., LoopOutcome]] = {
    "asyncio": run_loop_asyncio,
    "threads": run_loop_threads,
}
DEFAULT_TRANSPORT = "asyncio"
# The longest soak cell: it is one `probe run` call, which the laptop stops after an hour
# (agent_client/driver.py PROBE_RUN_TIMEOUT_S), less room for its warm-up and last requests.
SOAK_MAX_S = 3300.0


# --------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------


@dataclass
class RunOptions:
    """What `probe run` measures every cell with; the cells themselves (CellPlan, rows.py) say
    arm, concurrency, rep, class and cache, and the verb's `out` says where rows go."""

    base_url: str = DEFAULT_BASE_URL
    model: str | None = None
    run_id: str | None = None
    requests_per_cell: int = 16
    max_tokens: int = 256
    ignore_eos: bool = True
    temperature: float = 0.0
    prompts_dir: str | None = None
    warmup: int = 1
    engine: str = "auto"  # auto | vllm | sglang | none
    api: str = "chat"  # chat | completions | generate (SGLang native)
    transport: str = DEFAULT_TRANSPORT
    request_timeout: float = 600.0
    client_bound_threshold: float = CLIENT_BOUND_CPU_FRACTION
    slo: dict[str, float] | None = None  # any of ttft_ms, tpot_ms, e2el_ms
    slo_percentile: float | None = None  # share of requests (%) that must meet it; default 90
    workers: int = 1  # load-generating processes per cell (procs.py); asyncio transport only
    # structured and tools classes: every measured request's schema is new text, and each cell
    # first times a new schema's first request against its repeat (grammar_compile)
    unique_schema: bool = False


def new_salt(run_id: str) -> str:
    return f"tailpod-{run_id}-{uuid.uuid4().hex}"


def build_body(
    opts: RunOptions,
    model: str,
    pclass: dict[str, Any],
    prompt: dict[str, Any],
    salt: str | None,
    max_tokens: int | None = None,
    engine: str | None = None,
    nonce: str | None = None,
) -> tuple[str, bytes]:
    """Path and JSON body of one streamed request. On SGLang's OpenAI routes it asks for the
    request's own speculative figures (`return_spec_tokens_details`, sgl-project/sglang PR
    #33518); vLLM sends them unasked when started with --per-request-spec-decode-metrics."""
    mt = max_tokens if max_tokens is not None else opts.max_tokens
    ignore_eos = opts.ignore_eos if pclass.get("ignore_eos") is None else bool(pclass["ignore_eos"])
    messages = prompt["messages"]
    body: dict[str, Any]
    if opts.api == "generate":
        sampling: dict[str, Any] = {
            "max_new_tokens": mt,
            "temperature": opts.temperature,
            "ignore_eos": ignore_eos,
        }
        if pclass.get("response_format"):
            schema = pclass["response_format"].get("json_schema", {}).get("schema")
            if schema is not None:
                sampling["json_schema"] = json.dumps(schema)
        body = {"text": prompt_text(messages), "sampling_params": sampling, "stream": True}
        if salt:
            body["extra_key"] = salt
        return "/generate", json.dumps(body).encode()
    body = {
        "model": model,
        "max_tokens": mt,
        "temperature": opts.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
    }
    if opts.api == "chat":
        body["messages"] = messages
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt_text(messages)
        path = "/v1/completions"
    if pclass.get("response_format"):
        body["response_format"] = pclass["response_format"]
    if opts.api == "chat" and pclass.get("tools"):
        body["tools"] = pclass["tools"]
        body["tool_choice"] = pclass.get("tool_choice", "required")
    if nonce is not None:  # unique_schema: this request's schemas are text no one sent before
        body = unique_schema(body, nonce)
    if engine == "sglang":
        body["return_spec_tokens_details"] = True
    if salt:
        body["cache_salt"] = salt
    return path, json.dumps(body).encode()


def engine_token_counter(ep: Endpoint, model: str,
                         api: str) -> Callable[[str], int | None] | None:
    """The engine's own token count of a prompt as it will be sent, through vLLM's
    POST /tokenize (`messages` for the chat API, so the chat template counts too; `prompt`
    otherwise); None when the engine has no such route (the prompts are then approximate)."""
    if api == "generate":
        return None

    def count(text: str) -> int | None:
        body: dict[str, Any] = {"model": model}
        if api == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        try:
            status, data = http_request(ep, "POST", "/tokenize", body, timeout=30.0)
            got = json.loads(data).get("count") if status == 200 else None
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            return None
        return got if isinstance(got, int) and not isinstance(got, bool) else None

    return count if count("hello") is not None else None


def _quiet_snapshot(ep: Endpoint, engine: str) -> dict[str, Any]:
    """Scrape before a cell, once the counters stop moving (up to ~1 s): the warm-up's last
    tokens may reach the engine's stat logger after its response did."""
    snap = spec_snapshot(scrape_metrics(ep) or [], engine)
    for _ in range(10):
        time.sleep(0.1)
        again = spec_snapshot(scrape_metrics(ep) or [], engine)
        if again == snap:
            break
        snap = again
    return snap


def _settled_after(
    ep: Endpoint, engine: str, before: dict[str, Any], expected_tokens: int | None
) -> dict[str, Any]:
    """Scrape after a cell; if the generation counter still trails the tokens the server
    reported in usage, give its stat logger up to ~1 s to catch up."""
    after: dict[str, Any] = {}
    for _ in range(6):
        samples = scrape_metrics(ep)
        after = spec_snapshot(samples or [], engine)
        gen = _delta(before, after, "generation_tokens")
        if expected_tokens is None or gen is None or gen >= expected_tokens:
            break
        time.sleep(0.2)
    return after


def grammar_compile(opts: RunOptions, ep: Endpoint, model: str, engine: str, run_id: str,
                    pclass: dict[str, Any]) -> dict[str, Any]:
    """The first request's grammar compile time (unique_schema; docs/probe.md): one request with
    a schema no one sent before, then the same schema again, one at a time, each salted (so
    neither hits the prefix cache): compile_s = the first's TTFT - the repeat's. The engine
    compiled, or fetched from its cache, the same grammar for both; only the first compiled."""
    nonce = uuid.uuid4().hex
    ttft: list[float | None] = []
    for _ in range(2):
        path, body = build_body(opts, model, pclass, pclass["prompts"][0], new_salt(run_id),
                                engine=engine, nonce=nonce)
        got = run_loop_asyncio(ep, [RequestSpec(0, path, body, "cold", opts.api, True)], 1,
                               opts.request_timeout, opts.api).results
        ttft.append(got[0].ttft_s if got and got[0].ok else None)
    first, again = ttft
    return {"first_ttft_s": first, "repeat_ttft_s": again,
            "compile_s": None if first is None or again is None else first - again}


def run_cell(
    opts: RunOptions,
    ep: Endpoint,
    model: str,
    engine: str,
    run_id: str,
    plan: CellPlan,
    pclass: dict[str, Any],
    where: str,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    loop_fn = TRANSPORTS[opts.transport]
    prompts = pclass["prompts"]
    structured = is_structured(pclass)
    # Warm-up (never counted): cold cells warm the engine with salted requests; warm cells
    # prime each prompt once without salt so the measured repeats hit the prefix cache.
    def salted(n: int, first: int) -> list[RequestSpec]:  # n cold warm-up requests
        out = []
        for i in range(first, first + n):
            path, body = build_body(opts, model, pclass, prompts[i % len(prompts)],
                                    new_salt(run_id), engine=engine)
            out.append(RequestSpec(i, path, body, "cold", opts.api, structured))
        return out

    warm_specs: list[RequestSpec] = []
    if plan.cache == "warm":
        for i, pr in enumerate(prompts[: opts.requests_per_cell]):
            path, body = build_body(opts, model, pclass, pr, None, engine=engine)
            warm_specs.append(RequestSpec(i, path, body, "warm", opts.api, structured))
    else:
        warm_specs = salted(opts.warmup, 0)
    if warm_specs:
        warm = loop_fn(ep, warm_specs, 1, opts.request_timeout, opts.api)
        bad = [r for r in warm.results if not r.ok]
        if plan.arrival is not None and plan.cache != "warm":
            # An open-loop schedule's first arrivals overlap, so the engine's batched paths
            # must be warm before it starts, and one request at a time never reaches them.
            burst = salted(min(OPEN_LOOP_WARM_BURST, opts.requests_per_cell), len(warm_specs))
            if burst:
                together = loop_fn(ep, burst, len(burst), opts.request_timeout, opts.api)
                bad += [r for r in together.results if not r.ok]
        if bad:
            log(f"warning: {len(bad)} warm-up request(s) failed in {plan.cell}: {bad[0].error}")
    unique = opts.unique_schema and structured and opts.api != "generate"
    compiled = grammar_compile(opts, ep, model, engine, run_id, pclass) if unique else None

    offsets: list[float] | None = None
    n_requests = opts.requests_per_cell
    trace_extra: list[dict[str, Any]] = []
    specs: list[RequestSpec] = []
    sessions: list[Session] | None = None
    speed = 1.0
    if plan.arrival is not None:
        arrival = parse_arrival(plan.arrival)
        if arrival.trace is not None and arrival.trace["format"] in SESSION_FORMATS:
            sessions = read_sessions(arrival.trace["path"], arrival.trace["format"])
            speed = float(arrival.trace["speed"])
            n_requests = sum(len(s.turns) for s in sessions)
        elif arrival.process == "trace":
            # each request built to the logged input length (approximately: words of the
            # class's own text) and held to the logged output length with ignore-EOS
            traced = trace_requests(arrival)
            offsets = [t.offset for t in traced]
            held = dict(pclass, ignore_eos=True)
            count = engine_token_counter(ep, model, opts.api)
            fitted: dict[tuple[int, int, tuple[int, ...]], tuple[str, int, int | None]] = {}
            for i, t in enumerate(traced):
                key = (i % len(prompts), t.input_tokens, t.hash_ids)
                if key not in fitted:
                    # Mooncake hash_ids: the same leading ids, the same leading text (a prefix
                    # cache can only share it in a warm cell: a cold one salts every request)
                    source = block_source(prompt_text(prompts[0]["messages"]),
                                          prompt_text(prompts[key[0]]["messages"]), t.hash_ids,
                                          t.input_tokens)
                    if count is None:
                        fitted[key] = (*approx_prompt(source, t.input_tokens), None)
                    else:
                        fitted[key] = fit_prompt(source, t.input_tokens, count)
                text, words, built = fitted[key]
                salt = new_salt(run_id) if plan.cache == "cold" else None
                path, body = build_body(opts, model, held,
                                        {"messages": [{"role": "user", "content": text}]},
                                        salt, max_tokens=t.output_tokens, engine=engine)
                specs.append(RequestSpec(i, path, body, plan.cache, opts.api, structured))
                length = ("approx_words" if built is None
                          else "exact" if built == t.input_tokens else "tokenized")
                trace_extra.append({"trace_input_tokens": t.input_tokens,
                                    "trace_output_tokens": t.output_tokens,
                                    "prompt_length": length, "prompt_words": words,
                                    **({"prompt_tokens_built": built} if built is not None
                                       else {})})
        else:
            offsets = schedule(arrival)
        if offsets is not None:
            n_requests = len(offsets)
    if not specs and plan.soak_s is None and sessions is None:
        for i in range(n_requests):
            pr = prompts[i % len(prompts)]
            salt = new_salt(run_id) if plan.cache == "cold" else None
            path, body = build_body(opts, model, pclass, pr, salt, engine=engine,
                                    nonce=uuid.uuid4().hex if unique else None)
            specs.append(RequestSpec(i, path, body, plan.cache, opts.api, structured))

    before: dict[str, Any] = {}
    if engine in PROBE_ENGINES:
        before = _quiet_snapshot(ep, engine)
    if plan.soak_s is not None:
        def soak_spec(i: int) -> RequestSpec:
            salt = new_salt(run_id) if plan.cache == "cold" else None
            path, body = build_body(opts, model, pclass, prompts[i % len(prompts)], salt,
                                    engine=engine, nonce=uuid.uuid4().hex if unique else None)
            return RequestSpec(i, path, body, plan.cache, opts.api, structured)

        outcome = run_timed_loop(ep, soak_spec, plan.concurrency, plan.soak_s,
                                 opts.request_timeout, opts.api)
    elif sessions is not None:
        outcome, trace_extra = _run_session_cell(opts, ep, model, engine, run_id, plan, pclass,
                                                 sessions, speed)
    elif offsets is not None:
        outcome = run_open_loop(ep, specs, offsets, plan.concurrency, opts.request_timeout,
                                opts.api, opts.workers)
    elif opts.workers > 1:
        outcome = run_closed_loop(ep, specs, plan.concurrency, opts.request_timeout, opts.api,
                                  opts.workers)
    else:
        outcome = loop_fn(ep, specs, plan.concurrency, opts.request_timeout, opts.api)

    ok = [r for r in outcome.results if r.ok]
    clean = len(ok) == len(outcome.results) and all(r.completion_tokens is not None for r in ok)
    usage_tokens = sum(r.completion_tokens or 0 for r in ok)
    acceptance: dict[str, Any] | None = None
    flags: list[str] = []
    if opts.api == "generate":
        acceptance = acceptance_from_sglang_meta([r.meta for r in ok if r.meta])
    elif engine in PROBE_ENGINES:
        after = _settled_after(ep, engine, before, usage_tokens if clean else None)
        if engine == "vllm":
            acceptance, flags = acceptance_from_vllm(before, after)
        else:
            acceptance, flags = acceptance_from_sglang_metrics(before, after, len(ok))
        gen = _delta(before, after, "generation_tokens")
        if acceptance is not None and clean and gen is not None and int(gen) != usage_tokens:
            # other traffic (or a lagging counter) shares the window: acceptance is suspect
            flags.append("acceptance_window_mismatch")
    rows = [request_row(run_id, plan, r, where) for r in outcome.results]
    per_request: list[dict[str, Any]] = []
    for r, row in zip(outcome.results, rows):
        if r.spec is not None:
            got = request_acceptance(r.spec[0], r.spec[1], r.completion_tokens)
            if got is not None:
                row["spec_acceptance"] = got
                if r.ok:
                    per_request.append(got)
        if structured and r.ok:
            row.update(check_output(pclass, r.content, r.tool_calls))
    if trace_extra:
        for row in rows:
            row.update(trace_extra[row["index"]])
    summary = per_request_summary(per_request)
    if summary is not None and clean and acceptance is not None and acceptance.get("source") \
            != "sglang_meta" and per_request_disagrees(summary, acceptance):
        flags.append(PER_REQUEST_MISMATCH_FLAG)
    cell = cell_row(
        run_id, plan, outcome, acceptance, flags, where, opts.client_bound_threshold,
        opts.slo, opts.slo_percentile,
    )
    if summary is not None:
        cell["acceptance_per_request"] = summary
    if structured:
        cell["structure"] = structure_summary(rows)
        if compiled is not None and cell["structure"] is not None:
            cell["structure"]["grammar_compile"] = compiled
    if trace_extra and offsets and len(offsets) > 1 and offsets[-1] > 0:
        # a trace offers its own mean rate: requests after the first over the span they arrive in
        cell["offered_rate_rps"] = (len(offsets) - 1) / offsets[-1]
    if sessions is not None:
        cell["sessions"] = {"sessions": len(sessions),
                            "turns_max": max(len(s.turns) for s in sessions),
                            "format": (plan.arrival or {}).get("trace", {}).get("format")}
    elif trace_extra:
        kinds = sorted({str(e["prompt_length"]) for e in trace_extra})
        cell["prompt_length"] = kinds[0] if len(kinds) == 1 else "mixed"
    return rows, cell


def _run_session_cell(
    opts: RunOptions, ep: Endpoint, model: str, engine: str, run_id: str, plan: CellPlan,
    pclass: dict[str, Any], sessions: list[Session], speed: float,
) -> tuple[LoopOutcome, list[dict[str, Any]]]:
    """A session trace's cell (session_replay.py): every turn held to its max_tokens with ignore-EOS,
    so each arm's context grows by the same number of tokens a turn. A cold cell salts every
    request with one salt of its own: turns of a session and sessions sharing a prefix hit the
    prefix cache inside the cell, never another cell's entries; a warm cell sends no salt."""
    prompts = pclass["prompts"]
    held = dict(pclass, ignore_eos=True)
    salt = new_salt(run_id) if plan.cache == "cold" else None
    texts = [[turn_text(s, k, prompt_text(prompts[n % len(prompts)]["messages"]))
              for k in range(len(s.turns))] for n, s in enumerate(sessions)]

    def build(messages: list[dict[str, Any]], max_tokens: int | None) -> tuple[str, bytes]:
        return build_body(opts, model, held, {"messages": messages}, salt,
                          max_tokens=max_tokens, engine=engine)

    outcome, extra = replay_sessions(ep, sessions, texts, build, plan.cache, plan.concurrency,
                                     opts.request_timeout, opts.api, LagMonitor(), speed)
    if opts.temperature != 0:
        for e in extra:  # sampled answers differ by chance: nothing for the session gate
            e["answer_digest"] = None
    return outcome, extra


def default_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _progress_line(cell: dict[str, Any]) -> str:
    acc = cell.get("acceptance") or {}
    wall = cell["wall_s"]
    flags = (" [" + ", ".join(cell["flags"]) + "]") if cell["flags"] else ""
    return (
        f"{cell['cell']}: {cell['requests']} req, {cell['failed']} failed, "
        f"{_fmt(cell['output_tok_s'], '.1f')} tok/s, ttft p50 {_fmt(cell['ttft_p50_s'], '.4f')}s, "
        f"e2e p50 {_fmt(cell['e2e_p50_s'], '.3f')}s, "
        f"cpu {100.0 * cell['client_cpu_s'] / wall if wall else 0.0:.0f}%, "
        f"accept len {_fmt(acc.get('acceptance_length'), '.3f')}{_open_loop_note(cell)}{flags}"
    )


def _open_loop_note(cell: dict[str, Any]) -> str:
    out = ""
    if "arrival" in cell:
        out += (f", offered {_fmt(cell.get('offered_rate_rps'), '.2f')} req/s, achieved "
                f"{_fmt(cell.get('achieved_rate_rps'), '.2f')} req/s, ttft p50 from schedule "
                f"{_fmt(cell.get('ttft_sched_p50_s'), '.4f')}s, lag max "
                f"{_fmt(cell.get('schedule_lag_max_s'), '.4f')}s")
    if "slo_attainment" in cell:
        out += (f", SLO {_fmt(100.0 * (cell['slo_attainment'] or 0.0), '.1f')}% "
                f"goodput {_fmt(cell.get('goodput_rps'), '.2f')} req/s")
    return out


def run_cells(
    opts: RunOptions, cells: list[CellPlan], writer: RowWriter | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Measure exactly `cells`, in order, and return (run facts, rows): each cell's request rows
    then its cell row. The sweep (which cells, which rep) is the laptop's (tailpod/measure/sweep.py);
    rep and cell id are written as given. `writer` also appends each row to a file on the pod."""
    if opts.transport not in TRANSPORTS:
        raise ProbeError(f"unknown transport {opts.transport!r}")
    if opts.api not in ("chat", "completions", "generate"):
        raise ProbeError("api must be chat, completions or generate")
    for plan in cells:
        if plan.cache not in ("cold", "warm"):
            raise ProbeError(f"cell {plan.cell}: cache must be cold or warm")
        if plan.arrival is not None:
            arrival = parse_arrival(plan.arrival)  # every cell checked before the first runs
            if arrival.trace is not None and arrival.trace["format"] in SESSION_FORMATS:
                if opts.api != "chat":
                    raise ProbeError(f"cell {plan.cell}: a session trace needs the chat API (a "
                                     "conversation of messages)")
                read_sessions(arrival.trace["path"], arrival.trace["format"])
            if plan.concurrency < 0:
                raise ProbeError(f"cell {plan.cell}: an in-flight cap must be >= 0")
            if opts.transport != "asyncio":
                raise ProbeError(f"cell {plan.cell}: an open-loop cell needs transport asyncio")
        elif plan.soak_s is not None and not 0 < plan.soak_s <= SOAK_MAX_S:
            raise ProbeError(f"cell {plan.cell}: soak_s must be > 0 and at most "
                             f"{SOAK_MAX_S:.0f} s, got {plan.soak_s}")
        elif plan.concurrency < 1:
            raise ProbeError(f"cell {plan.cell}: concurrency must be >= 1")
    if opts.requests_per_cell < 1:
        raise ProbeError("requests per cell must be >= 1")
    if opts.workers < 1:
        raise ProbeError("workers must be >= 1")
    if opts.workers > 1 and opts.transport != "asyncio":
        raise ProbeError("workers > 1 needs transport asyncio")
    ep = Endpoint.parse(opts.base_url)
    where = measured_from(opts.base_url)
    run_id = opts.run_id or default_run_id()
    wanted = sorted({plan.prompt_class for plan in cells})
    classes = load_prompt_classes(opts.prompts_dir, wanted)
    model = opts.model or ("default" if opts.api == "generate" else discover_model(ep))
    engine = opts.engine
    if engine == "auto":
        engine = detect_engine(scrape_metrics(ep))
    if where != "pod":
        log(f"base URL is not loopback: rows are stamped off-pod / '{OFF_POD_FLAG}'")
    log(f"run {run_id} model={model} engine={engine} transport={opts.transport} "
        f"workers={opts.workers} cells={len(cells)} n={opts.requests_per_cell}")
    rows: list[dict[str, Any]] = []
    for plan in cells:
        if plan.arrival is None and opts.requests_per_cell < plan.concurrency:
            log(f"note: {opts.requests_per_cell} requests per cell < concurrency {plan.concurrency}")
        request_rows, cell = run_cell(
            opts, ep, model, engine, run_id, plan, classes[plan.prompt_class], where
        )
        for row in [*request_rows, cell]:
            rows.append(row)
            if writer is not None:
                writer.write(row)
        log(_progress_line(cell))
    facts = {"run_id": run_id, "model": model, "engine": engine, "measured_from": where}
    return facts, rows

"""One cell's load spread over worker processes (stdlib `multiprocessing`, fork + pipes).

One Python process tops out near 94k tok/s of streamed tokens (issue 28, measured on a 16-core
host), so a cell at a higher rate is split: request i goes to worker i mod N (round robin over
the schedule, so each worker's share of an open-loop schedule has the same shape), the cap or
concurrency is shared out so that the workers together keep the cell's own, and every worker
starts its share at the same instant on the system-wide monotonic clock (`time.perf_counter`
is CLOCK_MONOTONIC on Linux: one clock for every process), so scheduled offsets keep their
meaning across workers. The rows come back through a pipe and are merged in index order.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from .basics import ProbeError
from .rows import LoopOutcome

# Time from the last worker reporting ready to the common start: enough for every worker to
# read the start time off its pipe and be waiting on it before the first request is due.
START_MARGIN_S = 0.05
READY_TIMEOUT_S = 120.0  # a worker opens its connections before it reports ready

if TYPE_CHECKING:  # aliases for annotations only: the agent runs on Python 3.8 too
    Start = Callable[[], float]  # blocks until the common start; returns it (perf_counter)
    Part = Callable[[Start], LoopOutcome]


def round_robin(n_items: int, n_parts: int) -> list[list[int]]:
    """Indices 0..n_items-1 dealt to n_parts in turn: part k gets k, k + n, k + 2n, ..."""
    return [list(range(k, n_items, n_parts)) for k in range(n_parts)]


def split_counts(total: int, n_parts: int) -> list[int]:
    """`total` shared out over n_parts as evenly as it goes, the first parts one larger."""
    base, extra = divmod(total, n_parts)
    return [base + (1 if k < extra else 0) for k in range(n_parts)]


def _child(part: Part, conn: Connection) -> None:
    def start() -> float:
        conn.send(("ready", None))
        t0: float = conn.recv()
        return t0

    try:
        conn.send(("done", part(start)))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _recv(proc: Any, conn: Connection, timeout: float | None, what: str) -> tuple[str, Any]:
    """The worker's next message; a worker that dies first is an error, not a hang (None = no
    deadline: each request carries its own timeout, so a live worker ends by itself)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not conn.poll(0.5):
        if not proc.is_alive() and not conn.poll(0):
            raise ProbeError(f"a load worker exited (code {proc.exitcode}) before it was {what}")
        if deadline is not None and time.monotonic() > deadline:
            raise ProbeError(f"a load worker sent nothing for {timeout:.0f} s ({what})")
    try:
        msg: tuple[str, Any] = conn.recv()
    except EOFError:
        raise ProbeError(f"a load worker exited before it was {what}") from None
    if msg[0] == "error":
        raise ProbeError(f"a load worker failed: {msg[1]}")
    return msg


def merge(outcomes: list[LoopOutcome]) -> LoopOutcome:
    """The workers' outcomes as one cell: results in index order, the wall from the first send
    to the last stream end of any worker, CPU summed (and the busiest worker's kept), worst lag."""
    results = sorted((r for o in outcomes for r in o.results), key=lambda r: r.index)
    if results:
        wall = max(r.t_end_perf for r in results) - min(r.t_send_perf for r in results)
    else:
        wall = max((o.wall_s for o in outcomes), default=0.0)
    lags = [o.loop_lag_max_s for o in outcomes if o.loop_lag_max_s is not None]
    return LoopOutcome(results, max(0.0, wall), sum(o.cpu_s for o in outcomes),
                       max(lags) if lags else None, workers=len(outcomes),
                       busiest_cpu_s=max((o.cpu_s for o in outcomes), default=0.0))


def run_parts(parts: list[Part]) -> LoopOutcome:
    """Run each part in a forked worker, start them together, and merge what they measured."""
    ctx = multiprocessing.get_context("fork")
    procs: list[tuple[Any, Connection]] = []
    try:
        for part in parts:
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_child, args=(part, theirs), daemon=True)
            proc.start()
            theirs.close()
            procs.append((proc, mine))
        for proc, conn in procs:
            _recv(proc, conn, READY_TIMEOUT_S, "ready")
        t0 = time.perf_counter() + START_MARGIN_S
        for _, conn in procs:
            conn.send(t0)
        outcomes = [_recv(proc, conn, None, "done")[1] for proc, conn in procs]
    finally:
        for proc, conn in procs:
            conn.close()
            proc.join(5)
            if proc.is_alive():  # only after a failure: a worker still running is stopped
                proc.terminate()
                proc.join(5)
    return merge(outcomes)

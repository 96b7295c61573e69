"""The session gate: the token-identity gate, turn by turn, over a session trace's replay
(docs/results.md, "Sessions"). Every arm replays each session with its own answers in the
history; at temperature 0 an arm whose every earlier answer equals the plain arm's sends, turn for
turn, the very prompts plain sent, so its answer to the next turn must equal plain's too. The
first turn of a session whose answer differs from plain's voids the speculative arm; past it the
two histories differ and nothing later in that session is compared.

Applied when a run is read (`io.load_run`), as the structure gate is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from tailpod.results.schema import RequestRow, RunMeta
from tailpod.results.structure_gate import void_arms

Key = tuple[str, str, str, int]  # prompt class, cache, session id, turn


def session_verdicts(meta: RunMeta, requests: Sequence[RequestRow]) -> dict[str, str]:
    """Each speculative arm's session-gate failure, by arm label: the first turn (by prompt
    class, cache, rep, then session) whose answer differs from the plain arm's. The reference for
    a turn is the set of plain's answers to it over its reps; a turn plain answered differently in
    two reps (batch nondeterminism) is not a reference, and that session is not judged past it;
    nor past a turn either arm did not answer. Nothing is judged without a plain arm."""
    plain_labels = {a.label for a in meta.arms if a.k == 0} or {"plain"}
    ref: dict[Key, set[str]] = defaultdict(set)
    runs: dict[tuple[str, str, str, int, str], dict[int, str | None]] = defaultdict(dict)
    for r in requests:
        if r.session_id is None or r.turn is None:
            continue
        digest = r.answer_digest if r.ok else None
        if r.arm in plain_labels:
            if digest is not None:
                ref[(r.prompt_class, r.cache, r.session_id, r.turn)].add(digest)
            continue
        runs[(r.arm, r.prompt_class, r.cache, r.rep, r.session_id)][r.turn] = digest
    if not ref:
        return {}
    verdicts: dict[str, str] = {}
    for (arm, pclass, cache, rep, sid), turns in sorted(runs.items()):
        if arm in verdicts:
            continue
        for turn in sorted(turns):
            want = ref.get((pclass, cache, sid, turn), set())
            got = turns[turn]
            if got is None or len(want) != 1:
                break  # no answer, or no single reference: the histories are no longer known
            if got not in want:
                verdicts[arm] = (f"session gate failed on {pclass}: session {sid!r} turn {turn} "
                                 f"(rep {rep}) answers differently from plain, after "
                                 f"{turn - 1} identical turn(s)")
                break
    return verdicts


def apply_session_gate(meta: RunMeta, requests: Sequence[RequestRow]) -> RunMeta:
    """`meta` with every arm that fails the session gate void, its reason said."""
    return void_arms(meta, session_verdicts(meta, requests))

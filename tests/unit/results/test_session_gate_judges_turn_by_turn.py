"""The session gate (tailpod/results/session_gate.py) on rows written by hand: which rows are a
reference, which cell a speculative turn is judged against, where judging a session stops, and
the verdict's words (the turn, the rep, the identical turns before it)."""

from __future__ import annotations

from tailpod.results.schema import RequestRow
from tailpod.results.session_gate import apply_session_gate, session_verdicts
from tests.helpers.run_builder import build_run


def _req(arm: str, sid: str | None, turn: int | None, digest: str | None, *, rep: int = 0,
         ok: bool | None = None, pclass: str = "prose", cache: str = "cold") -> RequestRow:
    return RequestRow(run_id="run-a", arm=arm, concurrency=0, rep=rep, prompt_class=pclass,
                      cell=f"{arm}|trace|r{rep}|{pclass}", index=turn or 0,
                      ok=(digest is not None) if ok is None else ok, t_start=0.0, cache=cache,
                      session_id=sid, turn=turn, answer_digest=digest)


META = build_run({"plain": {1: [1.0]}, "ngram-k3": {1: [1.0]}}).meta


def _plain(sid: str, *digests: str, **kw: object) -> list[RequestRow]:
    return [_req("plain", sid, t, d, **kw) for t, d in enumerate(digests, 1)]  # type: ignore[arg-type]


def _spec(sid: str, *digests: str | None, **kw: object) -> list[RequestRow]:
    return [_req("ngram-k3", sid, t, d, **kw) for t, d in enumerate(digests, 1)]  # type: ignore[arg-type]


def test_the_first_differing_turn_is_named_with_its_rep_and_the_turns_before_it() -> None:
    rows = [*_plain("s", "a", "b", "c", "d"), *_spec("s", "a", "b", "x", "y")]
    assert session_verdicts(META, rows) == {
        "ngram-k3": "session gate failed on prose: session 's' turn 3 (rep 0) answers "
                    "differently from plain, after 2 identical turn(s)"}


def test_identical_sessions_pass() -> None:
    assert session_verdicts(META, [*_plain("s", "a", "b"), *_spec("s", "a", "b")]) == {}


def test_no_plain_session_rows_no_verdict() -> None:
    assert session_verdicts(META, _spec("s", "a", "b")) == {}
    # plain's failed turns are no reference either
    failed = [_req("plain", "s", 1, "a", ok=False)]
    assert session_verdicts(META, [*failed, *_spec("s", "z")]) == {}


def test_rows_outside_a_session_are_not_judged() -> None:
    rows = [_req("plain", None, 1, "a"), _req("ngram-k3", None, 1, "z"),
            _req("plain", "s", None, "a"), _req("ngram-k3", "s", None, "z"),
            *_plain("t", "a"), *_spec("t", "a")]
    assert session_verdicts(META, rows) == {}


def test_a_failed_speculative_turn_ends_the_session_and_is_no_mismatch() -> None:
    # the failed turn carries a digest of what it had, which is not an answer
    rows = [*_plain("s", "a", "b", "c"), _req("ngram-k3", "s", 1, "a"),
            _req("ngram-k3", "s", 2, "q", ok=False), _req("ngram-k3", "s", 3, "z")]
    assert session_verdicts(META, rows) == {}


def test_a_turn_plain_did_not_answer_ends_the_session() -> None:
    rows = [_req("plain", "s", 1, "a"), _req("plain", "s", 3, "c"),
            *_spec("s", "a", "b", "z")]
    assert session_verdicts(META, rows) == {}


def test_each_turn_is_judged_against_plains_answers_in_its_own_class_cache_and_session() -> None:
    spec = _spec("s", "a", "b")
    assert session_verdicts(META, [*_plain("s", "a", "x", pclass="code"), *spec]) == {}
    assert session_verdicts(META, [*_plain("s", "a", "x", cache="warm"), *spec]) == {}
    assert session_verdicts(META, [*_plain("t", "a", "x"), *spec]) == {}
    # plain's reps agree, so either rep's answer is the reference for every spec rep
    rows = [*_plain("s", "a", "b", rep=0), *_plain("s", "a", "b", rep=1),
            *_spec("s", "a", "b", rep=0), *_spec("s", "a", "x", rep=1)]
    assert session_verdicts(META, rows) == {
        "ngram-k3": "session gate failed on prose: session 's' turn 2 (rep 1) answers "
                    "differently from plain, after 1 identical turn(s)"}


def test_one_verdict_per_arm_the_first_by_rep_then_session() -> None:
    rows = [*_plain("a", "p"), *_plain("b", "q"),
            *_spec("b", "x", rep=0), *_spec("a", "y", rep=1), *_spec("a", "y", rep=0)]
    assert session_verdicts(META, rows) == {
        "ngram-k3": "session gate failed on prose: session 'a' turn 1 (rep 0) answers "
                    "differently from plain, after 0 identical turn(s)"}


def test_every_k0_arm_answers_for_plain_and_the_plain_label_without_one() -> None:
    meta = build_run({"base": {1: [1.0]}, "ngram-k3": {1: [1.0]}}).meta
    rows = [_req("base", "s", 1, "a"), *_spec("s", "z")]
    assert "turn 1" in session_verdicts(meta, rows)["ngram-k3"]
    only_spec = build_run({"ngram-k3": {1: [1.0]}}).meta
    assert "turn 1" in session_verdicts(only_spec, [*_plain("s", "a"), *_spec("s", "z")])[
        "ngram-k3"]


def test_apply_voids_the_arm_with_the_verdict() -> None:
    rows = [*_plain("s", "a"), *_spec("s", "z")]
    meta = apply_session_gate(META, rows)
    spec = next(a for a in meta.arms if a.label == "ngram-k3")
    assert spec.void and spec.void_reason == session_verdicts(META, rows)["ngram-k3"]
    assert apply_session_gate(META, [*_plain("s", "a"), *_spec("s", "a")]) is META


def test_rows_outside_a_session_do_not_end_the_judging() -> None:
    rows = [_req("plain", None, None, "a"), _req("ngram-k3", None, 1, "q"),
            *_plain("s", "a"), *_spec("s", "z")]
    assert "turn 1" in session_verdicts(META, rows)["ngram-k3"]


def test_every_speculative_arm_gets_its_own_verdict() -> None:
    meta = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}, "ngram-k3": {1: [1.0]}}).meta
    mtp = [_req("mtp-k2", "s", 1, "x", rep=rep) for rep in (0, 1)]
    rows = [*_plain("s", "a"), *mtp, *_spec("s", "y")]
    assert sorted(session_verdicts(meta, rows)) == ["mtp-k2", "ngram-k3"]

"""`benchmark --soak` judges an acceptance collapse from each request's own acceptance, which
vLLM gives only from 0.29 (`--per-request-spec-decode-metrics`, docs/probe.md). On an older
release the soak's minutes are paid for and judge nothing (the sandbox's v0.11.0-tagged image: a
soak with 0 verify steps in every minute). Before anything waits on the pod, `benchmark` says
which speculative arms cannot be judged, and what the soak still costs; a release that gives the
figures gets no such line."""

from __future__ import annotations

from typing import Any

from tailpod.engines.base import EngineConfig
from tailpod.ledger import PodRecord
from tests.unit.cli.test_soak_minutes_checked_first import reach  # noqa: F401  (the fixture)


def _pod(version: str | None, extra: list[str] | None = None) -> PodRecord:
    cfg = EngineConfig(engine="vllm", model="org/m", version=version,
                       extra_args=tuple(extra or ()))
    return PodRecord(run_tag="tp-x", status="running", provider="runpod", engine=cfg.to_json())


def _said(result: Any) -> str:
    return " ".join(result.output.split())


def test_an_old_vllm_release_is_named_before_the_ssh_wait(reach: Any) -> None:  # noqa: F811
    result, seen = reach(["--soak", "5", "--spec-k", "0,2", "--spec-method", "ngram"],
                         _pod("0.26.0"))
    assert seen == ["ledger", "ssh wait"], result.output
    said = _said(result)
    assert "--soak: vLLM 0.26.0 gives ngram-k2 no per-request acceptance (from 0.29" in said
    assert "cannot judge an acceptance collapse" in said
    # two arms soak 5 minutes each: 10 minutes of pod time
    assert "10 minutes of pod time" in said


def test_a_release_with_per_request_figures_says_nothing(reach: Any) -> None:  # noqa: F811
    result, seen = reach(["--soak", "5", "--spec-k", "0,2", "--spec-method", "ngram"],
                         _pod("0.32.0"))
    assert seen == ["ledger", "ssh wait"], result.output
    assert "per-request acceptance" not in _said(result)


def test_the_users_own_flag_counts(reach: Any) -> None:  # noqa: F811
    result, _ = reach(["--soak", "5", "--spec-k", "0,2", "--spec-method", "ngram"],
                      _pod(None, ["--per-request-spec-decode-metrics=detailed"]))
    assert "per-request acceptance" not in _said(result)


def test_without_soak_nothing_is_said(reach: Any) -> None:  # noqa: F811
    result, _ = reach(["--spec-k", "0,2", "--spec-method", "ngram"], _pod("0.26.0"))
    assert "per-request acceptance" not in _said(result)

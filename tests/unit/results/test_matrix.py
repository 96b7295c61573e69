"""The card matrix report from constructed runs with known answers, and the card syntax."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailpod.errors import ConfigError
from tailpod.results.analysis import analyze
from tailpod.results.io import Run
from tailpod.results.matrix import (
    Card,
    build_matrix,
    parse_card,
    parse_cards,
    plot_matrix_cost,
    render_matrix_markdown,
)


@pytest.mark.parametrize(
    ("text", "card"),
    [
        ("runpod:NVIDIA H100 80GB HBM3", Card("runpod", "NVIDIA H100 80GB HBM3", 1)),
        ('vastai:"RTX 4090"x2', Card("vastai", "RTX 4090", 2)),
        ("vast:RTX 4090 x4", Card("vastai", "RTX 4090", 4)),
        ('runpod:"NVIDIA A100 SXM4"', Card("runpod", "NVIDIA A100 SXM4", 1)),
    ],
)
def test_card_syntax(text: str, card: Card) -> None:
    assert parse_card(text) == card


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        (["RTX 4090"], "not provider:GPU"),
        (["local:cpu"], "rents nothing"),
        (["lambda:H100"], "unknown provider"),
        (["runpod:A40x0"], "at least 1"),
        (["runpod:A40", "runpod: a40 "], "duplicate card"),
        ([], "no cards"),
    ],
)
def test_bad_cards_are_refused(texts: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_cards(texts)


def test_same_gpu_with_another_count_is_another_card() -> None:
    cards = parse_cards(["vastai:RTX 4090", "vastai:RTX 4090x2"])
    assert [c.label for c in cards] == ["vastai:RTX 4090", "vastai:RTX 4090x2"]


def _outcome(make_run: Callable[..., Run], label: str, price: float,
             tput: dict[str, dict[int, list[float]]], **kw: Any) -> dict[str, Any]:
    analysis = analyze(make_run(tput, run_id=label, price=price, **kw))
    return {"card": label, "status": "done", "error": None, "spend_usd": 0.5,
            "proof": f"/r/{label}/billing-proof.json", "analysis": analysis, "run": None}


def test_cheapest_card_per_band_crossover_and_failed_card(make_run: Callable[..., Run],
                                                          tmp_path: Path) -> None:
    # Card A: $1/h, flat 100 tok/s. Card B: $4/h, throughput grows 8x with concurrency:
    # A is cheaper per token at c=1,2, B from c=4 (4/800 < 1/100).
    a = _outcome(make_run, "runpod:A", 1.0, {"plain": {1: [100.0], 2: [100.0], 4: [100.0]}})
    b = _outcome(make_run, "vastai:Bx2", 4.0,
                 {"plain": {1: [100.0], 2: [300.0], 4: [800.0]},
                  "mtp-k2": {1: [400.0], 2: [400.0], 4: [400.0]}},
                 void={"mtp-k2": "token mismatch at prompt 1"})
    failed = {"card": "runpod:C", "status": "failed", "error": "no capacity", "spend_usd": 0.0}
    matrix = build_matrix([a, b, failed])
    assert matrix["concurrency"] == [1, 2, 4]
    assert [t["ranking"] for t in matrix["tables"]] == [
        ["runpod:A", "vastai:Bx2"], ["runpod:A", "vastai:Bx2"], ["vastai:Bx2", "runpod:A"]]
    # the void arm is faster at c=1 but never wins, and is listed without a cost
    assert matrix["cheapest"][0] == {"concurrency": 1, "card": "runpod:A", "arm": "plain",
                                     "usd_per_mtok": pytest.approx(1.0 / 3600 / 100 * 1e6)}
    void_rows = [r for t in matrix["tables"] for r in t["rows"] if r["void"]]
    assert len(void_rows) == 3 and all(r["usd_per_mtok"] is None for r in void_rows)
    assert matrix["bands"] == [{"from": 1, "to": 2, "card": "runpod:A"},
                               {"from": 4, "to": 4, "card": "vastai:Bx2"}]
    assert [c["card"] for c in matrix["failed"]] == ["runpod:C"]
    assert set(matrix["crossover"]) == {"runpod:A", "vastai:Bx2"}
    assert set(matrix["knee"]) == {"runpod:A", "vastai:Bx2"}
    assert matrix["stamp"] is None
    markdown = render_matrix_markdown(matrix)
    assert "- c=1–2: **runpod:A**" in markdown and "- c=4: **vastai:Bx2**" in markdown
    assert "- runpod:C: failed: no capacity" in markdown
    assert "~~mtp-k2~~" in markdown
    assert plot_matrix_cost(matrix, tmp_path / "m.png").stat().st_size > 0


def test_a_stamp_on_any_card_or_the_matrix_stamps_every_number(
    make_run: Callable[..., Run],
) -> None:
    on_pod = _outcome(make_run, "runpod:A", 1.0, {"plain": {1: [100.0]}})
    off_pod = _outcome(make_run, "runpod:B", 1.0, {"plain": {1: [100.0]}},
                       measured_from="off-pod")
    assert build_matrix([on_pod, off_pod])["stamp"] == "DO NOT QUOTE AGGREGATE"
    stamped = build_matrix([on_pod], stamp="CPU ENGINE")
    assert stamped["stamp"] == "CPU ENGINE"
    assert render_matrix_markdown(stamped).splitlines()[2] == "**CPU ENGINE**"


def test_an_emulated_or_mismatched_card_stamps_the_matrix(make_run: Callable[..., Run]) -> None:
    def card(label: str, gpu: str, machine: dict[str, Any], emulated: bool) -> dict[str, Any]:
        run = make_run({"plain": {1: [100.0]}}, run_id=label, price=1.0)
        run.meta.pod.gpu, run.meta.pod.gpu_count = gpu, 1
        run.meta.pod.machine, run.meta.pod.emulated = machine, emulated
        return {"card": label, "status": "done", "analysis": analyze(run)}

    cpu = {"cpu": "AMD EPYC 7B13", "gpus": []}
    emulated = build_matrix([card("runpod:A40", "NVIDIA A40", cpu, True)])
    assert emulated["stamp"] == ("EMULATED PROVIDERS: the engines ran on AMD EPYC 7B13, not on "
                                 "the claimed cards; the cost figures are illustrative")
    assert emulated["cards"][0]["hardware"] == "emulated"
    wrong = {"cpu": "x", "gpus": [{"name": "NVIDIA GeForce RTX 3090", "memory": "24576 MiB"}]}
    mismatch = build_matrix([card("runpod:H100", "NVIDIA H100 80GB HBM3", wrong, False)])
    assert mismatch["stamp"].startswith("GPU MISMATCH on runpod:H100: ")
    right = {"cpu": "x", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory": "81559 MiB"}]}
    assert build_matrix([card("runpod:H100", "NVIDIA H100 80GB HBM3", right, False)])["stamp"] \
        is None


def test_unknown_price_is_not_ranked_and_says_why(make_run: Callable[..., Run]) -> None:
    unpriced = _outcome(make_run, "runpod:A", None, {"plain": {1: [100.0]}})  # type: ignore[arg-type]
    matrix = build_matrix([unpriced])
    assert matrix["tables"][0]["ranking"] == [] and matrix["cheapest"] == []
    assert "pod price unknown" in render_matrix_markdown(matrix)


def test_cards_that_served_other_revisions_or_images_are_warned_about(
    make_run: Callable[..., Run],
) -> None:
    def card(label: str, revision: str, digest: str) -> dict[str, Any]:
        run = make_run({"plain": {1: [100.0]}}, run_id=label, price=1.0)
        run.meta.image.digest = digest
        served = {"arms": [{"label": "plain", "checkpoints": {
            "model": {"ref": "org/m", "source": "hub", "revision": revision}}}]}
        return {"card": label, "status": "done", "analysis": analyze(run), "run": served}

    same = build_matrix([card("runpod:A", "abc123", "sha256:1"), card("runpod:B", "abc123",
                                                                     "sha256:1")])
    assert same["warnings"] == []
    other = build_matrix([card("runpod:A", "abc123", "sha256:1"), card("runpod:B", "def456",
                                                                      "sha256:2")])
    assert len(other["warnings"]) == 2
    assert "different checkpoint revisions" in other["warnings"][0]
    assert "different image digests" in other["warnings"][1]

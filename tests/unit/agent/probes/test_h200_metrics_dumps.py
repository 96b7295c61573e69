"""The probe's /metrics parsing on two real vLLM 0.26.0 dumps from the lent H200
(tests/fixtures/metrics, written by benchmarks/gpu_vllm.sh at the end of a sweep):
- vllm_v0260_mtp3_h200_metrics_2026-12.txt: the tiny mimo checkpoint's MTP K=3 arm (session 13);
- vllm_v0260_draft2_gpu_h200_metrics_2026-12.txt: the gpu-size target with its one-layer draft,
  draft_model K=2 (session 14, benchmarks/runs/h200_vllm_0.26.0_draft_2026-12-02).
Expected counters are the numbers on the dump's lines, read by hand; the derived figures are
worked by hand from them here (1 + accepted/drafts, accepted/draft tokens, per position/drafts)."""

from __future__ import annotations

import pytest

from tailpod.agent.probes.metrics import acceptance_from_vllm, parse_prometheus, spec_snapshot
from tests import paths

DUMPS = paths.FIXTURES / "metrics"


def snapshot(name: str) -> dict[str, object]:
    return spec_snapshot(parse_prometheus((DUMPS / name).read_text()), "vllm")


ZERO = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_pos": {}}


@pytest.mark.parametrize(
    ("name", "drafts", "draft_tokens", "accepted", "per_pos"),
    [
        # vllm:spec_decode_num_drafts_total ... 17892.0, _draft_tokens_total 53676.0,
        # _accepted_tokens_total 53388.0, per position 17892.0 / 17748.0 / 17748.0
        ("vllm_v0260_mtp3_h200_metrics_2026-12.txt", 17892, 53676, 53388, [17892, 17748, 17748]),
        # 11648.0, 23296.0, 12989.0; per position 7831.0 / 5158.0
        ("vllm_v0260_draft2_gpu_h200_metrics_2026-12.txt", 11648, 23296, 12989, [7831, 5158]),
    ],
)
def test_the_h200_dumps_give_the_counters_on_their_lines(
    name: str, drafts: int, draft_tokens: int, accepted: int, per_pos: list[int]
) -> None:
    snap = snapshot(name)
    assert snap["drafts"] == drafts and snap["draft_tokens"] == draft_tokens
    assert snap["accepted"] == accepted
    assert snap["per_pos"] == {str(i): float(v) for i, v in enumerate(per_pos)}
    acc, flags = acceptance_from_vllm(ZERO, snap)
    assert flags == [] and acc is not None
    assert acc["acceptance_length"] == pytest.approx(1 + accepted / drafts)
    assert acc["acceptance_rate"] == pytest.approx(accepted / draft_tokens)
    assert acc["per_position"] == pytest.approx([v / drafts for v in per_pos])


def test_the_draft_arm_accepts_about_what_its_draft_was_built_to() -> None:
    # Built to agree on ~70% of tokens (tailpod checkpoint build --size gpu --kind draft):
    # the first position accepts 7831/11648 = 0.672, the second (needs both) 5158/11648 = 0.443.
    acc, _ = acceptance_from_vllm(ZERO, snapshot("vllm_v0260_draft2_gpu_h200_metrics_2026-12.txt"))
    assert acc is not None
    first, second = acc["per_position"]
    assert 0.65 < first < 0.72 and 0.40 < second < 0.50

"""`matrix` on the sandbox cloud that stops dead once its first card's pod is up, so a test can
`kill -9` it there (adversary scenario 33).

Run from the repository as `python -m tests.integration.cloud.interrupted_matrix READY_FILE` with
the sandbox's environment. Two cards, one at a time: the A40 pod is rented through the real
money-safe create and ledger; when its sweep would start, the tag is written to READY_FILE and the
process sleeps until it is killed. The vast card is never reached.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tailpod.cli.matrix import run_matrix
from tailpod.config import Settings, load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.matrix_run import BudgetPolicy
from tailpod.results.matrix import parse_cards
from tests.integration.cloud.test_matrix_faults import A40, SWEEP, TINY, VAST4090, SandboxSteps

READY = Path(sys.argv[1])


class KilledWhileMeasuring(SandboxSteps):
    def host(self, settings: Settings, ledger: Ledger, record: PodRecord, cache: str) -> Any:
        READY.write_text(record.run_tag)
        time.sleep(600)  # the test kills this process long before


def main() -> None:
    run_matrix(load_settings(), cards=parse_cards([A40, VAST4090]), sweep=SWEEP, cost=TINY,
               budget=5.0, parallel=1, base=EngineConfig(engine="vllm", model="org/tiny"),
               steps=KilledWhileMeasuring(), policy=BudgetPolicy(poll_s=0.05, margin_s=0.0))


if __name__ == "__main__":
    main()

"""`tailpod matrix --spot` on the sandbox cloud whose spot card's sweep stops dead in its second
cell, so a test can play a lost bid there and `kill -9` the process mid-preemption (issue 40).

Run from the repository as `python -m tests.integration.cloud.killed_spot_matrix READY_FILE
MATRIX_ARGS...` with the sandbox's environment. The real `matrix` verb runs (its flags, pricing at
the bid, the ledger-first spot create through `up_remote`, matrix.json); only the pod's side is
scripted (no SSH, no engine: test_matrix_faults.SandboxSteps). When the second cell would be
measured, the pod's run tag is written to READY_FILE and the cell hangs: until the process is
killed (a laptop side that dies while its spot pod loses its bid), or until the test creates
READY_FILE.go, when it fails as a cell on a pod that lost its bid does (its SSH session reset), so
the matrix settles the lost pod and rents the card again, where the test may kill it next.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import tailpod.cli.matrix
from tailpod.cli.main import app
from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tests.integration.cloud.test_matrix_faults import SandboxSteps, ScriptedHost

READY = Path(sys.argv[1])


class HangsInItsSecondCell(ScriptedHost):
    def __init__(self, tag: str) -> None:
        super().__init__(tok_s=100.0, cell_s=0.0)
        self.tag = tag
        self.cells = 0

    def run_cells(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.cells += 1
        if self.cells == 2:
            staged = READY.with_suffix(".tmp")  # renamed: the test never reads it half-written
            staged.write_text(self.tag)
            staged.replace(READY)
            go = READY.with_suffix(".go")
            deadline = time.monotonic() + 600  # the test kills this process long before
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            raise TailpodError("the pod stopped answering over SSH (connection reset)")
        return super().run_cells(*args, **kwargs)


class KilledMidCell(SandboxSteps):
    def up(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, say: Any) -> PodRecord:
        record = super().up(settings, cfg, ledger, say)
        # as up_cloud leaves a pod it started (pods/cloud.py): no operation in progress
        return ledger.update(record.run_tag, operation={})

    def host(self, settings: Settings, ledger: Ledger, record: PodRecord,
             cache: str) -> ScriptedHost:
        return HangsInItsSecondCell(record.run_tag)


def main() -> None:
    tailpod.cli.matrix.CloudSteps = lambda **_k: KilledMidCell()  # type: ignore[assignment,misc]
    app(sys.argv[2:], prog_name="tailpod")


if __name__ == "__main__":
    main()

"""vast.ai's side of adversary-2026-12 #20: `volume rm` of a vast volume answered 500 exited 1
with one line, though the volume still billed (exit 1 means nothing tailpod knows of bills,
docs/exit-codes.md). It exits 3, says the volume still bills and gives the manual delete with
the key as `$VAST_API_KEY`; the retry it advises deletes it. The RunPod replay is
test_volume_delete_fails.py::test_rm_answered_503_says_the_volume_still_bills_and_exits_3."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.sandbox import Sandbox

from .test_volumes_vast import MACHINE, cli_env, live  # noqa: F401 (cli_env: the fixture)


def test_vast_rm_answered_500_says_the_volume_still_bills_and_exits_3(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:  # noqa: F811
    made = CliRunner().invoke(app, ["volume", "create", "vc1", "--provider", "vastai",
                                    "--size-gb", "10", "--datacenter", MACHINE])
    assert made.exit_code == 0, made.output
    record = Ledger(tailpod_home).volume("tp-vol-vc1")
    assert record is not None and record.volume_id
    sandbox.add_fault("server_error", provider="vast", op="volume_delete", status=500)
    rm = CliRunner().invoke(app, ["volume", "rm", "vc1"])
    said = " ".join(rm.output.split())
    assert rm.exit_code == 3, rm.output
    assert "still bills" in said and "500" in said, said
    assert "$VAST_API_KEY" in said and record.volume_id in said, said
    assert sandbox.vast_key not in rm.output
    assert live(sandbox) == {"tp_vol_vc1": int(MACHINE)}  # it really is still there
    sandbox.clear_faults()
    again = CliRunner().invoke(app, ["volume", "rm", "vc1"])
    assert again.exit_code == 0, again.output
    assert live(sandbox) == {}

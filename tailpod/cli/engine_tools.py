"""`tailpod inspect`: what a checkpoint holds, read without its weights (`logs parse` is in
logs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailpod.cli.common import console, handle_errors, print_json, settings_from
from tailpod.errors import ConfigError


def _gib(nbytes: int | None) -> str:
    return "—" if nbytes is None else f"{nbytes / 2**30:.2f} GiB"


def _short(items: list[str], limit: int = 6) -> str:
    if not items:
        return "—"
    head = ", ".join(items[:limit])
    return head if len(items) <= limit else f"{head}, … (+{len(items) - limit})"


def _report_table(report: Any) -> None:
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    mtp = report.mtp
    rows = [
        ("checkpoint", f"{report.source} ({report.location})"),
        ("revision", report.revision or "—"),
        ("architecture", report.architecture or "—"),
        ("model type", report.model_type or "—"),
        ("hidden layers", str(report.num_hidden_layers or "—")),
        ("weights", f"{_gib(report.weight_bytes)} in {len(report.weight_files)} file(s)"),
        ("MTP head", "present" if mtp.present else "absent"),
    ]
    if mtp.present:
        rows += [
            ("  naming", mtp.naming or "—"),
            ("  prefixes", _short(mtp.prefixes)),
            ("  layers", f"{mtp.layers} (config says {mtp.declared_layers or '—'})"),
            ("  tensors", f"{mtp.tensors}, {_gib(mtp.nbytes)}, {', '.join(mtp.dtypes)}"),
        ]
        if mtp.file:
            rows.append(("  file", mtp.file))
    if not report.quantization:
        rows.append(("quantization", "none"))
    for qc in report.quantization:
        label = qc.method + (f" ({qc.algo})" if qc.algo else "")
        rows.append(("quantization", f"{label} from {qc.source}"))
        rows.append((f"  {qc.ignore_key or 'ignore list'}", _short(qc.ignore)))
    trap = report.unquantized_mtp_not_ignored
    rows.append(("MTP ignore trap", f"YES: {_short(trap)}" if trap else "no"))
    for warning in report.warnings:
        rows.append(("warning", warning))
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def register(app: typer.Typer) -> None:
    from tailpod.cli import logs

    logs.register(app)  # `logs parse` reads offline too; `logs TAG` reads a pod's

    @app.command("inspect")
    @handle_errors
    def inspect(
        model: str = typer.Argument(..., help="Local checkpoint dir or Hub repo id (org/name)."),
        as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
        revision: str | None = typer.Option(None, help="Hub revision (branch, tag or commit)."),
        hf_url: str | None = typer.Option(None, help="Hub endpoint (default: TAILPOD_HF_URL)."),
        fix_into: Path | None = typer.Option(
            None,
            "--fix-into",
            help="If MTP modules are unquantized but not ignored, write a patched copy here "
            "(weights symlinked). Local checkpoints only.",
        ),
    ) -> None:
        """What a checkpoint holds (architecture, MTP head, weights, quantization) without
        downloading its weights."""
        from tailpod.engines.checkpoint import fix_mtp_ignore_list, inspect_checkpoint

        settings = settings_from(hf_url=hf_url)
        report = inspect_checkpoint(model, settings, revision=revision)
        added: list[str] | None = None
        if fix_into is not None:
            if report.location != "local":
                raise ConfigError("--fix-into works on local checkpoint directories only")
            added = fix_mtp_ignore_list(model, fix_into)
        if as_json:
            data = report.to_json()
            if added is not None:
                data["fix"] = {"out_dir": str(fix_into), "added": added}
            print_json(data)
            return
        _report_table(report)
        if added is not None:
            if added:
                console.print(f"wrote a patched copy to {fix_into}; added: {_short(added)}")
            else:
                console.print("nothing to fix; no copy written")

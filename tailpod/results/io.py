"""Read and write run directories, and flatten them into a table any tool can read.

A run directory holds `run.json` and `rows.jsonl` (format: docs/results.md). `load_run` migrates
older schema versions on the fly; it never rewrites the files it read. A file that does not fit the
format (a key it does not declare, a value of the wrong type) is a ConfigError (exit 2) naming the
file, the line and the key.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tailpod.agent import OFF_POD_FLAG
from tailpod.errors import ConfigError, TailpodError
from tailpod.results.evidence import void_thin_evidence
from tailpod.results.migrate import migrate_row, migrate_run_json, version_of
from tailpod.results.schema import ROW_ADAPTER, SCHEMA_VERSION, CellRow, RequestRow, RunMeta
from tailpod.results.session_gate import apply_session_gate
from tailpod.results.structure_gate import apply_structure_gate

RUN_FILE = "run.json"
ROWS_FILE = "rows.jsonl"
# The pod agent's probe stamps off-pod rows (stdlib only): its text is the one source.
STAMP = OFF_POD_FLAG


@dataclass
class Run:
    meta: RunMeta
    cells: list[CellRow] = field(default_factory=list)
    requests: list[RequestRow] = field(default_factory=list)
    path: Path | None = None
    migrated_from: int | None = None
    load_warnings: list[str] = field(default_factory=list)
    # Soak cells (`benchmark --soak`) and their requests: one long closed loop per arm, read by
    # results/sections/soak.py alone, so no throughput, SLO or decision counts them as a rep.
    soak_cells: list[CellRow] = field(default_factory=list)
    soak_requests: list[RequestRow] = field(default_factory=list)

    @property
    def off_pod(self) -> bool:
        return self.meta.measured_from == "off-pod" or any(
            r.measured_from == "off-pod" for r in self.cells
        )

    @property
    def stamp(self) -> str | None:
        return STAMP if self.off_pod else None


def validation_summary(exc: ValidationError, what: str = f"results format v{SCHEMA_VERSION}") -> str:
    """The first problem in one line: the dotted key, then what is wrong with it. A key the
    schema does not declare is named as such (a misspelling reads as one), never dropped."""
    errors = exc.errors(include_url=False)
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    first = unknown[0] if unknown else errors[0]
    where = ".".join(str(p) for p in first["loc"])
    said = (f"unknown key {where!r} ({what} has no such field; misspelt?)" if unknown
            else f"{where}: {first['msg']}")
    return said + (f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else "")


def parse_rows(lines: Iterable[str], source: str = ROWS_FILE) -> tuple[list[Any], list[str]]:
    """Parse rows.jsonl text. A torn last line (writer died mid-line) is skipped with a warning."""
    rows: list[Any] = []
    warnings: list[str] = []
    numbered = [(i, line) for i, line in enumerate(lines, 1) if line.strip()]
    for pos, (lineno, line) in enumerate(numbered):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if pos == len(numbered) - 1:
                warnings.append(f"{source}:{lineno}: torn last line skipped")
                continue
            raise ConfigError(f"{source}:{lineno}: not valid JSON") from None
        try:
            rows.append(ROW_ADAPTER.validate_python(migrate_row(data)))
        except ValidationError as exc:
            raise ConfigError(f"{source}:{lineno}: {validation_summary(exc)}") from None
        except KeyError as exc:
            raise ConfigError(f"{source}:{lineno}: missing field {exc}") from None
    return rows, warnings


def load_run(path: str | os.PathLike[str]) -> Run:
    """Load a run directory (or its run.json), migrating older schema versions in memory."""
    path = Path(path)
    run_dir = path.parent if path.is_file() else path
    run_file = run_dir / RUN_FILE
    if not run_file.is_file():
        raise ConfigError(f"no {RUN_FILE} in {run_dir}", hint="pass a run directory")
    try:
        raw = json.loads(run_file.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{run_file}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{run_file}: not a JSON object")
    original = version_of(raw)
    try:
        meta = RunMeta.model_validate(migrate_run_json(raw))
    except ValidationError as exc:
        raise ConfigError(f"{run_file}: {validation_summary(exc)}") from None
    except KeyError as exc:
        raise ConfigError(f"{run_file}: missing field {exc}") from None
    rows: list[Any] = []
    warnings: list[str] = []
    rows_file = run_dir / ROWS_FILE
    if rows_file.is_file():
        with rows_file.open() as fh:
            rows, warnings = parse_rows(fh, str(rows_file))
    else:
        warnings.append(f"no {ROWS_FILE} in {run_dir}")
    soak_ids = {r.cell for r in rows if isinstance(r, CellRow) and r.soak_s is not None}
    cells, requests = void_thin_evidence(
        [r for r in rows if isinstance(r, CellRow) and r.cell not in soak_ids],
        [r for r in rows if isinstance(r, RequestRow) and r.cell not in soak_ids])
    meta = apply_session_gate(apply_structure_gate(meta, requests), requests)
    return Run(
        meta=meta,
        cells=cells,
        requests=requests,
        path=run_dir,
        migrated_from=original if original != meta.schema_version else None,
        load_warnings=warnings,
        soak_cells=[r for r in rows if isinstance(r, CellRow) and r.cell in soak_ids],
        soak_requests=[r for r in rows if isinstance(r, RequestRow) and r.cell in soak_ids],
    )


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_run(run: Run, run_dir: str | os.PathLike[str]) -> Path:
    """Write run.json and rows.jsonl in the current schema version (used by tests and migration)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(run_dir / RUN_FILE, run.meta.model_dump_json(indent=2) + "\n")
    rows = [*run.requests, *run.cells, *run.soak_requests, *run.soak_cells]
    _atomic_write(run_dir / ROWS_FILE, "".join(r.model_dump_json() + "\n" for r in rows))
    return run_dir


# --- flat table export -------------------------------------------------------------------------

RUN_COLUMNS = [
    "run_id",
    "model",
    "engine",
    "engine_version",
    "provider",
    "gpu",
    "gpu_count",
    "price_per_hr",
    "measured_from",
    "image_digest",
    "stamp",
]
ARM_COLUMNS = ["arm", "k", "method", "checkpoint", "arm_void", "void_reason"]
CELL_COLUMNS = [
    "concurrency",
    "rep",
    "prompt_class",
    "cell",
    "cache",
    "requests",
    "failed",
    "wall_s",
    "output_tokens",
    "output_tok_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "e2e_p99_s",
    "decode_tok_s_p50",
    "tpot_p50_s",
    "client_cpu_s",
    "loop_lag_max_s",
    "client_bound",
    "acc_drafts",
    "acc_draft_tokens",
    "acc_accepted",
    "acceptance_length",
    "acceptance_rate",
    "acceptance_source",
    "flags",
    "void",
    "void_fields",
]
REQUEST_COLUMNS = [
    "concurrency",
    "rep",
    "prompt_class",
    "cell",
    "index",
    "ok",
    "error",
    "cache",
    "prompt_tokens",
    "completion_tokens",
    "ttft_s",
    "e2e_s",
    "decode_tok_s",
    "tpot_s",
    "chunks",
    "chunk_gap_p50_s",
    "chunk_gap_max_s",
    "t_start",
    "void_fields",
]


def table_columns(kind: str) -> list[str]:
    return RUN_COLUMNS + ARM_COLUMNS + (CELL_COLUMNS if kind == "cells" else REQUEST_COLUMNS)


def _run_part(run: Run) -> dict[str, Any]:
    m = run.meta
    return {
        "run_id": m.run_id,
        "model": m.model,
        "engine": m.engine.name,
        "engine_version": m.engine.version,
        "provider": m.provider,
        "gpu": m.pod.gpu,
        "gpu_count": m.pod.gpu_count,
        "price_per_hr": m.pod.price_per_hr,
        "measured_from": m.measured_from,
        "image_digest": m.image.digest,
        "stamp": run_provenance(run),
    }


def run_provenance(run: Run) -> str:
    """What every exported row carries about where its numbers come from: measured off the pod,
    an emulated or non-vendor provider, a claimed GPU the pod did not report. "" when nothing
    needs saying. (The arm's unverified gate is added per row: `_arm_part`.)"""
    from tailpod.results.hardware import recorded_or_computed

    parts = [run.stamp] if run.stamp else []
    hardware = recorded_or_computed(run.meta.pod.model_dump()).get("stamp")
    if hardware:
        parts.append(str(hardware))
    return "; ".join(parts)


def _with_arm_stamp(row: dict[str, Any], run: Run, label: str) -> dict[str, Any]:
    arm = run.meta.arm(label)
    note = None
    if arm is not None and arm.is_void:
        note = f"arm {label} VOID: {arm.void_text()}"
    elif arm is not None and arm.unverified_text:
        note = f"arm {label} unverified: {arm.unverified_text}"
    if note:
        row["stamp"] = "; ".join(filter(None, [row.get("stamp"), note]))
    return row


def _arm_part(run: Run, label: str) -> dict[str, Any]:
    arm = run.meta.arm(label)
    if arm is None:
        return {
            "arm": label,
            "k": None,
            "method": None,
            "checkpoint": None,
            "arm_void": None,
            "void_reason": None,
        }
    return {
        "arm": label,
        "k": arm.k,
        "method": arm.method,
        "checkpoint": arm.checkpoint,
        "arm_void": arm.is_void,
        "void_reason": arm.void_text() if arm.is_void else None,
    }


def _void_text(void_fields: dict[str, str]) -> str | None:
    """A row's void figures as one text column: `field: why` joined by " | "."""
    return " | ".join(f"{k}: {v}" for k, v in sorted(void_fields.items())) or None


def flat_rows(run: Run, kind: str = "cells") -> list[dict[str, Any]]:
    """One flat dict per cell (or request) with the run and arm context repeated on every row."""
    if kind not in ("cells", "requests"):
        raise ConfigError(f"unknown table {kind!r}", hint="use cells or requests")
    base = _run_part(run)
    out: list[dict[str, Any]] = []
    if kind == "cells":
        for c in run.cells:
            acc = c.acceptance
            row = (
                base
                | _arm_part(run, c.arm)
                | {
                    col: getattr(c, col)
                    for col in CELL_COLUMNS
                    if col not in ("flags", "void_fields") and not col.startswith("acc")
                }
            )
            row |= {
                "acc_drafts": acc.drafts if acc else None,
                "acc_draft_tokens": acc.draft_tokens if acc else None,
                "acc_accepted": acc.accepted if acc else None,
                "acceptance_length": acc.acceptance_length if acc else None,
                "acceptance_rate": acc.acceptance_rate if acc else None,
                "acceptance_source": acc.source if acc else None,
                "flags": ";".join(c.flags),
                "void_fields": _void_text(c.void_fields),
            }
            row = _with_arm_stamp(row, run, c.arm)
            out.append({col: row[col] for col in table_columns(kind)})
    else:
        for r in run.requests:
            row = base | _arm_part(run, r.arm) | {col: getattr(r, col) for col in REQUEST_COLUMNS}
            row["void_fields"] = _void_text(r.void_fields)
            row = _with_arm_stamp(row, run, r.arm)
            out.append({col: row[col] for col in table_columns(kind)})
    return out


def export_table(run: Run, fmt: str, out: str | os.PathLike[str], kind: str = "cells") -> Path:
    """Write the flat table as csv, jsonl or parquet (parquet only when pyarrow is installed)."""
    out = Path(out)
    if fmt not in ("csv", "jsonl", "parquet"):
        raise ConfigError(f"unknown format {fmt!r}", hint="use csv, jsonl or parquet")
    rows = flat_rows(run, kind)
    cols = table_columns(kind)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            # Empty cell for null, so pandas reads NaN; booleans as True/False, which it parses.
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        _atomic_write(out, buf.getvalue())
    elif fmt == "jsonl":
        _atomic_write(out, "".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise TailpodError(
                "parquet export needs pyarrow, which is not installed",
                hint="use --format csv or jsonl, or install pyarrow yourself",
            ) from None
        # Written beside the target and renamed into place, as the text formats are.
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        os.close(fd)
        try:
            pq.write_table(pa.Table.from_pylist(rows), tmp)
            os.replace(tmp, out)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return out

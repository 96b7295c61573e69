"""The versioned results format: `run.json` and the two kinds of `rows.jsonl` line.

Mirrors the format described in docs/results.md and docs/results-schema.json (v1). Models allow
extra fields so a writer can add a field without breaking older readers; a renamed or removed
field needs a new schema version and a migration in `tailpod.results.migrate`.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator
from pydantic.json_schema import models_json_schema

from tailpod import agent

# The pod agent writes the rows and cannot import tailpod: its constant is the one source.
SCHEMA_VERSION = cast(Literal[1], agent.SCHEMA_VERSION)

MeasuredFrom = Literal["pod", "off-pod"]


class _Model(BaseModel):
    # extra="allow": additive fields from newer writers survive a load/save round trip.
    model_config = ConfigDict(extra="allow")


class PodDescription(_Model):
    gpu: str | None = None
    gpu_count: int | None = None
    price_per_hr: float | None = Field(
        default=None, description="What the pod costs in USD per hour; null when unknown."
    )
    machine: dict[str, Any] = Field(default_factory=dict)
    emulated: bool | None = Field(
        default=None, description="Rented through a non-vendor provider API endpoint (a proxy, "
        "a mirror, an emulator): the provider's claimed GPU and price are unverified."
    )
    hardware_check: dict[str, Any] | None = Field(
        default=None,
        description="The claimed GPU against the pod's own nvidia-smi facts: verdict (match, "
        "mismatch, emulated, unverified), claimed, reported, and the stamp every report and plot "
        "carries when they disagree (tailpod/results/hardware.py).",
    )


class ImageRef(_Model):
    ref: str | None = None
    digest: str | None = None


class EngineRef(_Model):
    name: str = Field(description='"vllm" or "sglang"')
    version: str | None = None


class Plan(_Model):
    arms: list[str] = Field(default_factory=list)
    concurrency: list[int] = Field(default_factory=list)
    reps: int = 1
    max_tokens: int | None = None
    prompt_classes: list[str] = Field(default_factory=list)
    interleave_arms: bool = False


class Startup(_Model):
    engine: str | None = None
    facts: dict[str, Any] = Field(default_factory=dict)
    lines: list[str] = Field(default_factory=list, description="Raw startup lines, verbatim.")


class FirstMismatch(_Model):
    prompt: int | None = None
    position: int | None = None


class Gate(_Model):
    status: Literal["pass", "fail", "skipped"]
    method: str | None = Field(default=None, description='"token_ids" or "text"')
    first_mismatch: FirstMismatch | None = None
    prompts: int | None = None


_LABEL_K = re.compile(r"-k(\d+)$")


def unverified_reason(status: str | None, method: str | None) -> str | None:
    """Why a gate result does not verify a speculative arm, or None when it does (token ids
    compared and equal). A failed gate is not "unverified": it voids the arm."""
    if status is None:
        return "no token-identity gate was run"
    if status == "skipped":
        return "token-identity gate skipped (no plain arm to compare with)"
    if status == "pass" and method == "text":
        return "gate compared text only, not token ids"
    return None


class ArmRecord(_Model):
    label: str
    engine_config: dict[str, Any] = Field(default_factory=dict)
    argv: list[str] = Field(default_factory=list)
    startup: Startup | None = None
    gate: Gate | None = None
    void: bool = False
    void_reason: str | None = None
    unverified: str | None = Field(
        default=None, description="Why the sweep could not verify the arm's output (its gate "
        "was skipped or compared text only); its numbers stand, marked UNVERIFIED.")
    restart_s: float | None = None

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.engine_config.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def k(self) -> int:
        """Draft tokens per step; 0 is plain decode. Falls back to a `<method>-k<N>` label."""
        if "k" in self.spec:
            return int(self.spec["k"] or 0)
        if self.label == "plain":
            return 0
        match = _LABEL_K.search(self.label)
        return int(match.group(1)) if match else 0

    @property
    def method(self) -> str | None:
        if self.k == 0:
            return None
        method = self.spec.get("method")
        if method:
            return str(method)
        return _LABEL_K.sub("", self.label) or "spec"

    @property
    def checkpoint(self) -> str | None:
        model = self.engine_config.get("model")
        return str(model) if model else None

    @property
    def facts(self) -> dict[str, Any]:
        return self.startup.facts if self.startup else {}

    @property
    def is_void(self) -> bool:
        return self.void or (self.gate is not None and self.gate.status == "fail")

    @property
    def unverified_text(self) -> str | None:
        """Why a speculative arm that is not void is not verified either, or None when its gate
        compared token ids and passed. Read from the gate itself too, so runs written before the
        sweep recorded `unverified` are marked as well."""
        if self.k == 0 or self.is_void:
            return None
        if self.unverified:
            return self.unverified
        return unverified_reason(self.gate.status if self.gate else None,
                                 self.gate.method if self.gate else None)

    def void_text(self) -> str:
        """Why the arm is void, in words; the gate's mismatch when no reason was recorded."""
        if self.void_reason:
            return self.void_reason
        if self.gate is not None and self.gate.status == "fail":
            mm = self.gate.first_mismatch
            where = f" (prompt {mm.prompt}, position {mm.position})" if mm else ""
            return f"token-identity gate failed{where}"
        return "marked void"


class RunMeta(_Model):
    """`run.json`: one object per run directory."""

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    tailpod_version: str | None = None
    created_at: str = Field(description="ISO 8601")
    finished_at: str | None = None
    provider: str
    pod: PodDescription = Field(default_factory=PodDescription)
    measured_from: MeasuredFrom
    image: ImageRef = Field(default_factory=ImageRef)
    provider_facts: dict[str, Any] | None = Field(
        default=None,
        description="What the provider's account was seen to do, from the pod's ledger record: "
        "the image's start form (json or plain), its CUDA bound, the host's CUDA, and "
        "first_contact (what the live first-contact check verified on this account; "
        "verified: false when it never ran). Null when the run was not on a rented pod.",
    )
    cold_start: dict[str, Any] | None = Field(
        default=None,
        description="What the start cost, from the pod's ledger record: create_at, ready_at, "
        "billed_s_to_ready and usd_to_ready (from the create call to the engine serving), the "
        "engine's startup phases and compile_cache_hit, the volume; then first_token_at, "
        "billed_s_to_first_token and usd_to_first_token (to the first measured token, on this "
        "machine's clock, never under the real bill). Null when the run was not on a rented pod.",
    )
    model: str
    engine: EngineRef
    plan: Plan = Field(default_factory=Plan)
    arms: list[ArmRecord] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @field_validator("created_at", "finished_at")
    @classmethod
    def _iso8601(cls, value: str | None) -> str | None:
        # Kept as the writer's string (exact round trip) but it must parse.
        if value is not None:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value

    def arm(self, label: str) -> ArmRecord | None:
        return next((a for a in self.arms if a.label == label), None)


class Acceptance(_Model):
    drafts: int
    draft_tokens: int
    accepted: int
    # null when the cell drafted nothing (the probe's normalise_acceptance: nothing was measured;
    # a cell whose requests all failed reads so, and must still load)
    acceptance_length: float | None = Field(
        description="1 + accepted/drafts (bonus token included); null with no drafts")
    acceptance_rate: float | None = Field(
        description="accepted/draft_tokens; null with no draft tokens")
    per_position: list[float] = Field(default_factory=list)
    source: str | None = None


class _RowBase(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    arm: str
    concurrency: int
    rep: int
    prompt_class: str
    cell: str
    measured_from: MeasuredFrom = "pod"
    void_fields: dict[str, str] = Field(
        default_factory=dict,
        description="Added when a run is read: a figure of this row voided (set null) because its "
        "evidence is thin, and why (docs/results.md, \"Void where evidence is thin\").",
    )


class RequestRow(_RowBase):
    kind: Literal["request"] = "request"
    index: int
    ok: bool
    error: str | None = None
    cache: Literal["cold", "warm"] = "cold"
    prompt_tokens: int | None = None
    completion_tokens: int | None = Field(default=None, description="Server usage only.")
    ttft_s: float | None = None
    e2e_s: float | None = None
    decode_tok_s: float | None = None
    tpot_s: float | None = None
    chunks: int = 0
    chunk_gap_p50_s: float | None = None
    chunk_gap_max_s: float | None = None
    t_start: float
    finish_reason: str | None = Field(
        default=None, description="Why the stream ended, as the server said (stop, length, "
        "tool_calls, ...); null when it did not say.")
    json_ok: bool | None = Field(
        default=None, description="Structured and tools classes only: the output (or every "
        "tool call's arguments) parses as JSON.")
    schema_ok: bool | None = Field(
        default=None, description="Structured and tools classes only: it validates against "
        "the class's schema; null when not checked (schema_error says why).")
    tool_call_ok: bool | None = Field(
        default=None, description="Tools class only: at least one tool call, each naming an "
        "offered function, with arguments that parse.")


class CellRow(_RowBase):
    kind: Literal["cell"] = "cell"
    cache: Literal["cold", "warm"] = Field(
        default="cold", description="Optional (added by the probe): a warm-prefix-cache cell."
    )
    requests: int
    failed: int = 0
    wall_s: float
    output_tokens: int
    output_tok_s: float = Field(description="Aggregate: output_tokens / wall_s")
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p90_s: float | None = None
    e2e_p99_s: float | None = None
    decode_tok_s_p50: float | None = None
    tpot_p50_s: float | None = None
    client_cpu_s: float | None = None
    loop_lag_max_s: float | None = None
    client_bound: bool = False
    acceptance: Acceptance | None = None
    flags: list[str] = Field(default_factory=list)
    void: bool = False


Row = Annotated[RequestRow | CellRow, Field(discriminator="kind")]
ROW_ADAPTER: TypeAdapter[RequestRow | CellRow] = TypeAdapter(Row)


def export_json_schema() -> dict[str, Any]:
    """The JSON Schema of run.json and both row kinds, as written to docs/results-schema.json."""
    _, top = models_json_schema(
        [(RunMeta, "validation"), (RequestRow, "validation"), (CellRow, "validation")],
        title=f"tailpod results format v{SCHEMA_VERSION}",
    )
    top["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    top["description"] = (
        "run.json is a RunMeta object; every line of rows.jsonl is a RequestRow (kind=request) "
        "or a CellRow (kind=cell). Extra fields are allowed. See docs/results.md."
    )
    top["x-tailpod-schema-version"] = SCHEMA_VERSION
    return top


if __name__ == "__main__":  # python -m tailpod.results.schema > docs/results-schema.json
    import json
    import sys

    sys.stdout.write(json.dumps(export_json_schema(), indent=2, sort_keys=True) + "\n")

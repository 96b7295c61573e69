"""The versioned results format: `run.json` and the two kinds of `rows.jsonl` line.

Mirrors the format described in docs/results.md and docs/results-schema.json (v1). The models
refuse a key they do not declare, so a misspelt key is an error where it is written and where it is
read; the sweep writes run.json and rows.jsonl through these models (tailpod/measure/sweep.py), so
writer and reader cannot drift. Every key a tailpod writer has put in a v1 file is declared here;
one added later is declared too (sparse: written only when set, so older files keep their shape).
A renamed or removed field needs a new schema version and a step in `tailpod.results.migrate`.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    field_validator,
    model_serializer,
)
from pydantic.json_schema import models_json_schema

from tailpod import agent

# The pod agent writes the rows and cannot import tailpod: its constant is the one source.
SCHEMA_VERSION = cast(Literal[1], agent.SCHEMA_VERSION)

MeasuredFrom = Literal["pod", "off-pod"]


class _Model(BaseModel):
    # extra="forbid": a key the schema does not declare (a misspelling, a field nobody declared)
    # is refused, naming it, rather than carried along unread.
    model_config = ConfigDict(extra="forbid")
    # Fields written only when set: a writer that never sets one writes no key (so files keep
    # the shape they had before the field was declared, and a round trip is exact).
    _SPARSE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_unset_sparse(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self._SPARSE - self.model_fields_set:
                data.pop(name, None)
        return data


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
    # What the sweep's plan adds (tailpod/measure/plan.py SweepPlan.to_json).
    arm_configs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    requests_per_cell: int | None = None
    extend_k: bool = True
    max_k: int | None = None
    serve_tax: bool = False
    request_rates: list[str] = Field(default_factory=list, description="Open loop: req/s as "
                                     "text (\"inf\" for all at once).")
    arrival: str | None = None
    burstiness: float | None = None
    arrival_seed: int | None = None
    slo: dict[str, float] | None = None
    slo_percentile: float | None = None
    trace: dict[str, Any] | None = None
    load_workers: int = 1
    saturation_stop: bool = True
    arm_rates: dict[str, list[str]] | None = None
    soak_s: float | None = Field(default=None, description="`benchmark --soak`: each arm's soak "
                                 "cell ran this many seconds.")
    unique_schema: bool = Field(default=False, description="`benchmark --unique-schema`: every "
                                "structured request's schema was new text (docs/probe.md).")

    _SPARSE = frozenset({
        "arm_configs", "requests_per_cell", "extend_k", "max_k", "serve_tax", "request_rates",
        "arrival", "burstiness", "arrival_seed", "slo", "slo_percentile", "trace",
        "load_workers", "saturation_stop", "arm_rates", "soak_s", "unique_schema"})


class Startup(_Model):
    engine: str | None = None
    facts: dict[str, Any] = Field(default_factory=dict)
    lines: list[str] = Field(default_factory=list, description="Raw startup lines, verbatim.")
    # A lanes deployment (tailpod/measure/deploy.py lanes_arm_start): every lane's start beside
    # the spec lane's, the admission limit, the lanes' gate and their ledger run tag.
    lanes: dict[str, Any] | None = None
    admission_limit: int | None = None
    lanes_gate: dict[str, Any] | None = None
    lanes_run_tag: str | None = None

    _SPARSE = frozenset({"lanes", "admission_limit", "lanes_gate", "lanes_run_tag"})


class FirstMismatch(_Model):
    prompt: int | None = None
    position: int | None = None
    # The two tokens that differ there (tailpod/agent/probes/gate.py _compare).
    reference_token: Any = None
    candidate_token: Any = None

    _SPARSE = frozenset({"reference_token", "candidate_token"})


class Gate(_Model):
    status: Literal["pass", "fail", "skipped"]
    method: str | None = Field(default=None, description='"token_ids" or "text"')
    first_mismatch: FirstMismatch | None = None
    prompts: int | None = None
    detail: str | None = None

    _SPARSE = frozenset({"detail"})


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
    starts: list[dict[str, Any]] = Field(default_factory=list, description="Each engine start "
                                         "of the arm: at, startup_s, purpose.")
    checkpoints: dict[str, Any] = Field(default_factory=dict, description="role (model, "
                                        "draft_model) -> which checkpoint bytes were served.")
    serve_tax: dict[str, Any] | None = Field(default=None, description="The engine's bare "
                                             "decode at the arm's settings (--serve-tax).")

    _SPARSE = frozenset({"starts", "checkpoints", "serve_tax"})

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
    kind: Literal["kl_eval"] | None = Field(default=None, description="Set for a KL evaluation "
                                            "(results in kl.json, no throughput rows).")
    run_tag: str | None = None
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
    gate_reference: dict[str, Any] | None = Field(
        default=None, description="Plain decode's greedy token ids the gate compares against.")
    fingerprint: dict[str, Any] | None = Field(
        default=None, description="The run's acceptance fingerprint (results/fingerprint.py).")
    max_rate_search: dict[str, Any] | None = Field(
        default=None, description="`--find-max-rate`: the bisection and its answer per arm.")
    preemptions: list[dict[str, Any]] | None = Field(
        default=None, description="`benchmark --resume-on-preemption`: each spot pod that lost "
        "its bid mid-sweep (pod, pod_id, at, pod_minutes, pod_usd: its whole time and spend, an "
        "upper bound on the loss), in order (measure/matrix_run.py preemption_entry).")

    _SPARSE = frozenset({"kind", "run_tag", "gate_reference", "fingerprint", "max_rate_search",
                         "preemptions"})

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
    native: dict[str, Any] | None = Field(default=None, description="The engine's own counters "
                                          "and convention.")
    drafts_trimmed: int | None = Field(
        default=None, description="K x verify steps - draft tokens: draft slots a grammar or the "
        "request's end cut before verification (vLLM; docs/probe.md).")

    _SPARSE = frozenset({"native", "drafts_trimmed"})


class _RowBase(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    arm: str
    concurrency: int
    rep: int
    prompt_class: str
    cell: str
    measured_from: MeasuredFrom = "pod"
    pod: dict[str, Any] | None = Field(
        default=None, description="The pod the row was measured on (a matrix card's rows: "
        "run_tag, pod_id, gpu, host, machine), so a card measured on a second pod after a spot "
        "preemption says which cell came from which (measure/matrix_run.py pod_stamp).")
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
    flags: list[str] = Field(default_factory=list)
    server_timings: dict[str, Any] | None = None
    # Open loop (tailpod/agent/probes/rows.py _open_loop_fields): on the clock of t_start.
    scheduled_at: float | None = None
    sent_at: float | None = None
    ttft_sched_s: float | None = None
    e2e_sched_s: float | None = None
    # Trace replay (tailpod/agent/probes/load.py): the logged lengths and how the prompt was built.
    trace_input_tokens: int | None = None
    trace_output_tokens: int | None = None
    prompt_length: str | None = None
    prompt_words: int | None = None
    prompt_tokens_built: int | None = None
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
    schema_error: str | None = Field(
        default=None, description="Why schema_ok is false or null (the first failing keyword).")
    tool_names: list[str] | None = Field(
        default=None, description="Tools class only: the functions the tool calls named.")
    spec_acceptance: dict[str, Any] | None = Field(
        default=None, description="Per-request speculative acceptance read from the response "
        "(vLLM metrics.speculative_decoding; SGLang sglext.spec_tokens_details), one definition: "
        "1 + accepted drafts / verify steps (docs/probe.md).")
    ttfa_s: float | None = Field(
        default=None, description="Time to first answer token: the first non-empty `content` "
        "(or tool call) delta minus the send time; written when reasoning text came first "
        "(ttft_s counts reasoning), null when the answer never came (flag no_answer).")
    reasoning_tokens: int | None = Field(
        default=None, description="usage.completion_tokens_details.reasoning_tokens, when the "
        "server gave it (part of completion_tokens).")
    # Session replay (tailpod/agent/probes/session_replay.py; docs/probe.md, "Sessions").
    session_id: str | None = Field(
        default=None, description="Session traces: the session this turn belongs to.")
    turn: int | None = Field(
        default=None, description="Session traces: the turn's position in its session, 1 first.")
    turn_wait_s: float | None = Field(
        default=None, description="Session traces: the think or tool wait replayed before the "
        "turn, after the previous answer ended (turn 1: after the session's start).")
    turn_wait_kind: Literal["think", "tool"] | None = Field(
        default=None, description="Session traces: what the wait stands for; null for none.")
    cached_tokens: int | None = Field(
        default=None, description="usage.prompt_tokens_details.cached_tokens: prompt tokens the "
        "server served from its prefix cache; null when it did not say (never read as 0).")
    answer_digest: str | None = Field(
        default=None, description="Session traces: SHA-256 (16 hex digits) of the answer text; "
        "the session gate compares it with the plain arm's for the same turn.")
    void: bool = Field(default=False, description="Added by the sweep to every row of a void arm.")

    _SPARSE = frozenset({
        "session_id", "turn", "turn_wait_s", "turn_wait_kind", "cached_tokens", "answer_digest",
        "ttfa_s", "reasoning_tokens", "void", "flags", "server_timings", "scheduled_at", "sent_at", "ttft_sched_s",
        "e2e_sched_s", "trace_input_tokens", "trace_output_tokens", "prompt_length",
        "prompt_words", "prompt_tokens_built", "finish_reason", "json_ok", "schema_ok",
        "tool_call_ok", "schema_error", "tool_names", "spec_acceptance", "pod"})


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
    void_reason: str | None = None
    load_workers: int | None = None
    prompt_length: str | None = Field(default=None, description="Trace replay: how the "
                                      "prompts were built to the logged lengths, or \"mixed\".")
    lane_counts: dict[str, Any] | None = Field(default=None, description="A lanes deployment: "
                                               "HAProxy's counters per lane after the cell.")
    # Open loop (tailpod/agent/probes/rows.py _open_loop_cell).
    arrival: dict[str, Any] | None = None
    offered_rate_rps: float | None = None
    achieved_rate_rps: float | None = None
    schedule_lag_p50_s: float | None = None
    schedule_lag_max_s: float | None = None
    ttft_sched_mean_s: float | None = None
    ttft_sched_p50_s: float | None = None
    ttft_sched_p90_s: float | None = None
    ttft_sched_p99_s: float | None = None
    e2e_sched_p50_s: float | None = None
    e2e_sched_p90_s: float | None = None
    e2e_sched_p99_s: float | None = None
    # Under an SLO (tailpod/agent/probes/rows.py slo_fields).
    slo: dict[str, float] | None = None
    slo_percentile: float | None = None
    slo_attainment: float | None = None
    slo_met: bool | None = None
    goodput_rps: float | None = None
    goodput_tok_s: float | None = None
    # Per-request speculative figures and the structure checks (tailpod/agent/probes/load.py).
    acceptance_per_request: dict[str, Any] | None = Field(
        default=None, description="p10/p50/p90 of the requests' acceptance lengths, their mean "
        "and the token-weighted figure (docs/probe.md).")
    structure: dict[str, Any] | None = Field(
        default=None, description="Structured and tools classes: how many outputs parsed, "
        "validated and made whole tool calls, the finish reasons and the largest chunk gap.")
    sessions: dict[str, Any] | None = Field(
        default=None, description="Session traces: how many sessions, the most turns of one, "
        "and the trace's format.")
    # Reasoning models (tailpod/agent/probes/rows.py _reasoning_cell).
    ttfa_p50_s: float | None = Field(
        default=None, description="p50 of time to first answer over the successful requests, "
        "when any reasoned; null where it would fall on a request that never answered.")
    ttfa_p90_s: float | None = Field(default=None, description="p90, as ttfa_p50_s.")
    soak_s: float | None = Field(
        default=None, description="A soak cell (`benchmark --soak`): the closed loop ran for this "
        "many seconds, not a number of requests; read by the soak section alone (docs/results.md).")

    _SPARSE = frozenset({
        "ttfa_p50_s", "ttfa_p90_s", "soak_s", "sessions",
        "acceptance_per_request", "structure", "void_reason", "load_workers", "prompt_length", "lane_counts", "arrival",
        "offered_rate_rps", "achieved_rate_rps", "schedule_lag_p50_s", "schedule_lag_max_s",
        "ttft_sched_mean_s", "ttft_sched_p50_s", "ttft_sched_p90_s", "ttft_sched_p99_s",
        "e2e_sched_p50_s", "e2e_sched_p90_s", "e2e_sched_p99_s", "slo", "slo_percentile",
        "slo_attainment", "slo_met", "goodput_rps", "goodput_tok_s", "pod"})


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
        "or a CellRow (kind=cell). A key not declared here is refused. See docs/results.md."
    )
    top["x-tailpod-schema-version"] = SCHEMA_VERSION
    return top


if __name__ == "__main__":  # python -m tailpod.results.schema > docs/results-schema.json
    import json
    import sys

    sys.stdout.write(json.dumps(export_json_schema(), indent=2, sort_keys=True) + "\n")

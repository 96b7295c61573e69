"""The deployment a decision.json holds (`tailpod decide` writes it: results/decide.py), as a model
that `up --decision` and `benchmark --deploy` check the file against before anything rents, waits
or stops an engine (docs/decide.md). A file that does not fit is refused in one line naming the
field, never cast: `k: 2.9` is not K=2, `k: 1e400` is not a number of draft tokens, and a method
is one of the engine-neutral names (engines/base.py SPEC_METHODS), never text for a command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from tailpod.engines.base import MAX_SPEC_K, SPEC_METHODS
from tailpod.errors import ConfigError, TailpodError

# The spec lane's maxconn: at most the plain lane's own (pods/lanes.py PLAIN_MAXCONN), past which
# HAProxy queues anyway.
MAX_ADMISSION_LIMIT = 1024

K = Annotated[StrictInt, Field(ge=0, le=MAX_SPEC_K)]


def _method(value: str | None) -> str | None:
    if value is not None and value not in SPEC_METHODS:
        raise ValueError(f"must be one of {', '.join(SPEC_METHODS)}, got {value!r}")
    return value


class _Strict(BaseModel):
    # A key `decide` does not write (a misspelling) is refused, naming it (issue 37, item 4).
    model_config = ConfigDict(extra="forbid")


class Lane(_Strict):
    name: str | None = None
    k: K
    method: str | None = None
    arm: str | None = None
    key: str | None = None  # the arm as the decision's `arms` names it (run/label over runs)
    maxconn: int | None = None
    kv_alone: dict[str, Any] | None = None
    _check_method = field_validator("method")(_method)


class LanesDeployment(_Strict):
    kind: Literal["lanes"]
    lanes: list[Lane]
    admission_limit: Annotated[StrictInt, Field(ge=1, le=MAX_ADMISSION_LIMIT)]
    admission_basis: str | None = None
    crossover: dict[str, Any] | None = None
    knee: dict[str, Any] | None = None
    schedule: dict[str, Any] | None = None
    reason: str | None = None
    compared: list[str] | None = None

    @field_validator("lanes")
    @classmethod
    def _spec_then_plain(cls, lanes: list[Lane]) -> list[Lane]:
        if len(lanes) != 2 or lanes[0].k < 1 or lanes[1].k != 0:
            raise ValueError("must be two lanes, the speculative one (k >= 1) first, then the "
                             "plain one (k 0)")
        return lanes


class StaticDeployment(_Strict):
    kind: Literal["static", "mixed"]
    k: K | None = None
    method: str | None = None
    arm: str | None = None
    key: str | None = None
    reason: str | None = None
    flag: str | None = None
    compared: list[str] | None = None
    _check_method = field_validator("method")(_method)


class NoDeployment(_Strict):
    kind: Literal["none"]
    reason: str | None = None
    compared: list[str] | None = None


Deployment = Annotated[StaticDeployment | LanesDeployment | NoDeployment,
                       Field(discriminator="kind")]


class Decision(_Strict):
    """decision.json as `tailpod decide` writes it (results/decide.py compute checks its own
    output against this model). Only the deployment is required: a hand-written file may hold just
    that; every other key must be one of these."""

    decision_version: int | None = None
    objective: str | None = None
    lower_is_better: bool | None = None
    unit: str | None = None
    slo: dict[str, float] | None = None
    slo_percentile: float | None = None
    runs: list[str] | None = None
    arms: dict[str, dict[str, Any]] | None = None
    bands: list[dict[str, Any]] | None = None
    crossover: list[dict[str, Any]] | None = None
    knee: list[dict[str, Any]] | None = None
    deployment: Deployment
    deployment_gap: list[dict[str, Any]] | None = None
    # prompt class -> the arm (or lanes) that serves it, and the arms void there (results/decide.py)
    by_class: dict[str, dict[str, Any]] | None = None
    warnings: list[str] | None = None
    stamp: str | None = None


def _first_problem(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    # a discriminated union puts the chosen kind in the path: deployment.lanes.lanes.0.k
    loc = [str(p) for i, p in enumerate(err["loc"])
           if not (i == 1 and err["loc"][0] == "deployment" and p in ("static", "mixed", "lanes",
                                                                       "none"))]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if not loc:
        return "it must be a JSON object with a deployment"
    if err["type"] == "extra_forbidden":
        return f"unknown key {'.'.join(loc)!r} (a decision has no such field; misspelt?)"
    got = err.get("input")
    if isinstance(got, (bool, int, float, str)) and "got " not in msg:
        msg += f" (got {json.dumps(got)[:60]})"
    return f"{'.'.join(loc)}: {msg}"


def read_decision(path: Path) -> dict[str, Any]:
    """The deployment of the decision.json at `path`, checked against the model; ConfigError
    (exit 2) naming the file and the first field that does not fit."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the decision {path}: {exc}") from None
    try:
        decision = Decision.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a decision `tailpod decide` writes: "
                          f"{_first_problem(exc)}") from None
    dep: dict[str, Any] = decision.deployment.model_dump(exclude_unset=True)
    return dep


def checked_decision(doc: dict[str, Any]) -> dict[str, Any]:
    """`decide`'s own document, checked against the model `up --decision` reads it with, so what
    it writes is what it reads back; a key the model does not declare is a bug, said in one line."""
    try:
        Decision.model_validate(doc)
    except ValidationError as exc:
        raise TailpodError(f"decide built a decision the decision.json format refuses: "
                           f"{_first_problem(exc)}") from None
    return doc

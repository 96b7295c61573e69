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
from tailpod.errors import ConfigError

# The spec lane's maxconn: at most the plain lane's own (pods/lanes.py PLAIN_MAXCONN), past which
# HAProxy queues anyway.
MAX_ADMISSION_LIMIT = 1024

K = Annotated[StrictInt, Field(ge=0, le=MAX_SPEC_K)]


def _method(value: str | None) -> str | None:
    if value is not None and value not in SPEC_METHODS:
        raise ValueError(f"must be one of {', '.join(SPEC_METHODS)}, got {value!r}")
    return value


class Lane(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str | None = None
    k: K
    method: str | None = None
    _check_method = field_validator("method")(_method)


class LanesDeployment(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["lanes"]
    lanes: list[Lane]
    admission_limit: Annotated[StrictInt, Field(ge=1, le=MAX_ADMISSION_LIMIT)]

    @field_validator("lanes")
    @classmethod
    def _spec_then_plain(cls, lanes: list[Lane]) -> list[Lane]:
        if len(lanes) != 2 or lanes[0].k < 1 or lanes[1].k != 0:
            raise ValueError("must be two lanes, the speculative one (k >= 1) first, then the "
                             "plain one (k 0)")
        return lanes


class StaticDeployment(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["static", "mixed"]
    k: K | None = None
    method: str | None = None
    _check_method = field_validator("method")(_method)


class NoDeployment(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["none"]


Deployment = Annotated[StaticDeployment | LanesDeployment | NoDeployment,
                       Field(discriminator="kind")]


class Decision(BaseModel):
    model_config = ConfigDict(extra="allow")
    deployment: Deployment


def _first_problem(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    # a discriminated union puts the chosen kind in the path: deployment.lanes.lanes.0.k
    loc = [str(p) for i, p in enumerate(err["loc"])
           if not (i == 1 and err["loc"][0] == "deployment" and p in ("static", "mixed", "lanes",
                                                                       "none"))]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if not loc:
        return "it must be a JSON object with a deployment"
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

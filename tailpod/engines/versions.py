"""Which flag spelling an engine version understands.

Engines rename flags. Each rename below names its upstream PR and merge date (found with
`git log -S` in the engines' repositories); release numbers are mapped to those dates only where
the mapping could be pinned down.
Where it could not, `since_version` is chosen on the *safe side*: the old spelling keeps working
after the rename (a deprecated alias), so a version near the boundary gets the old spelling.
`EngineConfig.version` may be a release ("0.11.0", "v0.5.15"), a build date ("2026-05-01", for
llama.cpp builds) or None for the current spelling. Anything else gets the current spelling and a
warning, never an exception.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

Release = tuple[int, ...]


@dataclass(frozen=True)
class Gate:
    """A behaviour that begins at some point in an engine's history."""

    engine: str
    feature: str
    since_date: dt.date  # upstream merge date from engines.md
    since_version: Release | None  # first release treated as having it; None = not mapped
    source: str  # the PR that introduced it


def _d(text: str) -> dt.date:
    return dt.date.fromisoformat(text)


# One row per rename or behaviour change the launch builders act on.
GATES: dict[str, Gate] = {
    gate.feature: gate
    for gate in (
        # vLLM: legacy per-model MTP method names folded into "mtp". The merge landed a week before
        # v0.11.0 was tagged; v0.11.1 is the first release certain to have it, and the legacy names
        # stay accepted afterwards, so the boundary errs towards them.
        Gate("vllm", "vllm_mtp_method", _d("2025-09-26"), (0, 11, 1), "vllm#25232"),
        Gate("vllm", "vllm_sc_short_flag", _d("2026-03-27"), None, "vllm#38380"),
        Gate("vllm", "vllm_spec_shorthand_flags", _d("2026-05-18"), None, "vllm#42476"),
        # vLLM: `--per-request-spec-decode-metrics summary|detailed` puts each request's
        # acceptance in its response. Merged by 2026-08-21 (llama-swap#1032 quotes the merged PR
        # that day); not in 0.28.0 (syv-ai/qwen38-27b-rtx3090#66), present in 0.32.0
        # (vllm/config/observability.py of the CPU build). 0.29.0 is the first release treated
        # as having it; an older engine would refuse to start on the unknown flag.
        Gate("vllm", "vllm_per_request_spec_metrics", _d("2026-08-21"), (0, 29, 0),
             "vllm#48915"),
        # vLLM: `--enable-prompt-tokens-details` makes `usage.prompt_tokens_details.cached_tokens`
        # say how many prompt tokens the prefix cache served. The flag is older (V0 honoured it:
        # vllm-project/vllm#16162), but the V1 engine filled the field only from vllm#18149
        # (merged 2025-05-14, released in 0.9.0); present in 0.32.0
        # (vllm/entrypoints/launchers/cli_args.py of the CPU build).
        Gate("vllm", "vllm_prompt_tokens_details", _d("2025-05-14"), (0, 9, 0), "vllm#18149"),
        # SGLang: `--disable-cuda-graph` / `--cuda-graph-max-bs` became per-phase flags; the old
        # spellings stay as deprecated aliases. The snapshot just after v0.5.15 has the new ones.
        Gate(
            "sglang", "sglang_cuda_graph_phase_flags", _d("2026-06-09"), (0, 5, 15), "sglang#23906"
        ),
        # SGLang: overlap-capable speculative worker became the default (before: overlap scheduling
        # was off whenever EAGLE/NEXTN was on).
        Gate("sglang", "sglang_spec_overlap_default", _d("2026-04-30"), None, "sglang#21062"),
        # llama.cpp: `--spec-type` list (ngram modes) and the 2026-04 rename of the draft flags.
        # The old draft flags now throw, so there is no safe middle; builds are identified by date.
        Gate("llamacpp", "llamacpp_spec_type", _d("2026-01-28"), None, "llama.cpp#18471"),
        Gate("llamacpp", "llamacpp_spec_draft_flags", _d("2026-04-28"), None, "llama.cpp#22397"),
        # `draft-*` type names (llama.cpp#22964) and MTP drafting (llama.cpp#22673, merge date from
        # its review thread, not engines.md) arrived together in mid-May 2026.
        Gate("llamacpp", "llamacpp_draft_type_names", _d("2026-05-12"), None, "llama.cpp#22964"),
        Gate("llamacpp", "llamacpp_draft_mtp", _d("2026-05-13"), None, "llama.cpp#22673"),
    )
}

_RELEASE = re.compile(
    r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[.+\-]?(?:post|rc|dev|a|b)?\d*.*)?$"
)
_DATE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")


@dataclass
class EngineVersion:
    """A parsed `EngineConfig.version`."""

    raw: str | None
    release: Release | None = None
    date: dt.date | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def current(self) -> bool:
        return self.release is None and self.date is None

    def has(self, feature: str) -> bool | None:
        """True/False when the version decides the feature, None when it cannot be told."""
        gate = GATES[feature]
        if self.release is not None:
            if gate.since_version is None:
                return None
            return self.release >= gate.since_version
        if self.date is not None:
            return self.date >= gate.since_date
        return True  # current spelling

    def uses(self, feature: str) -> bool:
        """Whether to emit the newer spelling; an undecidable version gets it plus a warning."""
        decided = self.has(feature)
        if decided is None:
            gate = GATES[feature]
            self.warn(
                f"cannot tell whether {gate.engine} {self.raw} has {feature} ({gate.source}, "
                f"merged {gate.since_date}); using the current spelling. Pass the build date "
                "(YYYY-MM-DD) as the version to decide it."
            )
            return True
        return decided

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


def parse_version(raw: str | None, engine: str) -> EngineVersion:
    """Release tuple, build date, or current; unparseable text becomes current plus a warning."""
    if raw is None or not str(raw).strip() or str(raw).strip().lower() in {"current", "latest"}:
        return EngineVersion(raw=None)
    text = str(raw).strip()
    if re.fullmatch(r"b\d+", text):
        version = EngineVersion(raw=text)
        version.warn(
            f"{engine} build numbers like {text!r} are not mapped to dates; using the current flag "
            "spelling (give the build date, YYYY-MM-DD, to decide renamed flags)"
        )
        return version
    date_match = _DATE.match(text)
    if date_match:
        year, month, day = (int(g) if g else 1 for g in date_match.groups())
        try:
            return EngineVersion(raw=text, date=dt.date(year, month, day))
        except ValueError:
            pass
    release_match = _RELEASE.match(text)
    if release_match:
        parts = tuple(int(g) for g in release_match.groups() if g is not None)
        return EngineVersion(raw=text, release=parts)
    version = EngineVersion(raw=text)
    version.warn(
        f"unrecognised {engine} version {text!r}; using the current flag spelling "
        "(give a release like 0.11.0 or a build date like 2026-05-01)"
    )
    return version


def version_from_image(image: str | None) -> str | None:
    """The release an image's tag names (`vllm/vllm-openai:v0.11.0` -> `v0.11.0`), None when the
    tag is not a release (`latest`, `nightly`, a digest only, no tag)."""
    if not image:
        return None
    ref = image.split("@", 1)[0]
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:  # "host:port/repo" has no tag
        return None
    return tag if _RELEASE.match(tag) and not _DATE.match(tag) else None

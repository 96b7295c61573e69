"""Launch builders against the flag facts of engines.md, for several engine versions and arms."""

from __future__ import annotations

import json

import pytest

from tailpod.engines.adapters import CLOUD_ENGINES, get_adapter
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.engines.llamacpp import LlamaCppAdapter, parse_timings
from tailpod.engines.sglang import MRR_UNPINNED_WARNING, SglangAdapter
from tailpod.engines.vllm import VllmAdapter
from tailpod.errors import ConfigError


def _flag(argv: list[str], name: str) -> str | None:
    """Value following `name`, None when absent."""
    return argv[argv.index(name) + 1] if name in argv else None


def _cfg(engine: str, k: int = 0, version: str | None = None, **kw: object) -> EngineConfig:
    method = kw.pop("method", None)
    draft = kw.pop("draft_model", None)
    return EngineConfig(
        engine=engine,
        model=str(kw.pop("model", "/models/m")),
        spec=SpecArm(k=k, method=method, draft_model=draft),  # type: ignore[arg-type]
        version=version,
        **kw,  # type: ignore[arg-type]
    )


# --- registry -------------------------------------------------------------------------------


def test_registry_knows_three_engines_and_names_them_on_error() -> None:
    assert {get_adapter(n).name for n in ("vllm", "sglang", "llamacpp")} == {
        "vllm", "sglang", "llamacpp"}
    assert set(CLOUD_ENGINES) == {"vllm", "sglang"}
    assert isinstance(get_adapter("llama.cpp"), LlamaCppAdapter)
    with pytest.raises(ConfigError) as err:
        get_adapter("tgi")
    assert all(name in err.value.message for name in ("vllm", "sglang", "llamacpp"))
    assert err.value.exit_code == 2


# --- vLLM -------------------------------------------------------------------------------------

# Whether each version predates vLLM's single MTP method name "mtp", written out here rather than
# read from versions.py: the rename is vllm-project/vllm#25232 (merged 2025-09-26), first released
# in v0.11.1 (vllm-project/vllm-gaudi#633 adapts to it for v0.11.2); docs/engines.md records the
# same boundary. None = the newest release.
VLLM_PREDATES_MTP_NAME = {
    None: False, "0.10.2": True, "0.11.0": True, "0.11.1": False, "0.23.0": False,
    "2025-08-01": True, "2025-09-25": True, "2025-09-26": False, "2026-05-01": False,
}
VLLM_VERSIONS = list(VLLM_PREDATES_MTP_NAME)


@pytest.mark.parametrize("version", VLLM_VERSIONS)
@pytest.mark.parametrize("k", [0, 1, 3])
def test_vllm_arms_per_version(version: str | None, k: int) -> None:
    cfg = _cfg("vllm", k, version, served_name="tiny", port=8100, max_running_requests=16)
    plan = VllmAdapter().launch_plan(cfg, python="/venv/bin/python")
    assert plan.argv[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/m",
    ]
    assert _flag(plan.argv, "--served-model-name") == "tiny"
    assert _flag(plan.argv, "--port") == "8100"
    assert _flag(plan.argv, "--max-num-seqs") == "16"
    assert "-sc" not in plan.argv and "--spec-method" not in plan.argv  # valid on every version
    raw = _flag(plan.argv, "--speculative-config")
    if k == 0:
        assert raw is None
        return
    assert raw is not None
    config = json.loads(raw)
    assert config["num_speculative_tokens"] == k
    assert config["method"] == "mtp"  # no architecture given, so no legacy name to pick
    if VLLM_PREDATES_MTP_NAME[version]:
        assert any("predates method 'mtp'" in w for w in plan.warnings)
    else:
        assert not plan.warnings


@pytest.mark.parametrize(
    ("version", "architecture", "method"),
    [
        ("0.10.2", "DeepseekV3ForCausalLM", "deepseek_mtp"),
        ("0.10.2", "MiMoForCausalLM", "mimo_mtp"),
        ("0.10.2", "Qwen3NextForCausalLM", "qwen3_next_mtp"),
        ("0.11.0", "Glm4MoeForCausalLM", "glm4_moe_mtp"),  # boundary errs towards legacy names
        ("2025-09-01", "DeepseekV3ForCausalLM", "deepseek_mtp"),
        ("0.11.1", "DeepseekV3ForCausalLM", "mtp"),
        ("2025-10-01", "MiMoForCausalLM", "mtp"),
        (None, "DeepseekV3ForCausalLM", "mtp"),
    ],
)
def test_vllm_mtp_method_name_follows_version(
    version: str | None, architecture: str, method: str
) -> None:
    plan = VllmAdapter().launch_plan(_cfg("vllm", 1, version), architecture=architecture)
    assert json.loads(_flag(plan.argv, "--speculative-config") or "{}")["method"] == method


def test_vllm_methods_and_their_keys() -> None:
    ngram = json.loads(
        _flag(
            VllmAdapter().launch_plan(_cfg("vllm", 3, method="ngram")).argv, "--speculative-config"
        )
        or ""
    )
    assert ngram == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    draft = json.loads(
        _flag(
            VllmAdapter().launch_plan(_cfg("vllm", 2, method="draft_model", draft_model="/d")).argv,
            "--speculative-config",
        )
        or ""
    )
    assert draft == {"method": "draft_model", "model": "/d", "num_speculative_tokens": 2}
    with pytest.raises(ConfigError):
        VllmAdapter().launch_plan(_cfg("vllm", 2, method="eagle3"))  # needs a draft
    with pytest.raises(ConfigError):
        VllmAdapter().launch_plan(_cfg("vllm", 2, method="medusa-ish"))


def test_vllm_unparseable_version_gets_current_spelling_and_a_warning() -> None:
    plan = VllmAdapter().launch_plan(_cfg("vllm", 1, "nightly-foo"))
    assert json.loads(_flag(plan.argv, "--speculative-config") or "")["method"] == "mtp"
    assert any("unrecognised vllm version" in w for w in plan.warnings)


def test_vllm_gated_extra_flags_warn_on_old_dates() -> None:
    plan = VllmAdapter().launch_plan(_cfg("vllm", 0, "2026-01-01", extra_args=("-sc", "{}")))
    assert any("-sc" in w for w in plan.warnings)
    assert plan.argv[-2:] == ["-sc", "{}"]


# --- SGLang ----------------------------------------------------------------------------------

# Whether each version has SGLang's per-phase CUDA-graph flags (`--cuda-graph-backend-decode
# disabled` for `--disable-cuda-graph`): sgl-project/sglang#23906, merged 2026-06-09, first in
# the release after v0.5.14 (docs/engines.md); written out, not read from versions.py.
SGLANG_HAS_PHASE_GRAPH_FLAGS = {
    None: True, "0.4.7": False, "0.5.9": False, "0.5.14": False, "0.5.15": True,
    "2026-05-15": False, "2026-06-08": False, "2026-06-09": True,
}
SGLANG_VERSIONS = list(SGLANG_HAS_PHASE_GRAPH_FLAGS)


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
@pytest.mark.parametrize("k", [0, 1, 3])
def test_sglang_arms_per_version(version: str | None, k: int) -> None:
    cfg = _cfg("sglang", k, version, max_running_requests=32, enforce_eager=True, tensor_parallel=2)
    plan = SglangAdapter().launch_plan(cfg, python="py")
    argv = plan.argv
    assert argv[:5] == ["py", "-m", "sglang.launch_server", "--model-path", "/models/m"]
    assert _flag(argv, "--tp-size") == "2"
    assert _flag(argv, "--max-running-requests") == "32"  # pinned in both arms
    assert "--enable-metrics" in argv
    if SGLANG_HAS_PHASE_GRAPH_FLAGS[version]:
        assert _flag(argv, "--cuda-graph-backend-decode") == "disabled"
        assert "--disable-cuda-graph" not in argv
    else:
        assert "--disable-cuda-graph" in argv
        assert "--cuda-graph-backend-decode" not in argv
    if k == 0:
        assert "--speculative-algorithm" not in argv
        assert plan.warnings == []
        return
    assert _flag(argv, "--speculative-algorithm") == "NEXTN"
    assert _flag(argv, "--speculative-num-steps") == str(k)
    assert _flag(argv, "--speculative-eagle-topk") == "1"
    assert _flag(argv, "--speculative-num-draft-tokens") == str(k + 1)
    assert "--speculative-draft-model-path" not in argv  # MTP head from the target checkpoint
    overlap_warning = any("overlap" in w for w in plan.warnings)
    # sgl-project/sglang#21062 (2026-04-30) made the overlap-capable worker the default; no
    # release number is known for it, so every release number gets the warning, dates after not.
    assert overlap_warning == (version in {"0.4.7", "0.5.9", "0.5.14", "0.5.15"})


def test_sglang_unpinned_max_running_requests_warns_in_both_arms() -> None:
    for k in (0, 2):
        plan = SglangAdapter().launch_plan(_cfg("sglang", k))
        assert "--max-running-requests" not in plan.argv
        assert MRR_UNPINNED_WARNING in plan.warnings


def test_sglang_draft_algorithms() -> None:
    eagle3 = (
        SglangAdapter()
        .launch_plan(
            _cfg("sglang", 3, method="eagle3", draft_model="/draft", max_running_requests=8)
        )
        .argv
    )
    assert _flag(eagle3, "--speculative-algorithm") == "EAGLE3"
    assert _flag(eagle3, "--speculative-draft-model-path") == "/draft"
    standalone = (
        SglangAdapter()
        .launch_plan(
            _cfg("sglang", 2, method="draft_model", draft_model="/d", max_running_requests=8)
        )
        .argv
    )
    assert _flag(standalone, "--speculative-algorithm") == "STANDALONE"
    ngram = SglangAdapter().launch_plan(_cfg("sglang", 3, method="ngram", max_running_requests=8))
    assert _flag(ngram.argv, "--speculative-num-draft-tokens") == "4"
    assert "--speculative-num-steps" not in ngram.argv
    with pytest.raises(ConfigError):
        SglangAdapter().launch_plan(_cfg("sglang", 1, method="eagle"))


# --- llama.cpp -------------------------------------------------------------------------------

LLAMACPP_VERSIONS = [None, "2026-03-01", "2026-06-01"]


@pytest.mark.parametrize("version", LLAMACPP_VERSIONS)
@pytest.mark.parametrize("k", [0, 1, 3])
def test_llamacpp_draft_model_arms_per_version(version: str | None, k: int) -> None:
    cfg = _cfg(
        "llamacpp",
        k,
        version,
        model="/m/target.gguf",
        method="draft_model",
        draft_model="/m/draft.gguf",
        context_length=4096,
        max_running_requests=4,
    )
    argv = LlamaCppAdapter().launch_plan(cfg).argv
    assert argv[:3] == ["llama-server", "--model", "/m/target.gguf"]
    assert (_flag(argv, "--ctx-size"), _flag(argv, "--parallel")) == ("4096", "4")
    assert "--metrics" in argv
    if k == 0:
        assert not any(a.startswith(("--spec", "--draft", "--model-draft")) for a in argv)
        return
    if version == "2026-03-01":  # before the 2026-04-28 rename
        assert (_flag(argv, "--model-draft"), _flag(argv, "--draft-max")) == (
            "/m/draft.gguf",
            str(k),
        )
        assert "--spec-draft-n-max" not in argv
    else:
        assert _flag(argv, "--spec-draft-model") == "/m/draft.gguf"
        assert _flag(argv, "--spec-draft-n-max") == str(k)
        assert "--draft-max" not in argv


@pytest.mark.parametrize("k", [1, 3])
def test_llamacpp_mtp_needs_a_recent_build(k: int) -> None:
    argv = LlamaCppAdapter().launch_plan(_cfg("llamacpp", k, model="org/repo-GGUF:Q8_0")).argv
    assert _flag(argv, "--hf-repo") == "org/repo-GGUF:Q8_0"
    assert _flag(argv, "--spec-type") == "draft-mtp"
    assert _flag(argv, "--spec-draft-n-max") == str(k)
    with pytest.raises(ConfigError, match="predates MTP"):
        LlamaCppAdapter().launch_plan(_cfg("llamacpp", k, "2026-03-01"))


def test_llamacpp_ngram_spelling_and_gates() -> None:
    new = LlamaCppAdapter().launch_plan(_cfg("llamacpp", 3, method="ngram")).argv
    assert (_flag(new, "--spec-type"), _flag(new, "--spec-ngram-mod-n-max")) == ("ngram-mod", "3")
    mid = LlamaCppAdapter().launch_plan(_cfg("llamacpp", 3, "2026-02-15", method="ngram")).argv
    assert (_flag(mid, "--spec-type"), _flag(mid, "--draft-max")) == ("ngram-mod", "3")
    with pytest.raises(ConfigError):
        LlamaCppAdapter().launch_plan(_cfg("llamacpp", 3, "2025-12-01", method="ngram"))


def test_llamacpp_build_numbers_get_current_spelling_and_a_warning() -> None:
    plan = LlamaCppAdapter().launch_plan(
        _cfg("llamacpp", 2, "b8000", method="draft_model", draft_model="/d.gguf")
    )
    assert _flag(plan.argv, "--spec-draft-n-max") == "2"
    assert any("build numbers" in w for w in plan.warnings)


def test_llamacpp_timings_parser() -> None:
    response = {
        "choices": [],
        "timings": {
            "prompt_n": 12,
            "predicted_n": 64,
            "predicted_per_second": 41.5,
            "draft_n": 48,
            "draft_n_accepted": 30,
        },
    }
    parsed = parse_timings(response)
    assert (parsed["draft_n"], parsed["draft_n_accepted"]) == (48, 30)
    assert parsed["acceptance_rate"] == pytest.approx(30 / 48)
    plain = parse_timings({"timings": {"predicted_n": 64}})
    assert plain["draft_n"] is None and plain["acceptance_rate"] is None
    assert parse_timings("not json")["predicted_n"] is None

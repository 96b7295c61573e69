"""Checkpoint inspection on generated checkpoints (headers, tiny tensors), local and via the Hub."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailpod.config import Settings
from tailpod.engines.checkpoint import (
    PATCH_RECORD,
    fix_mtp_ignore_list,
    inspect_checkpoint,
    pattern_covers,
    read_local_header,
)
from tailpod.errors import AuthError, ConfigError, ProviderError
from tailpod.sandbox import hub
from tailpod.secrets import Secret
from tests.unit.engines.mtp_ckpt_builder import build, write_safetensors

MODELOPT_NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"]}
FP8 = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}


@pytest.mark.parametrize(
    ("architecture", "naming", "kwargs", "prefix"),
    [
        ("DeepseekV3ForCausalLM", "deepseek", {}, "model.layers.3"),
        ("Glm4MoeForCausalLM", "glm", {}, "model.layers.3"),
        ("Qwen3NextForCausalLM", "qwen", {}, "mtp"),
        ("MiMoForCausalLM", "mimo", {"sharded": False}, "model.mtp_layers.0"),
    ],
)
def test_each_mtp_naming_is_recognised(
    tmp_path: Path, architecture: str, naming: str, kwargs: dict, prefix: str
) -> None:
    ckpt = build(
        tmp_path / "c",
        architecture=architecture,
        naming=naming,
        layers=3,
        config_extra={"num_nextn_predict_layers": 1},
        **kwargs,
    )
    report = inspect_checkpoint(str(ckpt))
    assert report.architecture == architecture
    assert report.num_hidden_layers == 3
    assert (report.mtp.present, report.mtp.naming, report.mtp.layers) == (True, naming, 1)
    assert report.mtp.prefixes == [prefix]
    assert report.mtp.declared_layers == 1
    assert report.mtp.dtypes == ["BF16"]
    assert report.quantization == [] and not report.has_trap
    on_disk = sum(p.stat().st_size - 8 - _header_len(p) for p in ckpt.glob("*.safetensors"))
    assert report.weight_bytes == on_disk
    assert 0 < report.mtp.nbytes < report.weight_bytes


def _header_len(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[:8], "little")


def test_trunk_layers_below_num_hidden_layers_are_not_mtp(tmp_path: Path) -> None:
    report = inspect_checkpoint(
        str(build(tmp_path / "c", architecture="LlamaForCausalLM", naming=None))
    )
    assert not report.mtp.present and report.mtp.naming is None and report.mtp.layers == 0


def test_qwen35_nested_text_config_and_language_model_prefix(tmp_path: Path) -> None:
    ckpt = build(
        tmp_path / "c",
        architecture="Qwen3_5ForConditionalGeneration",
        naming="qwen",
        nested_text_config=True,
        config_extra={"mtp_num_hidden_layers": 1},
    )
    report = inspect_checkpoint(str(ckpt))
    assert report.num_hidden_layers == 2
    assert (report.mtp.naming, report.mtp.declared_layers) == ("qwen", 1)


def test_separate_mtp_file(tmp_path: Path) -> None:
    ckpt = build(
        tmp_path / "c", architecture="Glm4MoeForCausalLM", naming="glm", separate_mtp_file=True
    )
    report = inspect_checkpoint(str(ckpt))
    assert report.mtp.file == "mtp.safetensors"
    assert report.mtp.present and report.mtp.prefixes == ["model.layers.2"]


def test_separate_mtp_file_with_unrecognised_names(tmp_path: Path) -> None:
    ckpt = build(tmp_path / "c", architecture="SomeForCausalLM", naming=None, sharded=False)
    write_safetensors(ckpt / "mtp.safetensors", {"head.proj.weight": ("BF16", (2, 2))})
    report = inspect_checkpoint(str(ckpt))
    assert (report.mtp.present, report.mtp.naming, report.mtp.file) == (
        True,
        "separate_file",
        "mtp.safetensors",
    )


def test_declared_but_missing_mtp_warns(tmp_path: Path) -> None:
    ckpt = build(
        tmp_path / "c",
        architecture="DeepseekV3ForCausalLM",
        naming=None,
        config_extra={"num_nextn_predict_layers": 1},
    )
    report = inspect_checkpoint(str(ckpt))
    assert not report.mtp.present
    assert any("declares 1 MTP layer" in w for w in report.warnings)


# --- quantization formats and the MTP ignore-list trap ---------------------------------------

TRAP_CASES = [
    # (id, naming, architecture, trunk_quant, mtp_quant, quantization_config, hf_quant, trap)
    (
        "fp8-deepseek-mtp-quantized",
        "deepseek",
        "DeepseekV3ForCausalLM",
        "fp8",
        "fp8",
        FP8,
        None,
        [],
    ),
    (
        "fp8-deepseek-bf16-mtp-ignored",
        "deepseek",
        "DeepseekV3ForCausalLM",
        "fp8",
        None,
        {**FP8, "ignored_layers": ["model.layers.2"]},
        None,
        [],
    ),
    (
        "fp8-glm-bf16-mtp-not-ignored",
        "glm",
        "Glm4MoeForCausalLM",
        "fp8",
        None,
        {**FP8, "modules_to_not_convert": ["lm_head"]},
        None,
        ["model.layers.2.eh_proj", "model.layers.2.shared_head.head"],
    ),
    (
        "modelopt-qwen35-excludes-layers-not-fc",
        "qwen",
        "Qwen3NextForCausalLM",
        "nvfp4",
        None,
        {**MODELOPT_NVFP4, "ignore": ["lm_head", "mtp.layers.0*"]},
        None,
        ["mtp.fc"],
    ),
    (
        "modelopt-legacy-hf-quant-config",
        "glm",
        "Glm4MoeForCausalLM",
        "nvfp4",
        None,
        None,
        {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}},
        ["model.layers.2.eh_proj", "model.layers.2.shared_head.head"],
    ),
    (
        "compressed-tensors-regex-covers-mtp",
        "qwen",
        "Qwen3NextForCausalLM",
        "compressed",
        None,
        {"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:^mtp\\..*"]},
        None,
        [],
    ),
    (
        "compressed-tensors-misses-mtp",
        "mimo",
        "MiMoForCausalLM",
        "compressed",
        None,
        {"quant_method": "compressed-tensors", "ignore": ["lm_head"]},
        None,
        ["model.mtp_layers.0.input_proj"],
    ),
    (
        "quark-exclude-misses-mtp",
        "qwen",
        "Qwen3NextForCausalLM",
        "fp8",
        None,
        {"quant_method": "quark", "exclude": ["lm_head"]},
        None,
        ["mtp.fc"],
    ),
    (
        "awq-modules-to-not-convert-covers",
        "mimo",
        "MiMoForCausalLM",
        "fp8",
        None,
        {"quant_method": "awq", "modules_to_not_convert": ["model.mtp_layers"]},
        None,
        [],
    ),
]


@pytest.mark.parametrize(
    ("naming", "arch", "trunk_quant", "mtp_quant", "qcfg", "hfq", "trap_heads"),
    [case[1:] for case in TRAP_CASES],
    ids=[case[0] for case in TRAP_CASES],
)
def test_quant_formats_and_trap(
    tmp_path: Path,
    naming: str,
    arch: str,
    trunk_quant: str,
    mtp_quant: str | None,
    qcfg: dict | None,
    hfq: dict | None,
    trap_heads: list[str],
) -> None:
    ckpt = build(
        tmp_path / "c",
        architecture=arch,
        naming=naming,
        trunk_quant=trunk_quant,
        mtp_quant=mtp_quant,
        quantization_config=qcfg,
        hf_quant_config=hfq,
    )
    report = inspect_checkpoint(str(ckpt))
    assert report.quantization, "quantization not found"
    expected_method = (qcfg or {}).get("quant_method", "modelopt")
    assert report.quant_method == expected_method
    trap = report.unquantized_mtp_not_ignored
    for module in trap_heads:
        assert module in trap
    assert bool(trap) == bool(trap_heads)
    if trap:
        assert all(not m.endswith(("norm", "layernorm")) for m in trap)  # norms are never quantized
        assert any("ignore list" in w for w in report.warnings)


def test_fix_writes_patched_config_beside_symlinked_weights(tmp_path: Path) -> None:
    ckpt = build(
        tmp_path / "c",
        architecture="Qwen3NextForCausalLM",
        naming="qwen",
        trunk_quant="nvfp4",
        quantization_config={**MODELOPT_NVFP4, "ignore": ["lm_head", "mtp.layers.0*"]},
    )
    original_config = (ckpt / "config.json").read_text()
    out = tmp_path / "patched"
    added = fix_mtp_ignore_list(ckpt, out)
    assert added == ["mtp.fc", "mtp*"]
    assert (ckpt / "config.json").read_text() == original_config  # source untouched
    assert not (out / "config.json").is_symlink()
    for shard in ckpt.glob("*.safetensors"):
        assert (out / shard.name).is_symlink()
        assert (out / shard.name).resolve() == shard.resolve()
    patched = json.loads((out / "config.json").read_text())["quantization_config"]["ignore"]
    assert patched == ["lm_head", "mtp.layers.0*", "mtp.fc", "mtp*"]
    record = json.loads((out / PATCH_RECORD).read_text())
    assert record["added"] == added and record["patched_files"] == ["config.json"]
    again = inspect_checkpoint(str(out))
    assert not again.has_trap and again.mtp.present


def test_fix_patches_legacy_hf_quant_config_and_exact_lists(tmp_path: Path) -> None:
    ckpt = build(
        tmp_path / "c",
        architecture="Glm4MoeForCausalLM",
        naming="glm",
        trunk_quant="nvfp4",
        hf_quant_config={"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}},
    )
    added = fix_mtp_ignore_list(ckpt, tmp_path / "out")
    assert "model.layers.2.eh_proj" in added and "model.layers.2*" in added
    patched = json.loads((tmp_path / "out" / "hf_quant_config.json").read_text())
    assert "model.layers.2.eh_proj" in patched["quantization"]["exclude_modules"]
    assert (tmp_path / "out" / "config.json").is_symlink()
    assert not inspect_checkpoint(str(tmp_path / "out")).has_trap


def test_fix_without_trap_writes_nothing(tmp_path: Path) -> None:
    ckpt = build(tmp_path / "c", architecture="MiMoForCausalLM", naming="mimo")
    assert fix_mtp_ignore_list(ckpt, tmp_path / "out") == []
    assert not (tmp_path / "out").exists()


def test_pattern_semantics() -> None:
    assert pattern_covers("mtp*", "mtp.fc") and pattern_covers("mtp*", "mtp")
    assert pattern_covers("model.layers.92*", "model.layers.92.eh_proj")
    assert not pattern_covers("mtp.layers.0*", "mtp.fc")
    assert pattern_covers("re:^mtp\\.", "mtp.fc") and not pattern_covers("re:^mtp\\.", "xmtp.fc")
    assert pattern_covers("model.mtp_layers", "model.mtp_layers.0.input_proj")
    assert not pattern_covers("model.layers.6", "model.layers.61.eh_proj")
    assert not pattern_covers("re:[", "anything")  # a broken regex covers nothing


def test_missing_and_non_checkpoint_paths(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        inspect_checkpoint(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a checkpoint"):
        inspect_checkpoint(str(tmp_path / "empty"))
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(ConfigError):
        read_local_header(tmp_path / "bad.safetensors")


# --- via the Hub API, against the stand-in ----------------------------------------------------

TOKEN = "hf_standin_secret_token_123"


@pytest.fixture()
def hub_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, hub.HubState]]:
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    root = tmp_path / "hub"
    build(
        root / "org" / "trap-model",
        architecture="Qwen3NextForCausalLM",
        naming="qwen",
        trunk_quant="nvfp4",
        quantization_config={**MODELOPT_NVFP4, "ignore": ["lm_head", "mtp.layers.0*"]},
    )
    build(root / "org" / "gated-model", architecture="MiMoForCausalLM", naming="mimo")
    server, url = hub.serve(root=root, token=TOKEN, gated={"org/gated-model"})
    try:
        yield url, server.hub_state  # type: ignore[attr-defined]
    finally:
        hub.shutdown(server)


def test_hub_inspection_reads_headers_only_and_matches_local(
    hub_server: tuple[str, hub.HubState], tmp_path: Path
) -> None:
    url, state = hub_server
    report = inspect_checkpoint("org/trap-model", Settings(hf_url=url))
    local = inspect_checkpoint(str(tmp_path / "hub" / "org" / "trap-model"))
    assert report.location == "hub" and report.revision == state.sha("org/trap-model")
    for attr in ("architecture", "weight_bytes", "tensor_count", "unquantized_mtp_not_ignored"):
        assert getattr(report, attr) == getattr(local, attr)
    assert report.mtp == local.mtp
    assert report.unquantized_mtp_not_ignored == ["mtp.fc"]
    weight_gets = [
        (m, p, r) for m, p, r in state.requests if p.endswith(".safetensors") and m == "GET"
    ]
    assert weight_gets, "no header reads happened"
    assert all(r is not None and r.startswith("bytes=") for _, _, r in weight_gets)


def test_hub_gated_repo_needs_the_right_token(hub_server: tuple[str, hub.HubState]) -> None:
    url, _ = hub_server
    with pytest.raises(AuthError) as no_token:
        inspect_checkpoint("org/gated-model", Settings(hf_url=url))
    with pytest.raises(AuthError) as wrong:
        inspect_checkpoint(
            "org/gated-model", Settings(hf_url=url, hf_token=Secret("hf_wrong_123456"))
        )
    for err in (no_token, wrong):
        assert "gated" in err.value.message
        assert "hf_wrong_123456" not in str(err.value) and TOKEN not in str(err.value)
    report = inspect_checkpoint("org/gated-model", Settings(hf_url=url, hf_token=Secret(TOKEN)))
    assert report.mtp.naming == "mimo"


def test_hub_missing_repo_and_unreachable_endpoint(hub_server: tuple[str, hub.HubState]) -> None:
    url, _ = hub_server
    with pytest.raises(ConfigError, match="not found"):
        inspect_checkpoint("org/absent", Settings(hf_url=url))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    with pytest.raises(ProviderError, match="cannot reach"):
        inspect_checkpoint("org/trap-model", Settings(hf_url=f"http://127.0.0.1:{closed}"))


def test_hub_standin_serves_ranges(hub_server: tuple[str, hub.HubState]) -> None:
    import httpx

    url, state = hub_server
    name = "model-00001-of-00002.safetensors"
    path = state.repos["org/trap-model"] / name
    response = httpx.get(
        f"{url}/org/trap-model/resolve/main/{name}", headers={"Range": "bytes=0-7"}
    )
    assert response.status_code == 206
    assert response.content == path.read_bytes()[:8]
    assert response.headers["Content-Range"] == f"bytes 0-7/{os.path.getsize(path)}"
    missing = httpx.get(f"{url}/org/trap-model/resolve/main/absent.json")
    assert (missing.status_code, missing.headers["X-Error-Code"]) == (404, "EntryNotFound")

"""llama.cpp on your own GPU box: launch plans, the local provider's checks, nvidia-smi facts.

Recorded answers come from tests/fixtures/llamacpp/ (README.md there says where each was taken).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.agent.bootstrap.host_facts import machine_facts
from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.engines.llamacpp import LlamaCppAdapter, parse_llamacpp_log
from tailpod.engines.local_install import check_gguf, check_llama_server
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger
from tests import paths

FIXTURES = paths.FIXTURES


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _draft_cfg(version: str | None = None) -> EngineConfig:
    spec = SpecArm(k=4, method="draft_model", draft_model="/m/draft.gguf")
    return EngineConfig(engine="llamacpp", model="/m/t.gguf", spec=spec, version=version)


def test_draft_model_arm_says_draft_simple_on_current_builds() -> None:
    # Since the draft-* type names a draft GGUF alone leaves speculation off (seen on the H200:
    # without --spec-type the server logs "no implementations specified").
    argv = LlamaCppAdapter().launch_plan(_draft_cfg()).argv
    assert _flag(argv, "--spec-type") == "draft-simple"
    assert _flag(argv, "--spec-draft-model") == "/m/draft.gguf"
    assert _flag(argv, "-ngld") == "999" and _flag(argv, "--spec-draft-n-max") == "4"
    old = LlamaCppAdapter().launch_plan(_draft_cfg("2026-03-01")).argv
    assert "--spec-type" not in old and _flag(old, "--model-draft") == "/m/draft.gguf"


def test_every_plan_logs_at_verbosity_4_and_uses_the_given_binary() -> None:
    plan = LlamaCppAdapter().launch_plan(
        EngineConfig(engine="llamacpp", model="/m/t.gguf"), binary="/opt/llama/bin/llama-server"
    )
    assert plan.argv[0] == "/opt/llama/bin/llama-server"
    assert _flag(plan.argv, "-lv") == "4"


@pytest.mark.parametrize("gpus", [2, 4])
def test_gpu_count_splits_the_model_evenly(gpus: int) -> None:
    cfg = EngineConfig(engine="llamacpp", model="/m/t.gguf").on_gpus(gpus)
    argv = LlamaCppAdapter().launch_plan(cfg).argv
    assert _flag(argv, "--split-mode") == "layer"
    assert _flag(argv, "--tensor-split") == ",".join(["1"] * gpus)
    assert not any("tensor parallel" in w for w in LlamaCppAdapter().launch_plan(cfg).warnings)
    row = replace(cfg, extra_args=("--split-mode", "row"))
    argv = LlamaCppAdapter().launch_plan(row).argv
    assert argv.count("--split-mode") == 1 and _flag(argv, "--split-mode") == "row"
    # one GPU: the main one only, however many the box has (llama.cpp spreads over all by default)
    one = LlamaCppAdapter().launch_plan(EngineConfig(engine="llamacpp", model="/m/t.gguf")).argv
    assert _flag(one, "--split-mode") == "none" and "--tensor-split" not in one


def test_draft_phase_facts_from_the_h200_log() -> None:
    text = (FIXTURES / "engine-logs" / "llamacpp_h200_8b_draft_k4_lv4_2026-12.txt").read_text()
    facts = parse_llamacpp_log(text).facts
    assert facts["devices"][0] == {"device": "CUDA0", "name": "NVIDIA H200",
                                   "total_mib": 143155, "free_mib": 142629}  # fmt: skip
    assert [d["model"] for d in facts["devices_used"]] == ["target", "draft"]
    assert (facts["kv_layers"], facts["kv_layers_draft"]) == (32, 1)
    assert facts["draft_devices"] == ["default"]


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_check_llama_server_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an executable"):
        check_llama_server(str(tmp_path / "nope"))
    broken = _script(tmp_path / "broken", "echo 'error: libcudart.so.13 missing' >&2; exit 127\n")
    with pytest.raises(ConfigError, match="exited 127: error: libcudart"):
        check_llama_server(str(broken))
    # The version banner llama-server 0c1e57098 printed on the H200 (to stderr).
    good = _script(tmp_path / "llama-server",
                   "echo 'version: 0 (unknown)' >&2; echo 'built with GNU 13.3.0' >&2\n")
    path, version = check_llama_server(str(good))
    assert path == str(good.resolve()) and version == "version: 0 (unknown)"


def test_check_gguf_reads_the_magic(tmp_path: Path) -> None:
    good = tmp_path / "m.gguf"
    good.write_bytes(b"GGUF\x03\x00\x00\x00")
    check_gguf(str(good), "model")
    bad = tmp_path / "m.safetensors"
    bad.write_bytes(b"{}")
    with pytest.raises(ConfigError, match="not a GGUF file"):
        check_gguf(str(bad), "model")
    with pytest.raises(ConfigError, match="cannot be read"):
        check_gguf(str(tmp_path / "missing.gguf"), "draft model")


def test_up_refuses_a_missing_llama_server_before_the_ledger(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF\x03\x00\x00\x00")
    env = {"TAILPOD_HOME": str(tmp_path / "home"), "TAILPOD_PORT": "18763"}
    result = CliRunner().invoke(app, [
        "up", "--provider", "local", "--engine", "llamacpp", "--model", str(model),
        "--llama-server", str(tmp_path / "no-such-binary"),
    ], env=env)  # fmt: skip
    assert result.exit_code != 0
    assert "not an executable file" in result.output
    assert Ledger(tmp_path / "home").all() == []
    split = CliRunner().invoke(app, [
        "up", "--provider", "local", "--engine", "vllm", "--model", str(model),
        "--split-mode", "row",
    ], env=env)  # fmt: skip
    assert split.exit_code != 0 and "llama.cpp only" in split.output


@pytest.fixture()
def h200_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An `nvidia-smi` on PATH that replays what the real one printed on the H200."""
    fx = FIXTURES / "llamacpp"
    _script(tmp_path / "nvidia-smi", f"""case "$1" in
  --query-gpu=index,*) cat '{fx / "h200_nvidia-smi_query.csv"}' ;;
  "") cat '{fx / "h200_nvidia-smi.txt"}' ;;
  *) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
""")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_machine_facts_from_the_h200_nvidia_smi(h200_nvidia_smi: None) -> None:
    facts = machine_facts()
    assert facts["gpus"] == [{
        "index": 0, "name": "NVIDIA H200", "memory": "143771 MiB", "memory_mib": 143771,
        "driver": "580.159.04", "compute_cap": "9.0", "pci_bus_id": "00000000:00:06.0",
    }]  # fmt: skip
    assert facts["cuda_version"] == "13.0"
    json.dumps(facts)  # recorded as JSON in the ledger and run.json


def test_machine_facts_fall_back_for_an_old_driver(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A driver without compute_cap refuses the whole query; the three older fields still work.
    # Constructed, not recorded: nvidia-smi's csv and banner formats with made-up values.
    _script(tmp_path / "nvidia-smi", """case "$1" in
  --query-gpu=name,*) echo 'NVIDIA A100-SXM4-80GB, 81920, 535.54.03' ;;
  "") echo '| NVIDIA-SMI 535.54.03   Driver Version: 535.54.03   CUDA Version: 12.2 |' ;;
  *) echo 'Field "compute_cap" is not a valid field to query.' >&2; exit 2 ;;
esac
""")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    facts = machine_facts()
    assert [(g["name"], g["memory"], g["compute_cap"]) for g in facts["gpus"]] == [
        ("NVIDIA A100-SXM4-80GB", "81920 MiB", None)
    ]
    assert facts["cuda_version"] == "12.2"


def test_check_requirements_checks_the_llama_server_and_the_gguf(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF\x03\x00\x00\x00")
    server = _script(tmp_path / "llama-server", "echo 'version: 0 (unknown)' >&2\n")
    env = {"TAILPOD_HOME": str(tmp_path / "home"), "TAILPOD_ENGINE": "llamacpp",
           "TAILPOD_LLAMA_SERVER": str(server)}  # fmt: skip
    args = ["check-requirements", "--provider", "local", "--model", str(model), "--json"]
    ok = CliRunner().invoke(app, args, env=env)
    checks = {c["name"]: c for c in json.loads(ok.stdout)["checks"]}
    assert checks["tools"]["status"] == "pass" and checks["checkpoint"]["status"] == "pass"
    assert checks["hf"]["status"] == "skip"
    missing = CliRunner().invoke(app, args, env={**env, "TAILPOD_LLAMA_SERVER": "/no/such"})
    assert missing.exit_code != 0
    assert {c["name"]: c for c in json.loads(missing.stdout)["checks"]}["tools"]["status"] == "fail"
    model.write_bytes(b"{}")
    bad = CliRunner().invoke(app, args, env=env)
    assert {c["name"]: c for c in json.loads(bad.stdout)["checks"]}["checkpoint"]["status"] == "fail"


def test_a_local_vllm_on_a_gpu_box_is_served_like_a_rented_gpu(h200_nvidia_smi: None) -> None:
    """On the H200 a local vLLM was recorded as "local CPU" with the CPU build's small context and
    eager mode; with a GPU in nvidia-smi it gets neither."""
    from tailpod.engines.adapters import get_adapter
    from tailpod.pods.kinds import kind_for

    local = kind_for("local")
    assert local.serves_on_cpu(get_adapter("vllm")) is False
    assert local.serves_on_cpu(get_adapter("llamacpp")) is False


def test_a_local_vllm_without_a_gpu_gets_the_cpu_defaults(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.engines.adapters import get_adapter
    from tailpod.pods.kinds import kind_for

    _script(tmp_path / "nvidia-smi", "exit 9\n")  # a box whose nvidia-smi finds no GPU
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert kind_for("local").serves_on_cpu(get_adapter("vllm")) is True

"""`up --volume` before anything is rented: placement in the volume's data center, the GPU list
filtered (and said), the mount and the cache environment, compile caches keyed so that another
engine image, checkpoint revision or argv never shares one; refusals that rent nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailpod.agent.bootstrap.terminate import TERMINATE_ROUTES
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger
from tailpod.pods.cloud import _mount_volume
from tailpod.pods.start_command import KEPT_ENV, start_script
from tailpod.provision import volumes as vol
from tailpod.provision.base import PodSpec
from tailpod.provision.providers import get_provider
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings

from .conftest import settings_for


def _spec(gpus: list[str]) -> PodSpec:
    return PodSpec(run_tag="tp-up-vol", gpu_preference=gpus, image="vllm/vllm-openai@sha256:ab",
                   start_command=["sleep", "1"])


@pytest.fixture()
def ro_volume(sandbox: Sandbox, tailpod_home: Path) -> vol.VolumeRecord:
    provider = get_provider("runpod", settings_for(sandbox, tailpod_home),
                            timings=fast_timings())
    return vol.create_volume_safely(provider, Ledger(tailpod_home), "ro", 20,
                                    vol.Placement("EU-RO-1", None, ["NVIDIA A40"]))


def test_the_pod_goes_to_the_volumes_data_center_with_the_list_filtered(
        sandbox: Sandbox, tailpod_home: Path, ro_volume: vol.VolumeRecord) -> None:
    settings = settings_for(sandbox, tailpod_home, TAILPOD_PROVIDER="runpod")
    said: list[str] = []
    spec = _spec(["H200 SXM", "A40"])
    cfg = EngineConfig(engine="vllm", model=str(tailpod_home), context_length=1024)  # a local dir
    mount = _mount_volume(settings, Ledger(tailpod_home), cfg, spec, "ro", said.append)
    assert spec.gpu_preference == ["NVIDIA A40"]
    assert spec.volume_id == ro_volume.volume_id and spec.data_center_ids == ["EU-RO-1"]
    assert spec.volume_mount_path == "/workspace"  # runpod/docs storage/network-volumes.mdx
    assert any("none of H200 SXM" in line for line in said)
    env = {k: str(v) for k, v in spec.env.items()}
    assert env["HF_HOME"] == "/workspace/tailpod/hf"
    compile_dirs = {env[k] for k in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR",
                                     "TORCHINDUCTOR_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
                                     "SGLANG_CACHE_DIR")}
    assert len(compile_dirs) == 5 and all(d.startswith("/workspace/tailpod/compile/")
                                          for d in compile_dirs)
    assert mount.to_json()["dropped"] == ["H200 SXM"]

    def key_of(cfg: EngineConfig, image: str = "vllm/vllm-openai@sha256:ab") -> str:
        other = _spec(["A40"])
        other.image = image
        _mount_volume(settings, Ledger(tailpod_home), cfg, other, "ro", said.append)
        return str(other.env["VLLM_CACHE_ROOT"]).split("/")[4]

    same = key_of(cfg)
    assert same == str(spec.env["VLLM_CACHE_ROOT"]).split("/")[4]
    assert key_of(EngineConfig(engine="vllm", model=str(tailpod_home), context_length=2048)) \
        != same  # another argv
    assert key_of(cfg, image="vllm/vllm-openai@sha256:cd") != same  # another engine build


def test_the_compile_cache_key_covers_engine_revision_and_argv() -> None:
    base = ("vllm", "vllm/vllm-openai@sha256:ab", "org/m", "0123abc", ["vllm", "serve", "x"])
    key = vol.compile_cache_key(*base)  # type: ignore[arg-type]
    assert len(key) == 16 and key == vol.compile_cache_key(*base)  # type: ignore[arg-type]
    for i, other in ((1, "vllm/vllm-openai@sha256:cd"), (3, "fedcba9"),
                     (4, ["vllm", "serve", "y"])):
        changed = list(base)
        changed[i] = other
        assert vol.compile_cache_key(*changed) != key  # type: ignore[arg-type]


def test_a_volume_whose_data_center_has_none_of_the_gpus_rents_nothing(
        sandbox: Sandbox, tailpod_home: Path, ro_volume: vol.VolumeRecord) -> None:
    settings = settings_for(sandbox, tailpod_home, TAILPOD_PROVIDER="runpod")
    with pytest.raises(ConfigError, match="none of H200 SXM"):
        _mount_volume(settings, Ledger(tailpod_home), EngineConfig(engine="vllm", model="m"),
                      _spec(["H200 SXM"]), "ro", lambda _line: None)
    with pytest.raises(ConfigError, match="no volume nosuch"):
        _mount_volume(settings, Ledger(tailpod_home), EngineConfig(engine="vllm", model="m"),
                      _spec(["A40"]), "nosuch", lambda _line: None)
    assert [r["name"] for r in sandbox.billing_now()] == ["tp-vol-ro"]  # no pod was rented


def test_the_dead_man_and_the_engine_see_the_volume_only_as_caches() -> None:
    """The on-pod dead-man's routes end pods only; the cache variables reach the engine, which
    is started over SSH and reads the kept environment file."""
    assert not any("volume" in path for routes in TERMINATE_ROUTES.values()
                   for _m, path, _b in routes)
    import re
    line = next(x for x in start_script("tp-x", ["tag:t"], keep_caches=True).splitlines()
                if x.startswith("env | grep -E"))
    kept = re.compile("^(" + line.split("'^(")[1].split(")='")[0] + ")$")
    assert all(kept.match(name) for name in vol.CACHE_ENV_NAMES)
    assert not any(re.match(f"^({KEPT_ENV})$", name) for name in vol.CACHE_ENV_NAMES)

"""Fixtures for the cloud tests: each provider of the sandbox cloud (tests/conftest.py's `sandbox`,
fresh per test) wired to a fast adapter, ledger and policy."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tailpod.config import Settings, load_settings
from tailpod.ledger import Ledger, PodRecord, new_run_tag
from tailpod.provision.base import PodSpec, Provider
from tailpod.provision.providers import get_provider
from tailpod.provision.teardown import LifecyclePolicy
from tailpod.sandbox import Sandbox, start_sandbox
from tailpod.sandbox.faults import Fault
from tailpod.secrets import Secret
from tests import paths
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy
from tests.helpers.silent_port import silent_port

# Each provider's names for "a GPU that is rarely free" and "a common one" in the sandbox catalog.
GPUS = {
    "runpod": {"first": "NVIDIA H100 80GB HBM3", "second": "NVIDIA A40", "sandbox_name_first":
               "NVIDIA H100 80GB HBM3", "sandbox_name_second": "NVIDIA A40"},
    "vastai": {"first": "H100 SXM", "second": "RTX 4090", "sandbox_name_first": "H100 SXM",
               "sandbox_name_second": "RTX 4090"},
}
SANDBOX_NAME = {"runpod": "runpod", "vastai": "vast"}
HF_SECRET = "hf_TESTSECRETvalue0123456789abcdef"


def settings_for(sb: Sandbox, home: Path, **env: str) -> Settings:
    base = {**sb.env(), "TAILPOD_HOME": str(home)}
    base.update(env)
    return load_settings(env=base, dotenv_path=home / "absent.env")


OTHER_KEY = {"runpod": "VAST_API_KEY", "vastai": "RUNPOD_API_KEY"}


def shell_for(sb: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch,
              provider: str = "runpod") -> dict[str, str]:
    """The environment a user's shell has for `tailpod` on one provider of the sandbox: its URL
    and key (the other provider's key removed), TAILPOD_PROVIDER, results under `home`. Set in
    this process (for CliRunner) and returned (for `settings_for(sb, home, **env)`)."""
    env = {**sb.env(), "TAILPOD_PROVIDER": provider, "TAILPOD_RESULTS_DIR": str(home / "results")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv(OTHER_KEY[provider], raising=False)
    return env



def ssh_box_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                  home: Path | None = None) -> Path:
    """The environment a user's shell has for `--provider ssh`: a fresh ed25519 key (returned) as
    TAILPOD_SSH_KEY, TAILPOD_HOME (`tmp_path / "home"` unless given), results under `tmp_path`,
    no .env file, and no default box or cloud key to ask instead."""
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True,
                   capture_output=True, timeout=30)
    for name, value in {"TAILPOD_HOME": str(home or tmp_path / "home"), "TAILPOD_SSH_KEY": str(key),
                        "TAILPOD_ENV_FILE": os.devnull,
                        "TAILPOD_RESULTS_DIR": str(tmp_path / "results")}.items():
        monkeypatch.setenv(name, value)
    for name in ("TAILPOD_SSH_HOST", "RUNPOD_API_KEY", "VAST_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return key


def kill_9_when_ready(argv: list[str], env: dict[str, str], ready: Path) -> int:
    """Run `argv` from the repository, `env` over this process's, until it writes `ready`, then
    SIGKILL it as a user's `kill -9` would, and return its pid; one that ends first fails the
    test with its output. The 120 s bound is against a hang, not a speed claim."""
    child = subprocess.Popen(argv, cwd=paths.REPO, env={**os.environ, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), child.communicate(timeout=10)[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
    return child.pid

@pytest.fixture()
def cli_env(sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """`shell_for` the sandbox's RunPod, in the test's home."""
    return shell_for(sandbox, tailpod_home, monkeypatch)


@dataclass
class Cloud:
    """One provider of the sandbox, wired for a test: adapter, ledger, policy, helpers."""

    kind: str  # "runpod" | "vastai"
    sandbox: Sandbox
    settings: Settings
    provider: Provider
    ledger: Ledger
    policy: LifecyclePolicy
    home: Path

    @property
    def sandbox_name(self) -> str:
        return SANDBOX_NAME[self.kind]

    def gpu(self, which: str) -> str:
        return GPUS[self.kind][which]

    def spec(self, gpus: list[str] | None = None, **kw: object) -> PodSpec:
        tag = str(kw.pop("run_tag", new_run_tag()))
        return PodSpec(
            run_tag=tag,
            gpu_preference=gpus if gpus is not None else [self.gpu("first"), self.gpu("second")],
            image="sandbox/image:latest",
            start_command=["sleep", "60"],
            env={"HF_TOKEN": Secret(HF_SECRET), "TAILPOD_RUN_TAG": tag},
            disk_gb=20,
            ports=[22, 8000],
            **kw,  # type: ignore[arg-type]
        )

    def record(self, spec: PodSpec) -> PodRecord:
        return PodRecord(run_tag=spec.run_tag, provider=self.provider.name)

    def fault(self, kind: str, **fields: object) -> Fault:
        """Add a fault for this provider; its `fired` counts the calls it changed."""
        return self.sandbox.add_fault(kind, provider=self.sandbox_name, **fields)

    def billing(self) -> list[dict[str, object]]:
        return [r for r in self.sandbox.billing_now()]

    def run_dir(self, tag: str) -> Path:
        return self.home / "results" / tag

    def new_provider(self, **env: str) -> Provider:
        return get_provider(self.kind, settings_for(self.sandbox, self.home, **env),
                            timings=fast_timings())

    def recording_sleeps(self, **timings: float) -> list[float]:
        """Swap in an adapter whose waits really happen and are recorded, in order."""
        slept: list[float] = []

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            time.sleep(seconds)

        self.provider = get_provider(self.kind, self.settings,
                                     timings=replace(fast_timings(), **timings), sleep=sleep)
        return slept


@pytest.fixture()
def silent_api() -> Iterator[str]:
    """An HTTP endpoint that accepts every connection and never answers a byte."""
    with silent_port() as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture()
def retired(tmp_path: Path) -> Iterator[Sandbox]:
    """The sandbox clouds with RunPod's GraphQL endpoint retired (404), as it will be."""
    with start_sandbox(start_delay_s=0.05, workdir=tmp_path / "sandbox", stand_ins=False,
                       graphql_retired=True) as sb:
        yield sb

@pytest.fixture(params=["runpod", "vastai"])
def cloud(request: pytest.FixtureRequest, sandbox: Sandbox, tailpod_home: Path) -> Cloud:
    settings = settings_for(sandbox, tailpod_home)
    provider = get_provider(request.param, settings, timings=fast_timings())
    return Cloud(request.param, sandbox, settings, provider, Ledger(tailpod_home),
                 fast_policy(), tailpod_home)


@pytest.fixture()
def make_cloud(sandbox: Sandbox, tailpod_home: Path) -> Callable[[str], Cloud]:
    def make(kind: str) -> Cloud:
        settings = settings_for(sandbox, tailpod_home)
        provider = get_provider(kind, settings, timings=fast_timings())
        return Cloud(kind, sandbox, settings, provider, Ledger(tailpod_home),
                     fast_policy(), tailpod_home)

    return make

"""On a pod that has no HAProxy and cannot install it, `up --lanes` is refused before either lane
engine starts: the agent's `proxy prepare` comes first (tailpod/pods/cloud_lanes.py). Before,
both lanes started (7-8 s of the pod's time, a GPU's on a real pod) and were then stopped
(adversary-2026-12.md, row 10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tailpod.agent_client.driver import AgentError
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.pods import cloud_lanes, lanes


class NoHaproxyAgent:
    """The pod's agent on a pod without HAProxy or a way to install it: records each verb."""

    state_dir = "/pod/.tailpod"

    def __init__(self) -> None:
        self.verbs: list[str] = []

    def call(self, verb: str, payload: Any = None, timeout_s: float = 0) -> dict[str, Any]:
        self.verbs.append(verb)
        if verb == "proxy prepare":
            raise AgentError(verb, "proxy_prepare", "haproxy is not installed and this pod "
                             "cannot install it: apt-get update exited 100", [], 1)
        return {"log_text": "", "startup_s": 1.0}

    def gate(self, request: dict[str, Any]) -> dict[str, Any]:
        self.verbs.append("probe gate")
        return {"status": "pass", "method": "token_ids"}


def test_a_pod_that_cannot_have_haproxy_starts_no_lane(tailpod_home: Path) -> None:
    agent = NoHaproxyAgent()
    launches = [lanes.LaneLaunch(name="spec", argv=["serve"], port=8001),
                lanes.LaneLaunch(name="plain", argv=["serve"], port=8002)]
    with pytest.raises(AgentError, match="cannot install it"):
        cloud_lanes.start_lanes_on_pod(agent, load_settings(),  # type: ignore[arg-type]
                                       EngineConfig(engine="vllm", model="m", port=8000),
                                       launches, 1)
    assert agent.verbs == ["proxy prepare"]

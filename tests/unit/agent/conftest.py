"""The agent's tests measure against the probe tests' synthetic servers."""

from tests.unit.agent.probes.conftest import synthetic  # noqa: F401 - a fixture, used by name

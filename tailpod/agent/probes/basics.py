"""Constants, the log line and the setup error every probe layer shares.
"""

from __future__ import annotations

import sys

PROBE_VERSION = "1.0"
DEFAULT_BASE_URL = "http://127.0.0.1:8000"
# A cell is client-bound when the probe's own CPU time over the cell wall time reaches this
# fraction of one core: past it, timestamps are taken late and throughput is the client's.
CLIENT_BOUND_CPU_FRACTION = 0.8
# Scheduling lag above this (seconds) distorts TTFT and chunk gaps enough to be worth a flag.
LOOP_LAG_FLAG_S = 0.05
# The engines whose streams, usage and metrics the probe reads in their own dialect; any other
# engine is measured as a generic OpenAI-compatible server.
PROBE_ENGINES = ("vllm", "sglang")


API_KEY_ENV = "TAILPOD_PROBE_API_KEY"
USER_AGENT = "tailpod-probe/" + PROBE_VERSION


def log(message: str) -> None:
    sys.stderr.write("[probe] " + message + "\n")
    sys.stderr.flush()


class ProbeError(Exception):
    """A setup problem that stops the probe (unreachable server, bad config)."""

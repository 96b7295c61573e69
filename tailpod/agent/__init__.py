"""tailpod's pod agent: everything that runs on a pod, as one stdlib-only package (Python 3.8+).

Built into one deterministic zipapp by tailpod/agent_client/build.py and run on the pod as
`python3 -I agent-<hash>.pyz <verb> [<sub>]` with a JSON object on stdin; it answers with one JSON
envelope on the last line of stdout (docs/agent.md). `bootstrap` starts and guards the engine;
`probes` measures it. Nothing here imports anything outside this package and the standard
library (tests/unit/agent/test_agent_stdlib.py), and this module holds the facts the laptop shares
with the pod: the laptop imports them from here.
"""

from __future__ import annotations

AGENT_VERSION = "1"
# Result rows format (docs/probe.md, docs/results-schema.json): rows written before a change read
# the same after it.
SCHEMA_VERSION = 1
# The stamp on every row measured from off the pod (network latency is then in every number).
OFF_POD_FLAG = "DO NOT QUOTE AGGREGATE"

"""The ONE pod-side termination table: how a pod ends itself, per provider.

The dead-man daemon (deadman.py) walks it on every attempt; the stage-0 guard in the start
command walks the same table (tailpod/agent_client/build.py fills it into guard.py when it
minifies the guard); the laptop's provider adapters follow it too
(tests/unit/provision/test_provider_capabilities.py). So every path kills a pod the same ways.
"""

from __future__ import annotations

from typing import Any

# Each provider's pod id and pod-scoped key variables (the provider injects both into the pod)
# and its public API base.
PROVIDERS: dict[str, dict[str, str]] = {
    "runpod": {"id_env": "RUNPOD_POD_ID", "key_env": "RUNPOD_API_KEY",
               "api_url": "https://api.runpod.io"},
    "vastai": {"id_env": "CONTAINER_ID", "key_env": "CONTAINER_API_KEY",
               "api_url": "https://console.vast.ai"},
}
ALIASES = {"vast": "vastai", "vast.ai": "vastai", "run-pod": "runpod", "runpod": "runpod",
           "vastai": "vastai"}

RUNPOD_TERMINATE_GQL = (
    "mutation DeadmanTerminate($input: PodTerminateInput!) { podTerminate(input: $input) }"
)

# Each attempt walks a provider's routes in order until one is accepted or says the pod is gone.
# `{id}` is the pod id. RunPod: REST v2 `DELETE /v2/pods/{id}` (204), then
# `POST /v2/pods/{id}/action` with `{"action": "terminate"}` (204) - both runpod/docs
# api-reference-v2/openapi.json @ a900806e - then GraphQL `podTerminate`, which in-pod scripts use
# with the injected key, for when REST refuses the pod-scoped key (undocumented either way).
# vast.ai: `DELETE /api/v0/instances/{id}/` with CONTAINER_API_KEY, the instance-restricted key
# vast injects.
TERMINATE_ROUTES: dict[str, list[tuple[str, str, Any]]] = {
    "runpod": [
        ("DELETE", "/v2/pods/{id}", None),
        ("POST", "/v2/pods/{id}/action", {"action": "terminate"}),
        ("POST", "/graphql", {"query": RUNPOD_TERMINATE_GQL,
                              "variables": {"input": {"podId": "{id}"}}}),
    ],
    "vastai": [("DELETE", "/api/v0/instances/{id}/", {})],
}

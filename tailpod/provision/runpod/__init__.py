"""RunPod adapter (REST v2 for pods and the catalog, GraphQL with variables for spend data)."""

from tailpod.provision.runpod.provider import RunPodProvider

__all__ = ["RunPodProvider"]

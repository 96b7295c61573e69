"""The sandbox cloud: local emulators of RunPod and vast.ai with a billing meter and faults."""

from tailpod.sandbox.cloud import DEFAULT_RUNPOD_KEY, DEFAULT_VAST_KEY, SandboxCloud
from tailpod.sandbox.podhost import PodHost, ProcessPodHost
from tailpod.sandbox.server import STAND_INS, Sandbox, admin_call, start_sandbox

__all__ = [
    "DEFAULT_RUNPOD_KEY",
    "DEFAULT_VAST_KEY",
    "STAND_INS",
    "PodHost",
    "ProcessPodHost",
    "Sandbox",
    "SandboxCloud",
    "admin_call",
    "start_sandbox",
]

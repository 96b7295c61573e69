"""An in-memory cloud for the recovery and status tests of tailpod/provision/reconcile.py: its
listing is what the test scripts, and it records what it was asked."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tailpod.provision.base import BillingEvidence, PodInfo, Provider


class ScriptedCloud(Provider):
    """Lists `pods` (those under the tag asked for); `error` makes every listing raise it; each
    tag a listing asked for is kept in `asked` (None: every pod)."""

    name = "scripted"

    def __init__(self, pods: Iterable[PodInfo] = (), error: Exception | None = None) -> None:
        self.pods = list(pods)
        self.error = error
        self.asked: list[str | None] = []

    @property
    def listings(self) -> int:
        return len(self.asked)

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Any]:
        return []

    def create(self, spec: Any) -> PodInfo:
        raise AssertionError("recovery never creates")

    def get(self, pod_id: str) -> PodInfo | None:
        return next((p for p in self.pods if p.pod_id == pod_id), None)

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        self.asked.append(run_tag)
        if self.error is not None:
            raise self.error
        return [p for p in self.pods if run_tag is None or p.run_tag == run_tag]

    def terminate(self, pod_id: str) -> None:
        raise AssertionError("recovery never terminates")

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        raise AssertionError("recovery proves nothing")

"""Providers declare what they can do on their class (issue 15 step 3), and callers ask the
declaration: no `hasattr`, no signature sniffing."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tailpod.agent.bootstrap import terminate
from tailpod.provision import base
from tailpod.provision.base import (
    AccountFacts,
    BillingEvidence,
    Offer,
    PodInfo,
    PodSpec,
    Provider,
    SupportsAccount,
    SupportsPodScopedTermination,
    capabilities,
)
from tailpod.provision.providers import CLOUD_PROVIDERS, PROVIDERS, provider_class

EXPECTED = {
    "local": [],
    "runpod": ["account", "spend-rate", "container-log", "pod-scoped-termination", "volumes",
               "gpu-names", "hidden-offers"],
    "vastai": ["account", "container-log", "pod-scoped-termination", "volumes", "gpu-names",
               "hidden-offers"],
    "ssh": [],  # your own box: nothing rented, no account, no log of a container
}


def test_every_provider_declares_its_capabilities() -> None:
    assert set(EXPECTED) == set(PROVIDERS)
    for name in PROVIDERS:
        assert capabilities(provider_class(name)) == EXPECTED[name], name


def test_every_cloud_pod_can_terminate_itself_through_the_pod_side_table() -> None:
    """A cloud provider names its entry in the dead-man switch's tables, which the guard and the
    daemon walk; its own terminate takes the first route of that table."""
    for name in CLOUD_PROVIDERS:
        cls = provider_class(name)
        assert issubclass(cls, SupportsPodScopedTermination), name
        assert cls.pod_termination in terminate.TERMINATE_ROUTES, name
        assert cls.pod_termination in terminate.PROVIDERS, name


def test_the_adapters_terminate_takes_the_tables_first_route(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The route the adapter deletes through is the table's, not a copy: a changed table (here a
    made-up path) changes what the adapter calls."""
    for name in CLOUD_PROVIDERS:
        method, path, body = terminate.TERMINATE_ROUTES[name][0]
        monkeypatch.setitem(terminate.TERMINATE_ROUTES, name,
                            [(method, "/moved" + path, body), *terminate.TERMINATE_ROUTES[name][1:]])
    calls: list[tuple[str, str]] = []

    class Api:
        def call(self, method: str, path: str, what: str, **_: Any) -> Any:
            calls.append((method, path))
            return type("R", (), {"status_code": 404})()

    for name in CLOUD_PROVIDERS:
        cls: Any = provider_class(name)
        adapter = cls.__new__(cls)
        adapter.api = Api()
        adapter.terminate("pod/1")
        method, path, _ = terminate.TERMINATE_ROUTES[cls.pod_termination][0]
        assert path.startswith("/moved/")
        assert calls[-1] == (method, path.replace("{id}", "pod%2F1")), name


def test_billing_evidence_takes_known_active_tags_on_every_provider() -> None:
    """The lifecycle always passes the other live runs; every adapter accepts them."""
    for name in PROVIDERS:
        params = inspect.signature(provider_class(name).billing_evidence).parameters
        assert params["known_active_tags"].kind is inspect.Parameter.KEYWORD_ONLY, name


class _Minimal(Provider):
    name = "minimal"

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Offer]:
        return []

    def create(self, spec: PodSpec) -> PodInfo:
        raise NotImplementedError

    def get(self, pod_id: str) -> PodInfo | None:
        return None

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        return []

    def terminate(self, pod_id: str) -> None:
        return None

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Any = ()) -> BillingEvidence:
        return BillingEvidence([])


def test_a_provider_declares_nothing_it_does_not_inherit() -> None:
    assert capabilities(_Minimal()) == []

    class WithAccount(_Minimal, SupportsAccount):
        def account(self) -> AccountFacts:
            return AccountFacts(3.0)

    assert capabilities(WithAccount()) == ["account"]
    with pytest.raises(TypeError):  # a declared capability without its method is refused
        type("Half", (_Minimal, SupportsAccount), {})()
    assert set(base.CAPABILITIES) == {"account", "spend-rate", "container-log",
                                      "pod-scoped-termination", "volumes", "gpu-names",
                                      "hidden-offers"}

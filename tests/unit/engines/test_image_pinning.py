"""Image pinning through the Registry HTTP API v2, against the registry stand-in."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from tailpod.engines.image import is_mutable_tag, parse_image_ref, pin_image
from tailpod.errors import AuthError, ConfigError, ProviderError
from tailpod.sandbox import image_registry as registry

SGLANG_DIGEST = "sha256:" + "a" * 64
UBUNTU_DIGEST = "sha256:" + "b" * 64
LATEST_DIGEST = "sha256:" + "c" * 64


@pytest.fixture()
def registry_url() -> Iterator[tuple[str, registry.RegistryState]]:
    images = {
        "lmsysorg/sglang": {"v0.5.15": SGLANG_DIGEST, "latest": LATEST_DIGEST},
        "library/ubuntu": {"22.04": UBUNTU_DIGEST},
    }
    server, url = registry.serve(images=images)
    try:
        yield url, server.registry_state  # type: ignore[attr-defined]
    finally:
        registry.shutdown(server)


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_version_tag_resolves_to_its_digest(
    registry_url: tuple[str, registry.RegistryState],
) -> None:
    url, state = registry_url
    pinned = pin_image("lmsysorg/sglang:v0.5.15", registry_url=url, auth_url=url)
    assert (pinned.repo, pinned.tag, pinned.digest) == ("lmsysorg/sglang", "v0.5.15", SGLANG_DIGEST)
    assert pinned.pinned_ref == f"lmsysorg/sglang@{SGLANG_DIGEST}"
    assert ("GET", "/token") in state.requests
    assert ("HEAD", "/v2/lmsysorg/sglang/manifests/v0.5.15") in state.requests


def test_official_images_get_library_prefix(
    registry_url: tuple[str, registry.RegistryState],
) -> None:
    url, _ = registry_url
    for ref in ("ubuntu:22.04", "docker.io/ubuntu:22.04", "docker.io/library/ubuntu:22.04"):
        pinned = pin_image(ref, registry_url=url, auth_url=url)
        assert (pinned.repo, pinned.digest) == ("library/ubuntu", UBUNTU_DIGEST)


def test_pinned_refs_pass_through_without_network() -> None:
    dead = _closed_port_url()
    digest = "sha256:" + "d" * 64
    pinned = pin_image(f"lmsysorg/sglang:v0.5.15@{digest}", registry_url=dead, auth_url=dead)
    assert (pinned.tag, pinned.digest, pinned.pinned_ref) == (
        "v0.5.15",
        digest,
        f"lmsysorg/sglang@{digest}",
    )
    assert pin_image(f"ubuntu@{digest}", registry_url=dead).repo == "library/ubuntu"


@pytest.mark.parametrize(
    "ref", ["lmsysorg/sglang", "lmsysorg/sglang:latest", "x/y:dev-cu12", "x/y:nightly"]
)
def test_moving_tags_are_refused(ref: str) -> None:
    dead = _closed_port_url()
    with pytest.raises(ConfigError, match="moves over time"):
        pin_image(ref, registry_url=dead, auth_url=dead)


def test_allow_unpinned_still_resolves(registry_url: tuple[str, registry.RegistryState]) -> None:
    url, _ = registry_url
    for ref in ("lmsysorg/sglang:latest", "lmsysorg/sglang"):
        pinned = pin_image(ref, registry_url=url, auth_url=url, allow_unpinned=True)
        assert (pinned.tag, pinned.digest) == ("latest", LATEST_DIGEST)


def test_unknown_tag_and_repo(registry_url: tuple[str, registry.RegistryState]) -> None:
    url, _ = registry_url
    with pytest.raises(ConfigError, match="does not exist"):
        pin_image("lmsysorg/sglang:v9.9.9", registry_url=url, auth_url=url)
    with pytest.raises(ConfigError, match="does not exist"):
        pin_image("nobody/nothing:v1", registry_url=url, auth_url=url)


def test_auth_failure_and_unreachable_registry() -> None:
    server, url = registry.serve(images={"a/b": {"v1": SGLANG_DIGEST}}, deny_tokens=True)
    try:
        with pytest.raises(AuthError, match="refused a pull token"):
            pin_image("a/b:v1", registry_url=url, auth_url=url)
    finally:
        registry.shutdown(server)
    dead = _closed_port_url()
    with pytest.raises(ProviderError, match="cannot reach"):
        pin_image("a/b:v1", registry_url=dead, auth_url=dead, attempts=2)


def test_manifest_needs_the_token_for_that_repo(
    registry_url: tuple[str, registry.RegistryState],
) -> None:
    url, _ = registry_url
    token = httpx.get(
        f"{url}/token",
        params={"service": "registry.docker.io", "scope": "repository:library/ubuntu:pull"},
    ).json()["token"]
    other = httpx.head(
        f"{url}/v2/lmsysorg/sglang/manifests/v0.5.15", headers={"Authorization": f"Bearer {token}"}
    )
    assert other.status_code == 401 and "Bearer realm=" in other.headers["WWW-Authenticate"]
    own = httpx.get(
        f"{url}/v2/library/ubuntu/manifests/22.04",
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.oci.image.index.v1+json",
        },
    )
    assert own.headers["Docker-Content-Digest"] == UBUNTU_DIGEST
    assert own.headers["Content-Type"] == "application/vnd.oci.image.index.v1+json"


def test_reference_parsing_rules() -> None:
    assert (
        parse_image_ref("registry-1.docker.io/vllm/vllm-openai:v0.11.0").repo == "vllm/vllm-openai"
    )
    for other_registry in ("ghcr.io/org/img:v1", "localhost:5000/x:v1"):
        with pytest.raises(ConfigError, match="only Docker Hub"):
            parse_image_ref(other_registry)
    with pytest.raises(ConfigError, match="sha256"):
        parse_image_ref("x/y@sha256:short")
    with pytest.raises(ConfigError):
        parse_image_ref("Upper/Case:v1")
    assert is_mutable_tag(None) and is_mutable_tag("latest-cu129") and not is_mutable_tag("v0.5.15")

"""Pin a Docker Hub image reference to its content digest before a pod is rented with it.

Tags move; digests do not. `pin_image("lmsysorg/sglang:v0.5.15")` asks Docker Hub's token service
for an anonymous pull token and reads `Docker-Content-Digest` from a `HEAD` on the manifest (asking
for the multi-arch index, so the digest is the one `docker pull repo@digest` expects). References
that are already pinned pass through without network. Tags designed to move (`latest`, `dev`,
`nightly`, …) and references without a tag are refused unless `allow_unpinned=True`, in which case
they are still resolved, so the run records what it actually got.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import httpx
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from tailpod.config import Settings
from tailpod.errors import AuthError, ConfigError, ProviderError

SERVICE = "registry.docker.io"
MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    )
)
DOCKER_HUB_HOSTS = {
    "docker.io",
    "index.docker.io",
    "registry-1.docker.io",
    "registry.hub.docker.com",
}
_MUTABLE = re.compile(r"^(latest|dev|nightly|main|master|edge|stable|rolling)([-_.].*)?$", re.I)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_REPO = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")


@dataclass(frozen=True)
class PinnedImage:
    repo: str  # e.g. "lmsysorg/sglang", "library/ubuntu"
    tag: str | None
    digest: str  # "sha256:…"
    pinned_ref: str  # what to hand to the provider: "lmsysorg/sglang@sha256:…"


@dataclass(frozen=True)
class ImageRef:
    repo: str
    tag: str | None
    digest: str | None


def parse_image_ref(ref: str) -> ImageRef:
    """`[docker.io/]name[:tag][@sha256:…]` → repository (with `library/` for official images)."""
    text = (ref or "").strip()
    if not text:
        raise ConfigError("empty image reference")
    name, _, digest = text.partition("@")
    digest = digest or ""
    if digest and not _DIGEST.match(digest):
        raise ConfigError(f"{ref!r}: a digest must look like sha256:<64 hex digits>")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        if first.lower() not in DOCKER_HUB_HOSTS:
            raise ConfigError(
                f"{ref!r} names registry {first}; only Docker Hub images are resolved",
                hint="pin it yourself as name@sha256:<digest>",
            )
        name = rest
    repo, tag = name, None
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        repo, tag = name[:colon], name[colon + 1 :]
    if "/" not in repo:
        repo = f"library/{repo}"
    if not _REPO.match(repo):
        raise ConfigError(f"{ref!r}: {repo!r} is not a valid repository name")
    if tag is not None and not _TAG.match(tag):
        raise ConfigError(f"{ref!r}: {tag!r} is not a valid tag")
    return ImageRef(repo=repo, tag=tag, digest=digest or None)


def is_mutable_tag(tag: str | None) -> bool:
    return tag is None or bool(_MUTABLE.match(tag))


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code >= 500


def pin_image(
    ref: str,
    settings: Settings | None = None,
    *,
    registry_url: str | None = None,
    auth_url: str | None = None,
    allow_unpinned: bool = False,
    timeout: float = 15.0,
    attempts: int = 3,
) -> PinnedImage:
    """Resolve `ref` to an immutable `repo@sha256:…`."""
    parsed = parse_image_ref(ref)
    if parsed.digest:
        pinned = f"{parsed.repo}@{parsed.digest}"
        return PinnedImage(parsed.repo, parsed.tag, parsed.digest, pinned)
    if is_mutable_tag(parsed.tag) and not allow_unpinned:
        what = "has no tag (it means :latest)" if parsed.tag is None else f"uses tag {parsed.tag!r}"
        raise ConfigError(
            f"image {ref!r} {what}, which moves over time, so runs would not be reproducible",
            hint="use a version tag (e.g. lmsysorg/sglang:v0.5.15) or name@sha256:<digest>; "
            "pass allow_unpinned to resolve it anyway",
        )
    tag = parsed.tag or "latest"
    settings = settings or Settings()
    registry = (registry_url or settings.registry_url).rstrip("/")
    auth = (auth_url or settings.registry_auth_url).rstrip("/")
    retry = Retrying(
        stop=stop_after_attempt(max(1, attempts)),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        retry=retry_if_exception(_transient),
        reraise=True,
    )
    try:
        with httpx.Client(timeout=timeout, follow_redirects=True) as client:
            token = retry(_fetch_token, client, auth, parsed.repo)
            digest = retry(_fetch_digest, client, registry, parsed.repo, tag, token)
    except httpx.TransportError as exc:
        raise ProviderError(
            f"cannot reach the image registry ({exc.__class__.__name__}) for {parsed.repo}:{tag}",
            hint="check the network, TAILPOD_REGISTRY_URL and TAILPOD_REGISTRY_AUTH_URL",
        ) from None
    except httpx.HTTPStatusError as exc:
        raise ProviderError(
            f"image registry failed (HTTP {exc.response.status_code}) for {parsed.repo}:{tag}"
        ) from None
    return PinnedImage(parsed.repo, tag, digest, f"{parsed.repo}@{digest}")


def _fetch_token(client: httpx.Client, auth: str, repo: str) -> str:
    response = client.get(
        f"{auth}/token", params={"service": SERVICE, "scope": f"repository:{repo}:pull"}
    )
    if response.status_code in (401, 403):
        raise AuthError(
            f"the registry token service refused a pull token for {repo} "
            f"(HTTP {response.status_code})",
            hint="the repository may be private; tailpod pulls anonymously",
        )
    response.raise_for_status()
    try:
        body = response.json()
    except ValueError:
        body = None
    token = None
    if isinstance(body, dict):
        token = body.get("token") or body.get("access_token")
    if not isinstance(token, str) or not token:
        raise ProviderError(f"the registry token service returned no token for {repo}")
    return token


def _fetch_digest(client: httpx.Client, registry: str, repo: str, tag: str, token: str) -> str:
    url = f"{registry}/v2/{repo}/manifests/{tag}"
    headers = {"Authorization": f"Bearer {token}", "Accept": MANIFEST_ACCEPT}
    response = client.head(url, headers=headers)
    digest = response.headers.get("Docker-Content-Digest")
    if response.status_code == 200 and not digest:
        # Some registries omit the header on HEAD; the digest is the hash of the manifest bytes.
        response = client.get(url, headers=headers)
        if response.status_code == 200:
            digest = response.headers.get("Docker-Content-Digest") or (
                "sha256:" + hashlib.sha256(response.content).hexdigest()
            )
    if response.status_code == 404:
        raise ConfigError(
            f"image {repo}:{tag} does not exist (unknown repository or tag)",
            hint="check the spelling and that the tag is published",
        )
    if response.status_code in (401, 403):
        raise AuthError(
            f"the registry refused {repo}:{tag} (HTTP {response.status_code}); Docker Hub answers "
            "this for private repositories and for repositories that do not exist",
            hint="check the repository name; tailpod pulls anonymously",
        )
    response.raise_for_status()
    if not digest or not _DIGEST.match(digest):
        raise ProviderError(f"the registry gave no usable digest for {repo}:{tag}")
    return digest

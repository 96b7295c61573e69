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
from typing import Any

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


# -- the image's config: ENTRYPOINT (the start form) and CUDA (the host constraint) -------------
CONFIG_MANIFEST_ACCEPT = ", ".join((
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
_CUDA = re.compile(r"(\d+)\.(\d+)")
# Where NVIDIA's CUDA base images state the toolkit version (nvidia/cuda Dockerfiles set the
# CUDA_VERSION env and NVIDIA_REQUIRE_CUDA="cuda>=X.Y ..."; com.nvidia.cuda.version is their label).
CUDA_ENV = ("CUDA_VERSION",)
CUDA_LABELS = ("com.nvidia.cuda.version",)


@dataclass(frozen=True)
class ImageFacts:
    """What the image's config (`GET /v2/<repo>/blobs/<config digest>`, OCI image config) says
    about how it starts and what it needs from the host."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: dict[str, str]
    labels: dict[str, str]

    @property
    def has_entrypoint(self) -> bool:
        return bool(self.entrypoint)

    @property
    def cuda_version(self) -> str | None:
        """`major.minor` of the CUDA the image is built for (CUDA_VERSION, the NVIDIA label, or
        NVIDIA_REQUIRE_CUDA's `cuda>=X.Y`), None when the config states none."""
        for raw in [*(self.env.get(k) for k in CUDA_ENV),
                    *(self.labels.get(k) for k in CUDA_LABELS)]:
            found = _CUDA.match((raw or "").strip())
            if found:
                return f"{int(found[1])}.{int(found[2])}"
        found = re.search(r"cuda>=\s*(\d+)\.(\d+)", self.env.get("NVIDIA_REQUIRE_CUDA", ""))
        return f"{int(found[1])}.{int(found[2])}" if found else None

    def to_json(self) -> dict[str, object]:
        return {"entrypoint": list(self.entrypoint), "cmd": list(self.cmd),
                "cuda_version": self.cuda_version}


def facts_from_config(blob: object) -> ImageFacts:
    """ImageFacts from an image config JSON (`config.Entrypoint`, `Cmd`, `Env`, `Labels`)."""
    config = blob.get("config") if isinstance(blob, dict) else None
    config = config if isinstance(config, dict) else {}

    def words(value: object) -> tuple[str, ...]:
        return tuple(str(v) for v in value) if isinstance(value, list) else ()

    env: dict[str, str] = {}
    for item in config.get("Env") or []:
        name, sep, value = str(item).partition("=")
        if sep:
            env[name] = value
    labels = config.get("Labels")
    return ImageFacts(words(config.get("Entrypoint")), words(config.get("Cmd")), env,
                      {str(k): str(v) for k, v in labels.items()}
                      if isinstance(labels, dict) else {})


def read_image_facts(
    ref: str,
    settings: Settings | None = None,
    *,
    registry_url: str | None = None,
    auth_url: str | None = None,
    timeout: float = 15.0,
    platform: tuple[str, str] = ("linux", "amd64"),
) -> ImageFacts:
    """Read a (pinned) image's config through the registry API: the manifest (the linux/amd64
    entry of an index), then its config blob. Raises ProviderError/AuthError/ConfigError."""
    parsed = parse_image_ref(ref)
    reference = parsed.digest or parsed.tag or "latest"
    settings = settings or Settings()
    registry = (registry_url or settings.registry_url).rstrip("/")
    auth = (auth_url or settings.registry_auth_url).rstrip("/")
    where = f"{parsed.repo}@{reference}" if parsed.digest else f"{parsed.repo}:{reference}"
    try:
        with httpx.Client(timeout=timeout, follow_redirects=True) as client:
            token = _fetch_token(client, auth, parsed.repo)
            headers = {"Authorization": f"Bearer {token}"}
            manifest = _get_json(client, f"{registry}/v2/{parsed.repo}/manifests/{reference}",
                                 {**headers, "Accept": MANIFEST_ACCEPT}, where)
            if isinstance(manifest.get("manifests"), list):  # an index: pick the platform
                entry = next((m for m in manifest["manifests"] if isinstance(m, dict)
                              and (m.get("platform") or {}).get("os") == platform[0]
                              and (m.get("platform") or {}).get("architecture") == platform[1]),
                             None)
                if entry is None or not entry.get("digest"):
                    raise ProviderError(f"{where} has no {'/'.join(platform)} image")
                manifest = _get_json(
                    client, f"{registry}/v2/{parsed.repo}/manifests/{entry['digest']}",
                    {**headers, "Accept": CONFIG_MANIFEST_ACCEPT}, where)
            digest = (manifest.get("config") or {}).get("digest")
            if not isinstance(digest, str) or not _DIGEST.match(digest):
                raise ProviderError(f"the manifest of {where} names no config blob")
            blob = _get_json(client, f"{registry}/v2/{parsed.repo}/blobs/{digest}", headers,
                             where)
    except httpx.TransportError as exc:
        raise ProviderError(f"cannot reach the image registry ({exc.__class__.__name__}) to "
                            f"read the config of {where}") from None
    return facts_from_config(blob)


def _get_json(client: httpx.Client, url: str, headers: dict[str, str], where: str
              ) -> dict[str, Any]:
    response = client.get(url, headers=headers)
    if response.status_code in (401, 403, 404):
        raise ProviderError(f"the registry answered HTTP {response.status_code} reading the "
                            f"config of {where}")
    if response.status_code != 200:
        raise ProviderError(f"the registry failed (HTTP {response.status_code}) reading the "
                            f"config of {where}")
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ProviderError(f"the registry's answer for {where} is not a JSON object")
    return body

"""A small Tailscale API v2 client over httpx with a configurable base URL.

The `tailscale` package on PyPI (frenck, 1.0.0) builds every request from the hard-coded
`https://api.tailscale.com/api/v2/`, is async-only (aiohttp) and needs Python >= 3.11, so it cannot
be pointed at the sandbox emulator or used from tailpod's synchronous code; the handful of calls
tailpod needs are written here instead (see docs/ssh-and-tailnet.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from tailpod.errors import AuthError, ProviderError
from tailpod.provision.apiclient import DeadlineReached, time_left
from tailpod.secrets import Secret, redact


class TailnetError(ProviderError):
    """The Tailscale API refused or failed a call, or the tailnet is not in the expected state."""


class TailnetNotFound(TailnetError):
    """404 from the API: the device or key does not exist (or is not visible to the token)."""


def _segment(value: str) -> str:
    if value in ("", ".", ".."):
        raise TailnetError(f"invalid Tailscale API path segment {value!r}")
    return quote(value, safe="")


class TailscaleAPI:
    """Calls under `<base_url>/api/v2`, authenticated with an API access token (Bearer)."""

    def __init__(
        self,
        base_url: str,
        api_key: Secret,
        tailnet: str = "-",
        timeout_s: float = 15.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not api_key:
            raise TailnetError(
                "no Tailscale API access token", hint="set TAILSCALE_API_KEY (tskey-api-...)"
            )
        self.base_url = base_url.rstrip("/")
        self.tailnet = tailnet or "-"
        self.timeout_s = timeout_s
        self._client = httpx.Client(
            base_url=self.base_url + "/api/v2/",
            headers={"Authorization": f"Bearer {api_key.reveal()}", "Accept": "application/json"},
            timeout=timeout_s,
            transport=transport,
        )

    # -- plumbing -----------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call. Under the command's deadline (`apiclient.call_deadline`, as for the
        providers' calls) no call starts once it has passed, and every timeout of the exchange,
        connect and read included, is cut to what is left."""
        what = f"Tailscale API {method} /{path.split('?')[0]}"
        left = time_left()
        if left is not None:
            if left <= 0.05:
                raise DeadlineReached("tailscale", what)
            kwargs["timeout"] = min(self.timeout_s, left)
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            if left is not None and time_left() == 0.0:
                raise DeadlineReached("tailscale", what) from None
            raise TailnetError(
                f"{what} timed out: {redact(exc.__class__.__name__)}",
                hint=f"is {self.base_url} reachable?",
            ) from None
        except httpx.HTTPError as exc:
            # httpx messages carry the URL, never the Authorization header; redact regardless
            raise TailnetError(
                f"Tailscale API {method} /{path.split('?')[0]} failed: "
                f"{redact(exc.__class__.__name__ + ': ' + str(exc))[:160]}",
                hint=f"is {self.base_url} reachable?",
            ) from None
        if response.status_code >= 400:
            raise self._error(method, path, response)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise TailnetError(
                f"Tailscale API {method} /{path} returned non-JSON ({response.status_code})"
            ) from None

    def _error(self, method: str, path: str, response: httpx.Response) -> ProviderError:
        message = ""
        try:
            body = response.json()
            if isinstance(body, dict):
                message = str(body.get("message") or "")
        except ValueError:
            message = response.text[:120]
        message = redact(message)[:200]
        where = f"Tailscale API {method} /{path.split('?')[0]}"
        status = response.status_code
        if status in (401, 403):
            return AuthError(
                f"{where}: {status} {message or 'unauthorized'}",
                hint="check TAILSCALE_API_KEY (an API access token, tskey-api-..., not yet "
                "expired) and TAILSCALE_TAILNET",
            )
        if status == 404:
            return TailnetNotFound(f"{where}: not found ({message or '404'})")
        return TailnetError(f"{where}: {status} {message}".rstrip())

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TailscaleAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- devices ------------------------------------------------------------------------------

    def list_devices(self, fields: str = "default") -> list[dict[str, Any]]:
        body = self._request(
            "GET", f"tailnet/{_segment(self.tailnet)}/devices", params={"fields": fields}
        )
        devices = (body or {}).get("devices")
        if not isinstance(devices, list):
            raise TailnetError("Tailscale API devices list had no 'devices' array")
        return devices

    def delete_device(self, device_id: str) -> None:
        self._request("DELETE", f"device/{_segment(device_id)}")

    # -- keys ---------------------------------------------------------------------------------

    def get_key(self, key_id: str) -> dict[str, Any]:
        body = self._request("GET", f"tailnet/{_segment(self.tailnet)}/keys/{_segment(key_id)}")
        if not isinstance(body, dict):
            raise TailnetError("Tailscale API key reply was not an object")
        return body

    def create_auth_key(
        self,
        tags: list[str],
        *,
        ephemeral: bool = True,
        preauthorized: bool = True,
        reusable: bool = False,
        expiry_seconds: int = 3600,
        description: str = "tailpod",
    ) -> tuple[dict[str, Any], Secret]:
        """Create an auth key; returns its metadata and the secret (shown once, kept masked)."""
        body = self._request(
            "POST",
            f"tailnet/{_segment(self.tailnet)}/keys",
            json={
                "keyType": "auth",
                "capabilities": {
                    "devices": {
                        "create": {
                            "reusable": reusable,
                            "ephemeral": ephemeral,
                            "preauthorized": preauthorized,
                            "tags": list(tags),
                        }
                    }
                },
                "expirySeconds": expiry_seconds,
                "description": description[:50],
            },
        )
        if not isinstance(body, dict) or not isinstance(body.get("key"), str):
            raise TailnetError("Tailscale API key creation returned no key")
        secret = Secret(body.pop("key"))
        return body, secret

    def delete_key(self, key_id: str) -> None:
        self._request("DELETE", f"tailnet/{_segment(self.tailnet)}/keys/{_segment(key_id)}")

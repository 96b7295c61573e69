"""A Tailscale auth key made by another user of the tailnet (issue 12 item 6): the API answers 404
to this user's lookup ("keys ... relative to the user that owns the API key"), so preflight says it
cannot verify the key instead of calling it missing."""

from __future__ import annotations

import httpx

from tailpod.preflight.base import Status

from .conftest import World


def test_emulator_hides_another_users_key(world: World) -> None:
    view, _secret = world.emulator.create_auth_key(owner="someone-else@tailpod.test")
    headers = {"Authorization": f"Bearer {world.emulator.api_token}"}
    base = f"{world.tailscale_url}/api/v2/tailnet/-/keys"
    assert httpx.get(f"{base}/{view['id']}", headers=headers, timeout=5).status_code == 404
    listed = httpx.get(base, headers=headers, timeout=5).json()["keys"]
    assert view["id"] not in {k["id"] for k in listed}


def test_preflight_cannot_verify_another_users_key(world: World) -> None:
    _view, secret = world.emulator.create_auth_key(owner="someone-else@tailpod.test",
                                                   reusable=True)
    result = world.run(world.settings(TAILSCALE_AUTH_KEY=secret),
                       only=("tailscale",)).by_name()["tailscale"]
    assert result.status is Status.WARN, result.detail
    assert "cannot verify this key" in result.detail
    assert "does not exist" not in result.detail
    assert result.data["verified"] is False
    assert secret not in result.detail

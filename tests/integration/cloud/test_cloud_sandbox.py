"""The sandbox itself: emulator wire shapes and quirks, the admin API, pagination, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import httpx
import pytest

from tailpod.provision.providers import get_provider
from tailpod.sandbox import Sandbox, admin_call, start_sandbox
from tailpod.sandbox.model import VastOffer
from tests import paths
from tests.helpers.api_timings import fast_timings

from .conftest import settings_for

REPO = paths.REPO


def rp(sandbox: Sandbox, method: str, path: str, **kw: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {sandbox.runpod_key}"}
    return httpx.request(method, sandbox.runpod_url + path, headers=headers, timeout=5,
                         **kw)  # type: ignore[arg-type]


def test_runpod_v2_wire_shapes_and_quirks(sandbox: Sandbox) -> None:
    # an unknown key (CreatePodRequest is unevaluatedProperties: false) and a bad value both
    # break the contract: 422 by the create status table (openapi @ a900806e)
    bad = rp(sandbox, "POST", "/v2/pods", json={"name": "tp-a", "gpuTypeId": "NVIDIA A40"})
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
    assert bad.json()["title"] == "Unprocessable Entity"
    assert any("gpuTypeId" in e for e in bad.json()["errors"])
    bad = rp(sandbox, "POST", "/v2/pods", json={"name": "tp-a", "image": "i", "disk": 0,
                                                "gpu": {"id": "NVIDIA A40"}})
    assert bad.status_code == 422 and bad.json()["title"] == "Unprocessable Entity"
    missing = httpx.get(sandbox.runpod_url + "/v2/pods")
    assert missing.status_code == 401 and missing.json()["detail"] == "missing bearer token"
    assert rp(sandbox, "GET", "/v2/pods/nope").json() == {
        "title": "Not Found", "status": 404, "detail": "pod not found"}
    assert rp(sandbox, "GET", "/v2/catalog/gpus", params={"include": "AVAILABILITY"}
              ).status_code == 400

    sandbox.add_fault("slow_start", provider="runpod", op="create", seconds=0.4)
    sandbox.add_fault("early_running", provider="runpod", op="create")  # the observed quirk
    created = rp(sandbox, "POST", "/v2/pods", json={
        "name": "tp-a", "image": "img", "gpu": {"id": "NVIDIA A40"}, "ports": ["22/tcp"],
        "mounts": {"persistent": {"size": 20, "path": "/workspace"}}})
    assert created.status_code == 201
    pod = created.json()
    # RUNNING at once, but no runtime and no SSH yet: never treat RUNNING as ready
    assert pod["status"] == "RUNNING" and pod["runtime"] is None and pod["ssh"]["direct"] is None
    time.sleep(0.5)
    ready = rp(sandbox, "GET", f"/v2/pods/{pod['id']}").json()
    assert ready["runtime"]["ports"][0]["private"] == 22 and ready["ssh"]["direct"]["port"]
    assert rp(sandbox, "POST", f"/v2/pods/{pod['id']}/action", json={"action": "start"}
              ).status_code == 409
    stopped = rp(sandbox, "POST", f"/v2/pods/{pod['id']}/action", json={"action": "stop"}).json()
    assert stopped["status"] == "EXITED" and stopped["cost"] == 0.0
    assert sandbox.billing_now()[0]["billing_what"] == "disk (stopped)"  # cost 0.0 lies
    assert rp(sandbox, "DELETE", f"/v2/pods/{pod['id']}").status_code == 204
    assert rp(sandbox, "DELETE", f"/v2/pods/{pod['id']}").status_code == 404
    assert sandbox.meter()["billing_count"] == 0


def test_graphql_is_parsed_not_pattern_matched(sandbox: Sandbox) -> None:
    query = "query Q($id: String!) { pod(input: {podId: $id}) { id } myself { clientBalance } }"
    body = rp(sandbox, "POST", "/graphql", json={"query": query, "variables": {"id": "x"}}).json()
    assert body["data"]["pod"] is None and body["data"]["myself"]["clientBalance"] == 100.0
    broken = rp(sandbox, "POST", "/graphql", json={"query": "query { myself { id "})
    assert broken.status_code == 400 and "Syntax Error" in broken.json()["errors"][0]["message"]
    unknown = rp(sandbox, "POST", "/graphql", json={"query": "{ myself { objectMounts } }"})
    assert unknown.status_code == 400
    aliased = rp(sandbox, "POST", "/graphql", json={
        "query": "{ a: gpuTypes(input: {id: \"NVIDIA A40\"}) { displayName } }"}).json()
    assert aliased["data"]["a"] == [{"displayName": "A40"}]
    business = rp(sandbox, "POST", "/graphql", json={
        "query": 'mutation { podTerminate(input: {podId: "nope"}) }'})
    assert business.status_code == 200
    assert business.json()["errors"][0]["message"] == "pod not found to terminate"
    assert business.json()["errors"][0]["extensions"]["code"] == "RUNPOD"


def test_vast_listing_paginates_and_the_adapter_follows(tmp_path: Path,
                                                       tailpod_home: Path) -> None:
    sb = start_sandbox(start_delay_s=0.01, run_commands=False, stand_ins=False,
                       workdir=tmp_path / "sb")
    try:
        for i in range(28):
            offer = VastOffer(8000 + i, "RTX 3060", 1, 0.05, 0.1, 0.99, 12.4, 500, 500, 100,
                              "X, US", 12288, 500 + i, 600 + i)
            sb.cloud.vast_offers[offer.offer_id] = offer
        headers = {"Authorization": f"Bearer {sb.vast_key}"}
        for i in range(28):
            httpx.put(f"{sb.vast_url}/api/v0/asks/{8000 + i}/", headers=headers,
                      json={"image": "img", "disk": 10, "label": f"tp-page-{i % 3}"}
                      ).raise_for_status()
        first = httpx.get(f"{sb.vast_url}/api/v1/instances/", headers=headers).json()
        assert len(first["instances"]) == 25 and first["next_token"]
        assert first["total_instances"] == 28 and first["label_counts"]["tp-page-0"] == 10
        provider = get_provider("vast", settings_for(sb, tailpod_home),
                                timings=fast_timings())
        assert len(provider.list_by_tag(None)) == 28
        assert len(provider.list_by_tag("tp-page-1")) == 9
        computed = httpx.get(f"{sb.vast_url}/api/v1/instances/", headers=headers,
                             params={"select_filters": json.dumps({"dph_total": {"lt": 1}})})
        assert computed.status_code == 400 and computed.json()["error"] == "invalid_request"
    finally:
        sb.close()


def test_admin_api_faults_accounts_meter_reset(sandbox: Sandbox) -> None:
    url = sandbox.admin_url
    with pytest.raises(urllib.error.HTTPError) as err:
        admin_call(url, "POST", "/admin/faults", {"kind": "bogus"})
    assert err.value.code == 400
    admin_call(url, "POST", "/admin/faults", [{"kind": "rate_limit", "provider": "runpod",
                                               "op": "list", "times": 1, "retry_after": 0}])
    assert admin_call(url, "GET", "/admin/faults")["faults"][0]["kind"] == "rate_limit"
    limited = rp(sandbox, "GET", "/v2/pods")
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "0"
    assert rp(sandbox, "GET", "/v2/pods").status_code == 200
    admin_call(url, "POST", "/admin/accounts",
               {"provider": "runpod", "key": "second-key-9999", "balance": 5})
    accounts = admin_call(url, "GET", "/admin/accounts")["accounts"]
    assert "second-key-9999" not in json.dumps(accounts)
    rp(sandbox, "POST", "/v2/pods", json={"name": "tp-m", "image": "i", "gpu": {"id": "NVIDIA A40"}})
    meter = admin_call(url, "GET", "/admin/meter")
    assert meter["billing_count"] == 1 and meter["billing_now"][0]["name"] == "tp-m"
    assert admin_call(url, "POST", "/admin/reset")["meter"]["billing_count"] == 0
    assert admin_call(url, "GET", "/admin/faults")["faults"] == []


def test_loopback_only() -> None:
    with pytest.raises(ValueError):
        start_sandbox("0.0.0.0")


def test_cli_serve_prints_urls_and_stops_cleanly(tmp_path: Path) -> None:
    script = (
        "import typer\n"
        "from tailpod.cli import sandbox\n"
        "app = typer.Typer()\n"
        "@app.callback()\n"
        "def _root() -> None: pass\n"
        "sandbox.register(app)\n"
        "app()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "sandbox", "serve", "--json", "--no-run",
         "--no-stand-ins", "--start-delay", "0.05", "--workdir", str(tmp_path / "w")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        urls = json.loads(line)["urls"]
        assert set(urls) >= {"runpod", "vast", "admin"}
        assert all(u.startswith("http://127.0.0.1:") for u in urls.values())
        assert admin_call(urls["admin"], "GET", "/admin/health")["ok"] is True
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)

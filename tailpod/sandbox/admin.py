"""The sandbox's admin API: faults, accounts, the billing meter, pods, reset (docs/sandbox.md)."""

from __future__ import annotations

from typing import Any

from tailpod.sandbox.cloud import SandboxCloud
from tailpod.sandbox.faults import FAULT_KINDS
from tailpod.sandbox.http import Request, Response, Router


def _bad(msg: str) -> Response:
    return Response(400, {"error": msg})


class AdminApi:
    def __init__(self, cloud: SandboxCloud, urls: dict[str, str]) -> None:
        self.cloud = cloud
        self.urls = urls
        self.router = Router()
        r = self.router
        r.add("GET", "/admin/health", lambda _req: Response(200, {"ok": True, "urls": self.urls}))
        r.add("GET", "/admin/meter", lambda _req: Response(200, self.cloud.meter.snapshot()))
        r.add("GET", "/admin/pods", lambda _req: Response(200, {"pods": self.cloud.pods_public()}))
        r.add("GET", "/admin/faults", self.list_faults)
        r.add("POST", "/admin/faults", self.add_faults)
        r.add("DELETE", "/admin/faults", self.clear_faults)
        r.add("GET", "/admin/accounts", self.list_accounts)
        r.add("POST", "/admin/accounts", self.set_account)
        r.add("DELETE", "/admin/accounts", self.remove_account)
        r.add("POST", "/admin/reset", self.reset)
        r.add("POST", "/admin/catalog/runpod", self.set_runpod_stock)
        r.add("GET", "/admin/settings", lambda _req: Response(200, self.cloud.settings()))
        r.add("POST", "/admin/settings", self.set_settings)

    def set_settings(self, req: Request) -> Response:
        """Behaviours no vendor text settles (docs/sandbox.md): each can be played both ways."""
        try:
            body: Any = req.json()
            if not isinstance(body, dict):
                raise ValueError("expected an object of settings")
            return Response(200, self.cloud.apply_settings(body))
        except ValueError as exc:
            return _bad(str(exc))

    def list_faults(self, _req: Request) -> Response:
        return Response(200, {"faults": self.cloud.faults.list(), "kinds": FAULT_KINDS})

    def add_faults(self, req: Request) -> Response:
        try:
            body = req.json()
        except ValueError:
            return _bad("body is not JSON")
        items = body if isinstance(body, list) else [body]
        added = []
        try:
            for item in items:
                if not isinstance(item, dict):
                    return _bad("each fault must be an object")
                added.append(self.cloud.faults.add(dict(item)))
        except (TypeError, ValueError) as exc:
            return _bad(str(exc))
        return Response(200, {"added": len(added), "faults": self.cloud.faults.list()})

    def clear_faults(self, _req: Request) -> Response:
        self.cloud.faults.clear()
        return Response(200, {"faults": []})

    def list_accounts(self, _req: Request) -> Response:
        with self.cloud.lock:
            accounts = list(self.cloud.accounts.values())
        return Response(200, {"accounts": [
            {**a.public(), "balance_now": round(self.cloud.balance(a), 8),
             "spend_per_hr": round(self.cloud.spend_rate(a), 6)} for a in accounts
        ]})

    def set_account(self, req: Request) -> Response:
        try:
            body: Any = req.json()
            account = self.cloud.set_account(
                str(body["provider"]), str(body["key"]), float(body.get("balance", 100.0)),
                bool(body.get("restricted", False)), body.get("name"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            return _bad(f"expected provider, key[, balance, restricted, name]: {exc}")
        return Response(200, {"account": account.public()})

    def remove_account(self, req: Request) -> Response:
        try:
            body: Any = req.json()
            self.cloud.remove_account(str(body["provider"]), str(body["key"]))
        except (ValueError, KeyError, TypeError):
            return _bad("expected provider and key")
        return Response(200, {"removed": True})

    def reset(self, _req: Request) -> Response:
        self.cloud.reset()
        return Response(200, {"reset": True, "meter": self.cloud.meter.snapshot()})

    def set_runpod_stock(self, req: Request) -> Response:
        try:
            body: Any = req.json()
            gpu = self.cloud.runpod_catalog[str(body["gpu"])]
            stock = str(body["stock"]).upper()
            if stock not in ("NONE", "LOW", "MEDIUM", "HIGH"):
                raise ValueError(stock)
        except (ValueError, KeyError, TypeError):
            return _bad("expected gpu (a catalog id) and stock NONE|LOW|MEDIUM|HIGH")
        gpu.stock = stock
        return Response(200, {"gpu": gpu.gpu_id, "stock": stock})

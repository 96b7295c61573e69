"""RunPod network volumes through REST v2 (runpod/docs api-reference-v2/openapi.json @ a900806e).

`POST/GET /v2/network-volumes`, `GET/PATCH/DELETE /v2/network-volumes/{id}`: a volume is
`{id, name, size (10-4096 GB), dataCenter, type: STANDARD | HIGH_PERFORMANCE}`; the create body
is `additionalProperties: false`; the spec warns that a volume "keeps incurring storage charges
until it is deleted". `GET /v2/catalog/datacenters?include=GPU_AVAILABILITY` says, per data
center, which tiers it offers (`networkVolumeTypes`, empty = none) and each GPU's stock.
A volume is attached at pod create only (`mounts.network = [{volumeId, path}]`, `maxItems` 1;
storage/network-volumes.mdx: "cannot be attached or detached later"), in Secure Cloud only, in
the volume's own data center. Prices: $0.07/GB/month for the first TB, $0.05 beyond
(storage/network-volumes.mdx); the high-performance tier's price "varies by data center"
(storage/high-performance-storage.mdx), so tailpod reports it as unknown.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import quote

from tailpod.errors import ConfigError, ProviderError
from tailpod.provision.apiclient import JsonApi
from tailpod.provision.base import DataCenterInfo, SupportsVolumes, VolumeInfo

STANDARD_FIRST_TB_GB_MONTH = 0.07
STANDARD_BEYOND_TB_GB_MONTH = 0.05
FIRST_TB_GB = 1024  # [unverified] whether RunPod's "1 TB" is 1000 or 1024 GB
HOURS_PER_MONTH = 730.0  # [unverified] RunPod does not say how a month is counted


def standard_price_per_month(size_gb: int) -> float:
    first = min(size_gb, FIRST_TB_GB)
    return round(first * STANDARD_FIRST_TB_GB_MONTH
                 + max(0, size_gb - FIRST_TB_GB) * STANDARD_BEYOND_TB_GB_MONTH, 4)


class RunPodVolumes(SupportsVolumes):
    """The volume half of the RunPod adapter; mixed into RunPodProvider, which gives `api`."""

    api: JsonApi
    volume_size_gb: ClassVar[tuple[int, int]] = (10, 4096)
    volume_types: ClassVar[tuple[str, ...]] = ("STANDARD", "HIGH_PERFORMANCE")
    # "Network volumes replace the Pod's default volume disk, typically mounted at /workspace"
    # (storage/network-volumes.mdx); v2 NetworkMount.path has no default and must be given.
    volume_mount_path: ClassVar[str] = "/workspace"

    def volume_price_per_month(self, size_gb: int, volume_type: str | None) -> float | None:
        if volume_type in (None, "STANDARD"):
            return standard_price_per_month(size_gb)
        return None

    def _to_volume(self, raw: dict[str, Any]) -> VolumeInfo:
        size = int(raw.get("size") or 0)
        vtype = raw.get("type")
        return VolumeInfo(volume_id=str(raw.get("id")), name=str(raw.get("name") or ""),
                          size_gb=size, data_center=str(raw.get("dataCenter") or ""),
                          volume_type=str(vtype) if vtype else None,
                          price_per_month=self.volume_price_per_month(size, vtype),
                          detail={"raw_type": vtype})

    def data_centers(self) -> list[DataCenterInfo]:
        body = self.api.body_of(self.api.call(
            "GET", "/v2/catalog/datacenters", "reading the data-center catalog",
            params={"include": "GPU_AVAILABILITY"}))
        rows = body.get("dataCenters") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise ProviderError("RunPod: the data-center catalog answer has no `dataCenters` list")
        out = []
        for dc in rows:
            if not isinstance(dc, dict) or not dc.get("id"):
                continue
            gpus = {str(g["id"]): str(g.get("availability") or "NONE")
                    for g in dc.get("gpuAvailability") or [] if isinstance(g, dict) and "id" in g}
            names = {str(g["id"]): str(g.get("name") or "")
                     for g in dc.get("gpuAvailability") or [] if isinstance(g, dict) and "id" in g}
            out.append(DataCenterInfo(str(dc["id"]), str(dc.get("name") or dc["id"]),
                                      tuple(str(t) for t in dc.get("networkVolumeTypes") or []),
                                      gpus, names))
        return out

    def volume_create(self, name: str, size_gb: int, data_center: str,
                      volume_type: str | None = None) -> VolumeInfo:
        low, high = self.volume_size_gb
        if not low <= size_gb <= high:
            raise ConfigError(f"a RunPod network volume is {low}-{high} GB, not {size_gb}; "
                              "nothing was created")
        body: dict[str, Any] = {"name": name, "size": size_gb, "dataCenter": data_center}
        if volume_type:
            body["type"] = volume_type
        what = f"creating network volume {name}"
        # One exchange, never retried here: a 5xx may mean the volume exists and bills, so the
        # caller looks the name up before anything else (provision/volumes.py).
        response = self.api.send("POST", "/v2/network-volumes", what, json=body)
        if response.status_code not in (200, 201):
            self.api.raise_for(response, what)
        answer = self.api.body_of(response)
        if not isinstance(answer, dict) or not answer.get("id"):
            raise ProviderError(f"RunPod: the create answer for volume {name} has no id")
        return self._to_volume(answer)

    def volume_list(self) -> list[VolumeInfo]:
        body = self.api.body_of(self.api.call("GET", "/v2/network-volumes",
                                              "listing network volumes"))
        rows = body.get("networkVolumes") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise ProviderError("RunPod: the volume list answer has no `networkVolumes` list")
        return [self._to_volume(v) for v in rows if isinstance(v, dict)]

    def volume_get(self, volume_id: str) -> VolumeInfo | None:
        response = self.api.call("GET", f"/v2/network-volumes/{quote(volume_id, safe='')}",
                                 f"reading network volume {volume_id}", passthrough=(404,))
        if response.status_code == 404:
            return None
        body = self.api.body_of(response)
        if not isinstance(body, dict):
            raise ProviderError(f"RunPod: unexpected answer reading volume {volume_id}")
        return self._to_volume(body)

    def volume_delete(self, volume_id: str) -> None:
        self.api.call("DELETE", f"/v2/network-volumes/{quote(volume_id, safe='')}",
                      f"deleting network volume {volume_id}", ok=(200, 204), passthrough=(404,))

    def volume_delete_by_hand(self, volume_id: str) -> str | None:
        key_env = getattr(self, "key_env", None) or "KEY"  # the Provider's, by its settings
        return (f"curl -X DELETE -H \"Authorization: Bearer ${key_env}\" "
                + f"{self.api.base_url}/v2/network-volumes/{quote(volume_id, safe='')}")

    def volume_billed(self, volume_id: str) -> float | None:
        """What RunPod's billing history says the volume has cost so far (USD), None if unread."""
        try:
            body = self.api.body_of(self.api.call(
                "GET", "/v2/billing/network-volumes", "reading volume billing",
                params={"networkVolumeId": volume_id, "bucketSize": "day"}))
        except ProviderError:
            return None
        totals = ((body or {}).get("metadata") or {}).get("totals") or {} \
            if isinstance(body, dict) else {}
        value = totals.get("totalAmount")
        return float(value) if isinstance(value, (int, float)) else None

    def volumes_rate_per_hr(self) -> float:
        """What the account's volumes cost per hour (standard price; an unknown price counts as
        the standard one, a floor). [unverified] that RunPod's `currentSpendPerHr` includes
        storage; if it does not, this only widens what the spend-rate check explains."""
        try:
            volumes = self.volume_list()
        except ProviderError:
            return 0.0
        monthly = sum(v.price_per_month if v.price_per_month is not None
                      else standard_price_per_month(v.size_gb) for v in volumes)
        return monthly / HOURS_PER_MONTH

"""vast.ai local volumes through the REST API (the facts, not the `vastai` client's code).

Sources: vast-ai/docs @ c624622 guides/instances/storage/volumes.mdx and api-reference/openapi/
yaml/{search_volumes,rent_volume,show_volumes,delete_volume}.yaml; vast-ai/vast-cli @ 5567983
vast.py (`search volumes`, `create volume`, `show volumes`, `delete volume`, `create instance
--link-volume`).

- "We currently provide local volumes only": a volume "is physically tied to the machine it was
  created on", "can only be attached to instances running on the same physical machine"; its
  size "cannot be changed after creation". So tailpod's data center for a vast volume is the
  machine id, and a pod that mounts it may only rent an offer of that machine.
- Offers: `POST /api/v0/volumes/search/` (a query like the offer search; `machine_id`,
  `disk_space` = the GB a volume there may have, `storage_cost` in $/GB/month).
- Create: `PUT /api/v0/volumes/` `{id: volume offer, size: GB, name}`; the answer is
  `{success, volume_name: "V.<id>"}`. A name "can be alphanumeric with underscores, with a max
  length of 64" (the guide): tailpod's `tp-vol-NAME` goes to vast as `tp_vol_NAME` (a tailpod
  name has no `_`, so the mapping back is exact).
- List: `GET /api/v0/volumes/?owner=me&type=local_volume` answers `{volumes: [...]}`; vast.py
  shows the name from `label`. vast documents no single-volume read: a look-up is the listing.
- Delete: `DELETE /api/v0/volumes/` with the id in the query (vast.py) and in the body (the
  OpenAPI's requestBody): both are sent. 404 `no_such_volume` is success (already gone). "This
  will only work if all instances using the volume have been destroyed."
- Attach: only at instance create, as `volume_info` `{mount_path, create_new: false,
  volume_id}` in the rent (vast.py validate_volume_params). The GUI mounts at /data.
- Price: `storage_cost` is $/GB/month; `storage_total_cost` (undocumented unit) is per hour: the
  OpenAPI example 0.0005555555555555557 for 1 GB is $0.40/GB/month over a 720-hour month.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar
from urllib.parse import quote

from tailpod.errors import CapacityError, ConfigError, ProviderError
from tailpod.provision.apiclient import JsonApi
from tailpod.provision.base import DataCenterInfo, SupportsVolumes, VolumeInfo

VAST_HOURS_PER_MONTH = 720.0  # inferred from search_volumes.yaml's storage_total_cost example
CREATED_NAME = re.compile(r"^V\.(\d+)$")
LISTING = {"owner": "me", "type": "local_volume"}


def vast_label(tag: str) -> str:
    """tailpod's `tp-vol-x` as the name vast accepts (letters, digits, underscores)."""
    return tag.replace("-", "_")


def tag_of(label: object) -> str:
    """The `tp-` name back from a vast label; other labels are left as they are."""
    text = str(label or "")
    return text.replace("_", "-") if text.startswith("tp_") else text


class VastVolumes(SupportsVolumes):
    """The volume half of the vast adapter; mixed into VastProvider, which gives `api` and the
    offer search (`search_all`)."""

    api: JsonApi
    # vast.py `create volume` defaults to 15 GB and sends an int; vast states no minimum or
    # maximum beyond the offer's `disk_space`, which is checked per machine (placement).
    volume_size_gb: ClassVar[tuple[int, int]] = (1, 65536)
    volume_types: ClassVar[tuple[str, ...]] = ("LOCAL",)
    volume_mount_path: ClassVar[str] = "/data"  # where vast's GUI mounts a volume (the guide)
    volume_place: ClassVar[str] = "machine"

    def search_all(self) -> list[dict[str, Any]]:  # VastProvider's: every rentable GPU offer
        raise NotImplementedError

    def volume_price_per_month(self, size_gb: int, volume_type: str | None) -> float | None:
        return None  # a machine's own price (DataCenterInfo.volume_gb_month), not a class fact

    def volume_offers(self, machine_id: str | None = None) -> list[dict[str, Any]]:
        query: dict[str, Any] = {"verified": {"eq": True}, "external": {"eq": False},
                                 "disk_space": {"gte": 1}, "allocated_storage": 1.0,
                                 "limit": 1000}
        if machine_id is not None:
            query["machine_id"] = {"eq": int(machine_id)}
        body = self.api.body_of(self.api.call("POST", "/api/v0/volumes/search/",
                                              "searching volume offers", json=query))
        rows = body.get("offers") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise ProviderError("vast.ai: the volume offer search answer has no `offers` list")
        return [r for r in rows if isinstance(r, dict) and "id" in r and "machine_id" in r]

    def data_centers(self) -> list[DataCenterInfo]:
        """One 'data center' per machine that offers volume space, with the GPUs its rentable
        offers have (an id is vast's GPU name; its short name the CLI's `RTX_4090` form)."""
        gpus: dict[str, dict[str, str]] = {}
        for offer in self.search_all():
            name = str(offer.get("gpu_name") or "")
            if name:
                gpus.setdefault(str(offer.get("machine_id")), {})[name] = "HIGH"
        out = []
        for row in self.volume_offers():
            machine = str(row["machine_id"])
            have = gpus.get(machine, {})
            cost = row.get("storage_cost")
            out.append(DataCenterInfo(
                machine, f"machine {machine} ({row.get('geolocation') or '?'})", self.volume_types,
                dict(have), {g: g.replace(" ", "_") for g in have},
                volume_space_gb=float(row.get("disk_space") or 0),
                volume_gb_month=float(cost) if isinstance(cost, (int, float)) else None))
        return out

    def _to_volume(self, raw: dict[str, Any]) -> VolumeInfo:
        per_hr = raw.get("storage_total_cost")
        price = (round(float(per_hr) * VAST_HOURS_PER_MONTH, 4)
                 if isinstance(per_hr, (int, float)) else None)
        return VolumeInfo(volume_id=str(raw.get("id")), name=tag_of(raw.get("label")),
                          size_gb=int(float(raw.get("disk_space") or 0)),
                          data_center=str(raw.get("machine_id") or ""), volume_type="LOCAL",
                          price_per_month=price,
                          detail={"status": raw.get("status"),
                                  "instances": raw.get("instances") or []})

    def volume_create(self, name: str, size_gb: int, data_center: str,
                      volume_type: str | None = None) -> VolumeInfo:
        if not str(data_center).isdigit():
            raise ConfigError(f"a vast.ai volume lives on one machine: --datacenter is its "
                              f"machine id, not {data_center!r}; nothing was created")
        offers = self.volume_offers(data_center)
        if not offers:
            raise CapacityError(f"vast.ai machine {data_center} offers no volume space; "
                                "nothing was created")
        offer = max(offers, key=lambda o: float(o.get("disk_space") or 0))
        room = float(offer.get("disk_space") or 0)
        if size_gb > room:
            raise ConfigError(f"vast.ai machine {data_center} has room for {room:g} GB, not "
                              f"{size_gb}; nothing was created")
        what = f"creating volume {name} on machine {data_center}"
        body = {"id": int(offer["id"]), "size": int(size_gb), "name": vast_label(name)}
        # One exchange, never retried: an error may still mean the volume exists and bills, so
        # the caller looks the name up (provision/volumes.py).
        response = self.api.send("PUT", "/api/v0/volumes/", what, json=body)
        if response.status_code != 200:
            self.api.raise_for(response, what)
        answer = self.api.body_of(response)
        if isinstance(answer, dict) and answer.get("success") is False:
            raise ProviderError(f"vast.ai refused {what}: {answer.get('msg') or answer}")
        named = CREATED_NAME.match(str((answer or {}).get("volume_name") or "")
                                   if isinstance(answer, dict) else "")
        # The answer's `volume_name` "V.<id>" names it (rent_volume.yaml); without it the
        # listing by name is the only way to the id.
        found = [v for v in self.volume_list()
                 if (named and v.volume_id == named.group(1)) or (not named and v.name == name)]
        if found:
            return found[0]
        if named:  # created, not listed yet: what the answer and the offer say (it bills)
            cost = offer.get("storage_cost")
            return VolumeInfo(named.group(1), name, int(size_gb), str(data_center), "LOCAL",
                              round(size_gb * float(cost), 4)
                              if isinstance(cost, (int, float)) else None)
        raise ProviderError(f"vast.ai answered the create of volume {name} but does not "
                            "list it")

    def volume_list(self) -> list[VolumeInfo]:
        body = self.api.body_of(self.api.call("GET", "/api/v0/volumes/", "listing volumes",
                                              params=dict(LISTING)))
        rows = body.get("volumes") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise ProviderError("vast.ai: the volume list answer has no `volumes` list")
        return [self._to_volume(v) for v in rows if isinstance(v, dict) and "id" in v]

    def volume_get(self, volume_id: str) -> VolumeInfo | None:
        return next((v for v in self.volume_list() if v.volume_id == str(volume_id)), None)

    def volume_delete(self, volume_id: str) -> None:
        if not str(volume_id).isdigit():
            raise ConfigError(f"vast.ai volume ids are numbers, not {volume_id!r}")
        response = self.api.call("DELETE", "/api/v0/volumes/", f"deleting volume {volume_id}",
                                 params={"id": str(volume_id)}, json={"id": int(volume_id)},
                                 passthrough=(400, 404))
        if response.status_code == 404:
            return
        body = self.api.body_of(response)
        if response.status_code == 400 or (isinstance(body, dict)
                                            and body.get("success") is False):
            if isinstance(body, dict) and body.get("error") == "no_such_volume":
                return
            raise ProviderError(f"vast.ai refused to delete volume {volume_id}: "
                                f"{(body or {}).get('msg') if isinstance(body, dict) else body}",
                                hint="destroy the instances using it first (tailpod down)")

    def volume_delete_by_hand(self, volume_id: str) -> str | None:
        key_env = getattr(self, "key_env", None) or "KEY"  # the Provider's, by its settings
        return (f"curl -X DELETE -H \"Authorization: Bearer ${key_env}\" "
                + f"'{self.api.base_url}/api/v0/volumes/?id={quote(str(volume_id), safe='')}'")

    def volumes_rate_per_hr(self) -> float:
        """What the account's volumes cost per hour (their `storage_total_cost`); 0 unread."""
        try:
            return sum((v.price_per_month or 0.0) / VAST_HOURS_PER_MONTH
                       for v in self.volume_list())
        except ProviderError:
            return 0.0

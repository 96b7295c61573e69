"""The GPU the provider claims against what the pod itself reports (its `nvidia-smi` facts).

A provider bills for a card by name; the pod's own `machine` facts (the pod agent's
tailpod/agent/bootstrap/host_facts.py `machine_facts`, recorded at every engine launch) say what
actually ran. Every run compares the two and the verdict travels with the numbers: run.json
(`pod.hardware_check`), `tailpod status`, the report header and every plot. A mismatch or an
unverified provider gets a `stamp`, one line that says plainly why the throughput and cost figures
do not describe the claimed card.

"Emulated" is decided from a general fact, never by recognising tailpod's sandbox: the provider
API tailpod rented through was not the vendor's public endpoint (`api_endpoint`, recorded by
`up`; tailpod/pods/cloud.py `non_vendor_api_endpoint`), so no vendor stands behind the
claimed card or its price, and the stamp names that endpoint and what the pod itself reported.

Provider names and `nvidia-smi` names differ in spelling ("RTX 4090" vs "NVIDIA GeForce RTX 4090",
"H100 SXM" vs "NVIDIA H100 80GB HBM3"), so names are compared by their model tokens: every model
token of the claim must be in the reported name; form-factor words are ignored; a memory size in
the claim must match the reported name's or its `memory.total` within 10%.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailpod.ledger import PodRecord

MATCH = "match"  # the pod reports the claimed card(s)
MISMATCH = "mismatch"  # the pod reports other cards, another count, or no GPU at all
EMULATED = "emulated"  # rented through a non-vendor API endpoint: the provider's claims are unverified
UNVERIFIED = "unverified"  # the pod's own facts were not recorded (older runs)

_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "quadro"}
_FORM_FACTOR_WORDS = {"sxm", "sxm2", "sxm3", "sxm4", "sxm5", "pcie", "hbm2", "hbm2e", "hbm3",
                      "hbm3e", "nvl", "nvlink", "gpu"}
_MEMORY = re.compile(r"^(\d+)gb?$")


def _tokens(name: str) -> tuple[set[str], int | None]:
    words = re.split(r"[^a-z0-9]+", name.lower())
    model: set[str] = set()
    memory: int | None = None
    for word in words:
        if not word or word in _VENDOR_WORDS or word in _FORM_FACTOR_WORDS:
            continue
        found = _MEMORY.match(word)
        if found:
            memory = int(found.group(1))
        else:
            model.add(word)
    return model, memory


def _memory_gib(text: Any) -> float | None:
    """`memory.total` as nvidia-smi prints it with --format=csv,noheader: "81920 MiB"."""
    found = re.match(r"\s*([\d.]+)\s*(MiB|GiB)?", str(text or ""))
    if not found:
        return None
    value = float(found.group(1))
    return value if found.group(2) == "GiB" else value / 1024


def same_card(claimed: str, reported: dict[str, Any]) -> bool:
    """Whether one GPU `nvidia-smi` reported (name, memory) is the card the provider named."""
    want, want_mem = _tokens(claimed)
    have, have_mem = _tokens(str(reported.get("name") or ""))
    if not want or not want <= have:
        return False
    if want_mem is None:
        return True
    if have_mem is not None:
        return have_mem == want_mem
    gib = _memory_gib(reported.get("memory"))
    return gib is not None and abs(gib - want_mem) <= 0.1 * want_mem


def _describe(gpus: list[dict[str, Any]]) -> str:
    names: dict[str, int] = {}
    for gpu in gpus:
        name = str(gpu.get("name") or "unnamed GPU")
        names[name] = names.get(name, 0) + 1
    return ", ".join(f"{n}× {name}" for name, n in names.items())


def hardware_check(
    claimed_gpu: str | None,
    claimed_count: int | None,
    machine: dict[str, Any] | None,
    emulated: bool = False,
    api_endpoint: str | None = None,
) -> dict[str, Any]:
    """Compare the provider's claim with the pod's facts. `stamp` is None only when nothing needs
    saying next to the numbers (a match, or facts that were never recorded). `emulated`: the pod
    was rented through `api_endpoint`, not the vendor's public API (runs before that endpoint was
    recorded have only the flag)."""
    machine = machine or {}
    gpus = [g for g in machine.get("gpus") or [] if isinstance(g, dict)]
    cpu = machine.get("cpu") or "an unrecorded CPU"
    count = 1 if claimed_count is None else claimed_count
    ran_on = _describe(gpus) if gpus else str(cpu)
    out: dict[str, Any] = {
        "claimed": {"gpu": claimed_gpu, "count": count},
        "reported": {"gpus": [g.get("name") for g in gpus], "cpu": machine.get("cpu")},
        "emulated": emulated,
    }
    if emulated:
        claim = f" (it claimed {count}× {claimed_gpu})" if claimed_gpu and count else ""
        where = (f"non-vendor API endpoint {api_endpoint}: provider claims unverified"
                 if api_endpoint else "emulated provider")
        return out | {
            "verdict": EMULATED,
            "api_endpoint": api_endpoint,
            "stamp": f"{where}{claim}; the engine ran on {ran_on}; "
            "the cost figures are illustrative",
        }
    if "gpus" not in machine:
        return out | {"verdict": UNVERIFIED, "stamp": None}
    if count == 0 or not claimed_gpu:
        # No GPU claimed (the local provider): only a GPU nobody asked about would be news.
        return out | {"verdict": MATCH, "stamp": None}
    if len(gpus) == count and all(same_card(claimed_gpu, g) for g in gpus):
        return out | {"verdict": MATCH, "stamp": None}
    reported = _describe(gpus) if gpus else f"no GPU (CPU: {cpu})"
    return out | {
        "verdict": MISMATCH,
        "stamp": f"GPU MISMATCH: the provider claims {count}× {claimed_gpu}, the pod reports "
        f"{reported}; the throughput and cost figures are not the claimed card's",
    }


def recorded_or_computed(pod: dict[str, Any]) -> dict[str, Any]:
    """The check a run recorded in run.json's `pod`, or (runs written before it was recorded) the
    same comparison made now from the pod's claim and facts."""
    recorded = pod.get("hardware_check")
    if isinstance(recorded, dict) and "verdict" in recorded:
        return recorded
    return hardware_check(
        pod.get("gpu"), pod.get("gpu_count"), pod.get("machine"), bool(pod.get("emulated")),
        pod.get("api_endpoint"),
    )


def check_pod(record: PodRecord) -> dict[str, Any]:
    """The check for a pod in the ledger: its claim, and the facts its engine launch recorded."""
    return hardware_check(
        record.gpu,
        record.gpu_count,
        record.extra.machine,
        bool(record.extra.emulated),
        record.extra.api_endpoint,
    )


def gpu_column(record_gpu: str | None, check: dict[str, Any]) -> str:
    """The claimed GPU as `status` shows it, marked when the pod says otherwise."""
    marks = {MISMATCH: " (MISMATCH)", EMULATED: " (emulated)"}
    return (record_gpu or "-") + marks.get(str(check.get("verdict")), "")

"""The report sections: every module in this folder defines `SECTION` (results/section.py), and
that is the whole registry. Analysis, report and comparison read it through the three functions
below, each ordered by its own rank."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from tailpod.results.section import Section


@cache
def registered() -> tuple[Section[Any], ...]:
    """Every section module's SECTION, in compute order (rank)."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        section = getattr(module, "SECTION", None)
        if not isinstance(section, Section):
            raise TypeError(f"{module.__name__} defines no SECTION")
        found.append(section)
    keys = [s.key for s in found]
    if len(set(keys)) != len(keys):
        raise ValueError(f"two sections share a key: {sorted(keys)}")
    return tuple(sorted(found, key=lambda s: (s.rank, s.key)))


def in_report() -> list[Section[Any]]:
    return sorted((s for s in registered() if s.render), key=lambda s: (s.report_rank or 0, s.key))


def in_compare() -> list[Section[Any]]:
    return sorted((s for s in registered() if s.compare), key=lambda s: (s.compare_rank or 0, s.key))

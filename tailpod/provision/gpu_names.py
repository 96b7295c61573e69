"""The GPU names users type, read one way wherever `--gpu` is taken (`up`, `gpus`,
`check-requirements`): SkyPilot's count form (`A40:2`, https://docs.skypilot.co/en/latest/
reference/cli.html `sky show-gpus`/`--gpus`), family names (`H100`) that stand for the variants a
provider sells, and the CUDA floor offers are filtered by.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def family_matches(wanted: str, names: Mapping[str, Iterable[str]]) -> list[str]:
    """The ids in `names` (id -> its other names) that `wanted` names: the one it spells exactly
    (any case), else every id whose id or other name holds `wanted`'s words in a row ("H100"
    matches "NVIDIA H100 80GB HBM3" and "H100 SXM", "A10" does not match "A100")."""
    target = wanted.strip().lower()
    exact = [i for i, other in names.items()
             if target in (n.strip().lower() for n in (i, *other) if n)]
    if exact:
        return exact[:1]
    words = _words(wanted)
    if not words:
        return []

    def holds(text: str) -> bool:
        have = _words(text)
        return any(have[k:k + len(words)] == words for k in range(len(have) - len(words) + 1))

    return [i for i, other in names.items() if any(holds(n) for n in (i, *other) if n)]


def near_names(wanted: Iterable[str], names: Mapping[str, Iterable[str]], n: int = 3
               ) -> list[str]:
    """Names close to each of `wanted` (typos), for a "did you mean"."""
    choices = sorted({x for i, other in names.items() for x in (i, *other) if x})
    found = {m for w in wanted for m in difflib.get_close_matches(w, choices, n)}
    # a typo inside one word of a long name ("H1OO" for the "H100" of "NVIDIA H100 80GB HBM3")
    by_word: dict[str, set[str]] = {}
    for choice in choices:
        for word in _words(choice):
            by_word.setdefault(word, set()).add(choice)
    for w in wanted:
        # a loose cutoff, for words of a few characters, held to words of the same first
        # character ("b300" is not a typo of "h100")
        same_start = [word for word in by_word if word[:1] == w.strip().lower()[:1]]
        for word in difflib.get_close_matches(w.strip().lower(), same_start, n, cutoff=0.5):
            found |= by_word[word]
    return sorted(found)


def cuda_floor(*versions: str | float | None) -> str | None:
    """The highest of the CUDA versions given ("12.8"), None when none is."""
    found = [str(v).strip() for v in versions if v not in (None, "") and str(v).strip()]
    if not found:
        return None

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", v)[:2])

    top = max(found, key=key)
    return ".".join(str(p) for p in key(top))

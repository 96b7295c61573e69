"""A spec arm ahead in median at every measured concurrency, but inside the rep spread at some of
them, is not "ahead" there: the crossover line says which concurrencies are within noise, so it
agrees with `decide`, which gives such a tie to plain (benchmarks/runs/cpu_deploy_2026-12-06/
decide.txt read "spec ahead at every measured concurrency up to c=4" above a table where plain
served c=4 on a tie)."""

from __future__ import annotations

from tailpod.results.sections.crossover import find_crossover


def test_overlapping_spreads_are_named_where_spec_leads_only_in_median() -> None:
    points = [{"concurrency": 1, "speedup": 1.40, "overlap": False},
              {"concurrency": 2, "speedup": 1.10, "overlap": True},
              {"concurrency": 4, "speedup": 1.25, "overlap": True}]
    found = find_crossover(points)
    assert found["status"] == "none_in_range"
    assert found["detail"] == ("spec ahead in median at every measured concurrency up to c=4; "
                               "the rep spreads overlap at c=2, 4, so it leads there within noise")


def test_clear_leads_keep_the_plain_sentence() -> None:
    points = [{"concurrency": 1, "speedup": 1.4, "overlap": False},
              {"concurrency": 8, "speedup": 1.2}]
    assert find_crossover(points)["detail"] == (
        "spec ahead at every measured concurrency up to c=8")

"""One rep's cells of an arm at one load, one per decide class (results/decide.py
`_one_part_per_class`): a session replay ran once per prompt class, and its cells are the one
session class, pooled as the pooled view pools (tokens over wall time, attainment weighted by
requests); a class with a figure missing stays unknown. Each figure is worked out by hand."""

from __future__ import annotations

import pytest

from tailpod.results.decide import _one_part_per_class


def test_two_session_cells_pool_and_a_lone_class_passes_through() -> None:
    prose = ("prose", 50.0, 5.0, None, 4)
    parts = [("session", 100.0, 10.0, 0.9, 10), prose, ("session", 200.0, 30.0, 0.5, 30)]
    (session, lone) = sorted(_one_part_per_class(parts), key=lambda p: p[0], reverse=True)
    assert lone == prose
    pc, value, wall, att, n = session
    # (100 x 10 + 200 x 30) / 40 = 175 tok/s; (0.9 x 10 + 0.5 x 30) / 40 = 0.6
    assert (pc, wall, n) == ("session", 40.0, 40)
    assert value == pytest.approx(175.0) and att == pytest.approx(0.6)


def test_a_missing_figure_leaves_the_pooled_one_unknown() -> None:
    (only,) = _one_part_per_class([("session", None, 10.0, 0.9, 10),
                                   ("session", 200.0, 30.0, None, 30)])
    assert only == ("session", None, 40.0, None, 40)


def test_no_wall_time_or_no_requests_pools_to_unknown() -> None:
    (only,) = _one_part_per_class([("session", 100.0, 0.0, 0.9, 0),
                                   ("session", 200.0, 0.0, 0.5, 0)])
    assert only == ("session", None, 0.0, None, 0)


def test_under_a_second_of_wall_time_still_pools() -> None:
    (only,) = _one_part_per_class([("session", 100.0, 0.2, 1.0, 1),
                                   ("session", 200.0, 0.3, 0.0, 1)])
    # (100 x 0.2 + 200 x 0.3) / 0.5 = 160 tok/s; (1 + 0) / 2 = 0.5
    assert only[1] == pytest.approx(160.0) and only[2] == pytest.approx(0.5)
    assert only[3] == pytest.approx(0.5)

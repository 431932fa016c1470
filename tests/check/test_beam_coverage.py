"""Check `beam_coverage` (rowbeam/check/coverage_checks.py) on planted LiDAR / radar arrays: a dropped return where
the exporter's BVH cast met a surface, or a return where it met none, fails; beams in neither list are not judged."""
from __future__ import annotations

import numpy as np
import pytest

from rowbeam.check.coverage_checks import BEAM_LISTS, beam_disagreement, check_beam_coverage


def _event(unit: str):
    """(manifest, arrays): 6 rows x 8 beams, every beam a return except beam 7; rows 1 and 4 verified: beams 0..6
    cast hits, beam 7 a cast miss (beams 5, 6 of row 4 decided by the policy: in neither list)."""
    key, hits, misses = BEAM_LISTS[unit]
    valid = np.ones((6, 8), np.uint8)
    valid[:, 7] = 0
    rows = [{key: 1, hits: list(range(7)), misses: [7]}, {key: 4, hits: list(range(5)), misses: [7]}]
    return {"method": {"verification": {unit: rows}}}, {"valid": valid}


def _status(manifest, arrays, unit) -> tuple:
    out = {}
    check_beam_coverage(manifest, arrays, lambda name, ok, msg, severity=None, **v: out.update(
        {name: ("pass" if ok else ("warn" if severity == "warn" else "fail"), v)}), unit)
    return out["beam_coverage"]


@pytest.mark.parametrize("unit", ["firings", "chirps"])
def test_correct_returns_pass(unit):
    m, a = _event(unit)
    assert _status(m, a, unit) == ("pass", {"hole_beams": 0, "phantom_beams": 0, "judged_beams": 14})


@pytest.mark.parametrize("unit", ["firings", "chirps"])
def test_planted_dropped_return_fails(unit):
    m, a = _event(unit)
    a["valid"][4, 2] = 0                         # a surface is there (cast hit), the return was dropped
    status, values = _status(m, a, unit)
    assert status == "fail" and values["hole_beams"] == 1 and values["phantom_beams"] == 0


@pytest.mark.parametrize("unit", ["firings", "chirps"])
def test_planted_phantom_return_fails_and_unlisted_beams_are_not_judged(unit):
    m, a = _event(unit)
    a["valid"][1, 7] = 1                         # the cast met nothing, yet a return
    status, values = _status(m, a, unit)
    assert status == "fail" and values["phantom_beams"] == 1
    m, a = _event(unit)
    a["valid"][4, 5] = 0                         # decided by the policy (not listed): any value is allowed
    a["valid"][0, 3] = 0                         # row 0 was not verified
    assert _status(m, a, unit)[0] == "pass"


def test_disagreement_names_the_beams_and_missing_lists_warn():
    m, a = _event("firings")
    a["valid"][1, 0] = 0
    holes, phantoms, judged = beam_disagreement(a["valid"], m["method"]["verification"]["firings"], "firings")
    assert holes == [(1, 0)] and phantoms == [] and judged == 14
    assert _status({"method": {"verification": {"firings": [{"firing": 1}]}}}, a, "firings")[0] == "warn"

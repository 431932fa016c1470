"""The state log's velocity check (rowbeam.model.state_log.check_log) on closed-form tracks: a velocity corner
between two samples (a linear key starting to move) and smooth circular motion pass; velocities 10 % too fast,
negated or one sample late fail. The corner fixture fails the naive trapezoid rule, so the two rules disagree on it."""
import numpy as np
import pytest

from rowbeam.model import qa_profile as tol
from rowbeam.model.state_log import BodyTrack, VELOCITY_STEP_NS, check_log, velocity_excess

RATE_HZ = 200.0
T_NS = np.arange(0, 100_000_001, 5_000_000, dtype=np.int64)      # 200 Hz grid, 0 .. 100 ms


def _track(position, velocity=None) -> BodyTrack:
    """position(t_s) -> (3,) m; velocity by central differences over +-VELOCITY_STEP_NS, as the exporter logs it."""
    T = np.tile(np.eye(4), (len(T_NS), 1, 1))
    T[:, :3, 3] = [position(t * 1e-9) for t in T_NS]
    h = VELOCITY_STEP_NS * 1e-9
    v = np.array([(position(t * 1e-9 + h) - position(t * 1e-9 - h)) / (2 * h) for t in T_NS])
    return BodyTrack(T_NS, T, v if velocity is None else velocity(v), np.zeros((len(T_NS), 3)))


def _corner(t):
    """At rest until 11 ms, then 10 m/s along x: the corner lies inside the 10-15 ms interval."""
    return np.array([10.0 * max(0.0, t - 0.011), 0.0, 0.0])


def _circle(t):
    """40 m/s on a 20 m circle (80 m/s^2): one sample late is 0.4 m/s off, twice the range two samples span."""
    return np.array([20.0 * np.cos(2.0 * t), 20.0 * np.sin(2.0 * t), 1.0])


def _check(track) -> dict:
    out = {}
    log = {"bodies": [{"name": "ego", "rate_hz": RATE_HZ}]}
    check_log(log, {"ego": track}, lambda name, ok, message, **kw: out.update(name=name, ok=ok, **kw))
    return out


@pytest.mark.parametrize("position", [_corner, _circle], ids=["corner", "circle"])
def test_correct_velocities_pass(position):
    assert _check(_track(position))["ok"]


def test_the_corner_fails_the_naive_trapezoid_rule():
    tr = _track(_corner)
    naive = np.abs(np.diff(tr.T[:, :3, 3], axis=0) / 5e-3 - (tr.v[1:] + tr.v[:-1]) / 2).max()
    assert naive > 1.0 > tol.STATE_LOG_VELOCITY_TOL_MPS and velocity_excess(tr).max() <= 1e-9


def _late(v):
    """Each velocity one sample (5 ms) late; the first extrapolated back (no flat interval to give it away)."""
    return np.concatenate([2 * v[:1] - v[1:2], v[:-1]])


@pytest.mark.parametrize("position", [_corner, _circle], ids=["corner", "circle"])
@pytest.mark.parametrize("fault", [lambda v: 1.1 * v, lambda v: -v, _late],
                         ids=["10pc_fast", "negated", "5ms_late"])
def test_planted_velocity_faults_fail(position, fault):
    r = _check(_track(position, fault))
    assert r["name"] == "state_log" and not r["ok"] and r["worst_velocity_error_mps"] > tol.STATE_LOG_VELOCITY_TOL_MPS

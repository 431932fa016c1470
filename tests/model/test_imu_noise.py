"""IMU noise model (rowbeam.model.imu_noise): Allan deviation of long simulated static logs within 10 % of the
declared Kalibr parameters at the declared tau (white noise density at tau = 1 s, bias random walk at tau = 3 s),
determinism from the seed, scale and misalignment, and the imu.yaml text."""
import numpy as np
import pytest

from rowbeam.model.imu_noise import Channel, ImuNoise, allan_deviation

DT = 1 / 200
S = 2000                     # samples per event: few events, same code path as the exporter
EVENTS = 1800                # 1800 x 10 s = 5 h of static log


def _static_log(noise: ImuNoise, events: int = EVENTS):
    zeros = np.zeros((events * S, 3))
    return noise.measure(zeros, zeros, DT, S, 0)


def test_white_noise_density_at_tau_1s():
    n = ImuNoise(Channel(1.7e-4, 0.0), Channel(2.0e-3, 0.0), seed=3)
    gyro, accel = _static_log(n, 200)
    for log, density in ((gyro, 1.7e-4), (accel, 2.0e-3)):
        sigma = allan_deviation(log, DT, [1.0])[0]
        assert np.all(np.abs(sigma / density - 1) < 0.10), sigma / density


def test_bias_random_walk_at_tau_3s():
    n = ImuNoise(Channel(0.0, 1.9e-5), Channel(0.0, 3.0e-3), seed=4)
    gyro, accel = _static_log(n)
    for log, walk in ((gyro, 1.9e-5), (accel, 3.0e-3)):
        sigma = allan_deviation(log, DT, [3.0])[0]
        assert np.all(np.abs(sigma / walk - 1) < 0.10), sigma / walk


def test_combined_curve_follows_the_model():
    """sigma^2(tau) = N^2 / tau + K^2 tau / 3 over 0.1 .. 30 s."""
    n = ImuNoise(Channel(1.7e-4, 1.9e-5), Channel(2.0e-3, 3.0e-3), seed=5)
    gyro, accel = _static_log(n)
    taus = [0.1, 1.0, 3.0, 10.0, 30.0]
    for log, ch in ((gyro, n.gyroscope), (accel, n.accelerometer)):
        model = np.sqrt(ch.noise_density ** 2 / np.array(taus) + ch.random_walk ** 2 * np.array(taus) / 3)
        got = allan_deviation(log, DT, taus)
        assert np.all(np.abs(got / model[:, None] - 1) < 0.10), got / model[:, None]


def test_one_event_equals_the_same_event_of_a_long_log():
    n = ImuNoise(Channel(1e-3, 1e-4), Channel(1e-2, 1e-3), seed=9)
    truth = np.random.default_rng(0).normal(size=(4 * 20, 3))
    w_all, f_all = n.measure(truth, truth, DT, 20, 3)
    w_one, f_one = n.measure(truth[40:60], truth[40:60], DT, 20, 5)
    assert np.array_equal(w_one, w_all[40:60]) and np.array_equal(f_one, f_all[40:60])
    other = ImuNoise(n.gyroscope, n.accelerometer, seed=10).measure(truth[:20], truth[:20], DT, 20, 3)[0]
    assert not np.array_equal(other, w_all[:20])


def test_bias_path_is_continuous_across_events():
    """The bias step between the last sample of one event and the first of the next is one random-walk step."""
    n = ImuNoise(Channel(0.0, 1.0), Channel(0.0, 1.0), seed=2)
    b = n.bias_paths(DT, 50, 0, 400)
    steps = np.diff(b, axis=1)
    boundary, inside = steps[:, 49::50], np.delete(steps, np.s_[49::50], axis=1)
    assert boundary.std() == pytest.approx(np.sqrt(DT), rel=0.1)
    assert inside.std() == pytest.approx(np.sqrt(DT), rel=0.05)


def test_scale_and_misalignment_without_noise():
    """measured = diag(scale) (I + N) truth, N = [[0,0,0],[m_yx,0,0],[m_zx,m_zy,0]]."""
    ch = Channel(0.0, 0.0, scale=(1.01, 0.98, 1.0), misalignment=(0.002, -0.003, 0.004))
    n = ImuNoise(ch, ch)
    w, _ = n.measure(np.array([[1.0, 2.0, 3.0]]), np.zeros((1, 3)), DT, 1, 0)
    expected = [1.01 * 1.0, 0.98 * (2.0 + 0.002 * 1.0), 1.0 * (3.0 - 0.003 * 1.0 + 0.004 * 2.0)]
    np.testing.assert_allclose(w[0], expected, rtol=1e-12)


def test_kalibr_yaml_names_the_parameters():
    text = ImuNoise(Channel(1.7e-4, 1.9e-5), Channel(2.0e-3, 3.0e-3)).kalibr_yaml(200)
    assert "gyroscope_noise_density: 0.00017\n" in text and "accelerometer_random_walk: 0.003\n" in text
    assert "update_rate: 200.0\n" in text

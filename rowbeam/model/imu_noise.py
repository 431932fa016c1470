"""IMU noise model (Kalibr's parameter conventions) and the overlapping Allan deviation that measures it.

Continuous-time parameters, per axis, as Kalibr's imu.yaml names them:
    gyroscope_noise_density      sigma_g    rad/s/sqrt(Hz)     white noise on angular velocity
    gyroscope_random_walk        sigma_bg   rad/s^2/sqrt(Hz)   bias random walk
    accelerometer_noise_density  sigma_a    m/s^2/sqrt(Hz)
    accelerometer_random_walk    sigma_ba   m/s^3/sqrt(Hz)
Discrete model at sample period dt (s), sample n (global over the sensor's samples):
    measured(n) = S (I + N) truth(n) + b(n) + sigma / sqrt(dt) * w(n),      w(n) ~ N(0, I)
    b(n + 1) = b(n) + sigma_b * sqrt(dt) * v(n),    b(0) = initial bias (default 0),  v(n) ~ N(0, I)
S = diag(scale) (1 = exact), N strictly lower triangular [[0, 0, 0], [m_yx, 0, 0], [m_zx, m_zy, 0]] (misalignment,
small angles, rad). Allan deviation of the result: sigma(tau) = sigma_w / sqrt(tau) for the white part (tau = 1 s
reads sigma_w) and sigma_b * sqrt(tau / 3) for the random walk (tau = 3 s reads sigma_b).

Determinism from the recorded seed: event k's white noise comes from numpy PCG64 seeded (seed, k, 0); the bias path
is continuous across events: the bias change over each event (N(0, S dt sigma_b^2) per axis) comes from one stream
seeded (seed, 1) in event order, and the path inside event k is a Brownian bridge between its ends from
(seed, k, 1). Any event can be produced alone and equals the same event of a long log.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PARAMETERS = ("gyroscope_noise_density", "gyroscope_random_walk", "accelerometer_noise_density",
              "accelerometer_random_walk")
UNITS = {"gyroscope_noise_density": "rad/s/sqrt(Hz)", "gyroscope_random_walk": "rad/s^2/sqrt(Hz)",
         "accelerometer_noise_density": "m/s^2/sqrt(Hz)", "accelerometer_random_walk": "m/s^3/sqrt(Hz)"}
MODEL_TEXT = ("measured(n) = diag(scale) (I + N) truth(n) + b(n) + noise_density / sqrt(dt) * w(n); b(n+1) = b(n) + "
              "random_walk * sqrt(dt) * v(n); N = [[0,0,0],[m_yx,0,0],[m_zx,m_zy,0]] from misalignment [m_yx, m_zx, "
              "m_zy] (rad); w, v ~ N(0, I); Kalibr imu.yaml parameter conventions")
RNG_TEXT = ("numpy PCG64: white noise of event k from SeedSequence([seed, k, 0]); bias change over each event from "
            "one stream SeedSequence([seed, 1]) in event order (gyroscope then accelerometer axes); the path inside "
            "event k a Brownian bridge from SeedSequence([seed, k, 1])")


@dataclass(frozen=True)
class Channel:
    """One triad's declared errors: white noise density, bias random walk, scale (3,), misalignment (3,), bias."""

    noise_density: float
    random_walk: float
    scale: tuple = (1.0, 1.0, 1.0)
    misalignment: tuple = (0.0, 0.0, 0.0)
    initial_bias: tuple = (0.0, 0.0, 0.0)

    def matrix(self) -> np.ndarray:
        """(3, 3) diag(scale) (I + N)."""
        m_yx, m_zx, m_zy = self.misalignment
        N = np.array([[0.0, 0.0, 0.0], [m_yx, 0.0, 0.0], [m_zx, m_zy, 0.0]])
        return np.diag(self.scale) @ (np.eye(3) + N)


@dataclass(frozen=True)
class ImuNoise:
    gyroscope: Channel
    accelerometer: Channel
    seed: int = 0

    @classmethod
    def from_rig(cls, raw: dict) -> "ImuNoise":
        def channel(prefix):
            return Channel(float(raw[f"{prefix}_noise_density"]), float(raw[f"{prefix}_random_walk"]),
                           tuple(raw.get(f"{prefix}_scale", (1.0, 1.0, 1.0))),
                           tuple(raw.get(f"{prefix}_misalignment", (0.0, 0.0, 0.0))),
                           tuple(raw.get(f"{prefix}_initial_bias", (0.0, 0.0, 0.0))))
        return cls(channel("gyroscope"), channel("accelerometer"), int(raw.get("seed", 0)))

    def to_manifest(self) -> dict:
        out = {"model": MODEL_TEXT, "rng": RNG_TEXT, "seed": self.seed, "units": dict(UNITS)}
        for prefix in ("gyroscope", "accelerometer"):
            c = getattr(self, prefix)
            out.update({f"{prefix}_noise_density": c.noise_density, f"{prefix}_random_walk": c.random_walk,
                        f"{prefix}_scale": list(c.scale), f"{prefix}_misalignment": list(c.misalignment),
                        f"{prefix}_initial_bias": list(c.initial_bias)})
        return out

    @classmethod
    def from_manifest(cls, block: dict) -> "ImuNoise":
        return cls.from_rig(block)

    def kalibr_yaml(self, rate_hz: float, topic: str = "/imu0") -> str:
        """Kalibr's imu.yaml text of these parameters."""
        lines = [f"rostopic: {topic}", f"update_rate: {float(rate_hz)!r}"]
        for prefix in ("gyroscope", "accelerometer"):
            c = getattr(self, prefix)
            lines += [f"{prefix}_noise_density: {c.noise_density!r}", f"{prefix}_random_walk: {c.random_walk!r}"]
        return "\n".join(lines) + "\n"

    def measure(self, omega: np.ndarray, force: np.ndarray, dt_s: float, samples_per_event: int, first: int):
        """(measured angular velocity, measured specific force), each (count * S, 3), of the events first, first + 1,
        ... whose truths omega, force (count * S, 3) are given (S = samples_per_event)."""
        S, count = samples_per_event, len(omega) // samples_per_event
        bias = self.bias_paths(dt_s, S, first, count)
        white = np.concatenate([np.random.default_rng([self.seed, k, 0]).standard_normal((2, S, 3))
                                for k in range(first, first + count)], 1)
        out = []
        for truth, b, w, ch in ((omega, bias[0], white[0], self.gyroscope),
                                (force, bias[1], white[1], self.accelerometer)):
            out.append(np.asarray(truth, np.float64) @ ch.matrix().T + b + ch.noise_density / np.sqrt(dt_s) * w)
        return out[0], out[1]

    def bias_paths(self, dt_s: float, samples_per_event: int, first: int, count: int = 1) -> np.ndarray:
        """(2, count * S, 3) gyroscope and accelerometer bias at each sample of events first .. first + count - 1."""
        S = samples_per_event
        sigma = np.array([self.gyroscope.random_walk, self.accelerometer.random_walk]) * np.sqrt(dt_s)   # per sample
        totals = np.random.default_rng([self.seed, 1]).standard_normal((first + count, 2, 3)) * np.sqrt(S)
        start = np.array([self.gyroscope.initial_bias, self.accelerometer.initial_bias], np.float64)
        starts = start + sigma[:, None] * np.concatenate([np.zeros((1, 2, 3)), np.cumsum(totals, 0)])[first:first + count]
        frac = (np.arange(1, S + 1) / S)[:, None, None]
        paths = []
        for k in range(first, first + count):
            walk = np.cumsum(np.random.default_rng([self.seed, k, 1]).standard_normal((S, 2, 3)), 0)   # W(1..S)
            bridge = walk - frac * walk[-1] + frac * totals[k]                                   # ends at the total
            paths.append(np.concatenate([np.zeros((1, 2, 3)), bridge[:-1]], 0))                   # b(kS + i) - b(kS)
        path = starts[:, None] + sigma[None, None, :, None] * np.stack(paths)                   # (count, S, 2, 3)
        return np.transpose(path.reshape(count * S, 2, 3), (1, 0, 2))


def allan_deviation(rates: np.ndarray, dt_s: float, taus_s) -> np.ndarray:
    """Overlapping Allan deviation of a rate signal (N,) or (N, k) sampled every dt_s at cluster times taus_s:
    sigma^2(tau) = sum_n (theta[n+2m] - 2 theta[n+m] + theta[n])^2 / (2 tau^2 (N - 2m)), tau = m dt, theta the
    integral of the rate. Returns (len(taus), ...)."""
    x = np.asarray(rates, np.float64)
    theta = np.concatenate([np.zeros((1,) + x.shape[1:]), np.cumsum(x, 0) * dt_s], 0)
    out = []
    for tau in taus_s:
        m = int(round(tau / dt_s))
        d = theta[2 * m:] - 2 * theta[m:-m] + theta[:-2 * m]
        out.append(np.sqrt((d * d).sum(0) / (2 * (m * dt_s) ** 2 * d.shape[0])))
    return np.array(out)

"""Per-event invariants of an IMU event: sample times vs `rowbeam.imu@1` (strictly increasing), finite truth, rigid
sample poses, angular velocity vs the sample poses themselves, the measured channel regenerated from the recorded
noise model and seed; and, against the bundle's state log differentiated on its own, angular velocity and specific
force ("check_state_log" hook, called by rowbeam.model.state_log.check_event_against_log)."""
from __future__ import annotations

import numpy as np

from rowbeam.check.lidar_checks import check_sensor_poses
from rowbeam.model import qa_profile as tol
from rowbeam.model.imu_noise import ImuNoise
from rowbeam.model.state_log import angular_velocity
from rowbeam.sensors import sensor_hook
from rowbeam.sensors.imu import IMU, ImuTiming

EPS32 = float(np.finfo(np.float32).eps)
TRUTH = ("angular_velocity", "specific_force")
UNRESOLVED_GAIN = 4.0      # the weights (3, 4, 1)/2 of the one-sided second-order difference at the log's ends sum to 4


@sensor_hook(IMU, "check_event")
def check_imu_event(manifest: dict, arrays: dict, add) -> None:
    event, cal = manifest["event"], manifest["calibration"]
    timing = ImuTiming.from_manifest(event)
    if "sample_time_ns" in arrays:
        t = arrays["sample_time_ns"]
        bad = np.flatnonzero(t != timing.sample_times_ns())
        rising = bool(np.all(np.diff(t) > 0))
        add("imu_sample_times", bad.size == 0 and rising, f"sample_time_ns differs from rowbeam.imu@1 at {bad.size} "
            f"samples" + ("" if rising else "; not strictly increasing") if bad.size or not rising else
            "every sample time equals rowbeam.imu@1 and they strictly increase")
    present = [n for n in TRUTH if n in arrays]
    bad_values = [n for n in present if not np.isfinite(arrays[n]).all()]
    add("imu_finite", not bad_values, f"non-finite values in {', '.join(bad_values)}" if bad_values
        else f"{', '.join(present) or 'no truth arrays'} finite")
    check_sensor_poses(arrays.get("sample_T_world_imu"), "sample", cal, "T_imu_world", event, add)
    if {"sample_time_ns", "sample_T_world_imu", "angular_velocity"} <= arrays.keys() and not bad_values:
        _check_rate_vs_poses(arrays, add)
    _check_measured(manifest, arrays, add)
    _check_verification(manifest["method"]["verification"], arrays, add)


def _check_verification(ver: dict, arrays: dict, add) -> None:
    """The exporter's comparison of the truth with central differences of Blender's own matrix_world (warn above
    the declared tolerance: that reference carries truncation and float32 roundoff, the truth does not)."""
    if not ver.get("samples_checked") or not set(TRUTH) <= arrays.keys():
        add("imu_exact_reference", True, "no samples were compared with Blender's own motion", severity="warn")
        return
    dw, df = ver["worst_angular_velocity_difference_rad_s"], ver["worst_specific_force_difference_mps2"]
    w_lim = tol.IMU_VERIFY_ANGULAR_VELOCITY_TOL_RAD_S + tol.IMU_VERIFY_RELATIVE_TOL * float(
        np.abs(arrays["angular_velocity"]).max())
    f_lim = (tol.IMU_VERIFY_FORCE_TOL_MPS2 + tol.IMU_VERIFY_RELATIVE_TOL * float(np.abs(arrays["specific_force"]).max())
             + tol.IMU_VERIFY_ROUNDOFF_GAIN * EPS32 * ver["mount_position_scale_m"])
    add("imu_exact_reference", dw <= w_lim and df <= f_lim, f"truth vs central differences of Blender's matrix_world "
        f"(step {ver['step_ns']} ns): {dw:.3g} rad/s (limit {w_lim:.3g}), {df:.3g} m/s^2 (limit {f_lim:.3g})",
        severity="warn", angular_velocity_difference_rad_s=dw, specific_force_difference_mps2=df)


def _check_rate_vs_poses(arrays: dict, add) -> None:
    """Mean angular velocity between consecutive sample poses (IMU frame: log(R_i^T R_i+1) / dt) vs the trapezoid
    mean of the truth at both samples."""
    t, T, w = arrays["sample_time_ns"], arrays["sample_T_world_imu"], arrays["angular_velocity"]
    if len(t) < 2:
        add("imu_rate_vs_poses", True, "one sample: nothing to compare", severity="warn")
        return
    R = T[:, :3, :3]
    dt = np.diff(t) * 1e-9
    # body-frame increment R_i^T R_{i+1} = exp(omega dt): log with R_before = I, R_after = the increment
    inc = np.einsum("nji,njk->nik", R[:-1], R[1:])
    measured = angular_velocity(np.broadcast_to(np.eye(3), inc.shape), inc, 1.0) / dt[:, None]
    mean = (w[1:] + w[:-1]) / 2
    err = float(np.abs(measured - mean).max())
    limit = tol.IMU_POSE_RATE_TOL_RAD_S + tol.IMU_LOG_RELATIVE_TOL * float(np.abs(w).max())
    add("imu_rate_vs_poses", err <= limit, f"angular_velocity vs consecutive sample poses: worst {err:.3g} rad/s "
        f"(limit {limit:.3g})", worst_error_rad_s=err)


def _check_measured(manifest: dict, arrays: dict, add) -> None:
    """The measured channels equal the declared noise model run again from the recorded seed on the truth."""
    names = ("angular_velocity_measured", "specific_force_measured")
    have = [n for n in names if n in arrays]
    noise = manifest["calibration"].get("noise")
    if not have and noise is None:
        return
    if len(have) < 2 or noise is None or not set(TRUTH) <= arrays.keys():
        add("imu_measured", False, "measured channels and calibration.noise must come together with the truth")
        return
    timing = ImuTiming.from_manifest(manifest["event"])
    again = ImuNoise.from_manifest(noise).measure(arrays["angular_velocity"], arrays["specific_force"],
                                                  float(timing.period_ns) * 1e-9, timing.samples,
                                                  manifest["event"]["index"])
    errs = [float(np.abs(a - arrays[n]).max()) / max(1.0, float(np.abs(a).max())) for a, n in zip(again, names,
                                                                                                 strict=True)]
    ok = max(errs) <= tol.IMU_NOISE_REPRODUCTION_TOL
    add("imu_measured", ok, "measured channels equal the declared noise model from the recorded seed" if ok else
        f"measured channels differ from the declared noise model from seed {noise['seed']} (relative {max(errs):.3g})",
        relative_error=max(errs))


def log_acceleration(track) -> np.ndarray:
    """(N, 3) world acceleration (m/s^2) of a state-log body at its own samples: central differences of the logged
    velocity over +-1 sample (second-order one-sided at the ends)."""
    return np.gradient(track.v, track.t * 1e-9, axis=0, edge_order=2)


def resolved(t_log: np.ndarray, values: np.ndarray, times) -> tuple[np.ndarray, np.ndarray]:
    """(values linear between log samples at `times` (M, 3), allowance (M,)): the allowance is UNRESOLVED_GAIN times the
    largest second difference |v[j-1] - 2 v[j] + v[j+1]| (any axis) among the samples around each time, i.e. how far the log's
    samples are from a straight line there: small where the log resolves the motion, large at a kink (a key where
    the slope jumps), where linear interpolation of differences cannot say what the motion does."""
    times = np.asarray(times)
    out = np.stack([np.interp(times, t_log, values[:, k]) for k in range(3)], -1)
    d2 = np.zeros(len(values))
    if len(values) > 2:
        d2[1:-1] = np.abs(values[2:] - 2 * values[1:-1] + values[:-2]).max(-1)
        d2[0], d2[-1] = d2[1], d2[-2]
    i = np.clip(np.searchsorted(t_log, times, side="right") - 1, 0, max(len(t_log) - 2, 0))
    near = np.clip(i[:, None] + np.arange(-1, 3)[None], 0, len(values) - 1)
    return out, UNRESOLVED_GAIN * d2[near].max(-1)


@sensor_hook(IMU, "check_state_log")
def check_imu_against_log(manifest: dict, arrays: dict, track, add) -> None:
    """Truth angular velocity and specific force vs the state log's mount motion at every sample time (the log's
    angular velocity, and its velocity differentiated here), rotated into the IMU frame by the sample poses. Limit per
    sample: declared absolute + relative part (+ float32 roundoff of the logged positions for specific force) + the
    log's own allowance (`resolved`)."""
    if not {"sample_time_ns", "sample_T_world_imu", *TRUTH} <= arrays.keys():
        return
    t = arrays["sample_time_ns"]
    R = arrays["sample_T_world_imu"][:, :3, :3]
    g = np.asarray(manifest["calibration"]["gravity_mps2"], np.float64)
    w_world, w_allow = resolved(track.t, track.w, t)
    a_world, a_allow = resolved(track.t, log_acceleration(track), t)
    w_log = np.einsum("nji,nj->ni", R, w_world)
    f_log = np.einsum("nji,nj->ni", R, a_world - g)
    p = float(np.abs(track.T[:, :3, 3]).max())
    w_err = np.abs(arrays["angular_velocity"] - w_log).max(-1)
    f_err = np.abs(arrays["specific_force"] - f_log).max(-1)
    w_lim = tol.IMU_LOG_ANGULAR_VELOCITY_TOL_RAD_S + tol.IMU_LOG_RELATIVE_TOL * float(np.abs(w_log).max()) + w_allow
    f_lim = (tol.IMU_LOG_FORCE_TOL_MPS2 + tol.IMU_LOG_RELATIVE_TOL * float(np.abs(f_log).max())
             + tol.IMU_LOG_ROUNDOFF_GAIN * EPS32 * p + a_allow)
    ok = bool((w_err <= w_lim).all() and (f_err <= f_lim).all())
    kw, kf = int(np.argmax(w_err - w_lim)), int(np.argmax(f_err - f_lim))
    add("imu_vs_state_log", ok, f"{len(t)} samples vs the state log differentiated on its own: angular velocity worst "
        f"{float(w_err.max()):.3g} rad/s (sample {kw}: {float(w_err[kw]):.3g}, limit {float(w_lim[kw]):.3g}), specific "
        f"force worst {float(f_err.max()):.3g} m/s^2 (sample {kf}: {float(f_err[kf]):.3g}, limit {float(f_lim[kf]):.3g})",
        worst_angular_velocity_error_rad_s=float(w_err.max()), worst_specific_force_error_mps2=float(f_err.max()))

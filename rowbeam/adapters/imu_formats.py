"""IMU samples in the EuRoC / Kalibr CSV layout (`adapt euroc-imu BUNDLE OUT_DIR [--sensor ID]`).

OUT_DIR/<sensor>/data.csv: one row per sample of every event of one IMU sensor, in time order,
    #timestamp [ns],w_RS_S_x [rad s^-1],w_RS_S_y [rad s^-1],w_RS_S_z [rad s^-1],
    a_RS_S_x [m s^-2],a_RS_S_y [m s^-2],a_RS_S_z [m s^-2]                                  (one line: HEADER)
timestamp = sample_time_ns (scene clock), w = angular velocity and a = specific force in the IMU frame (S = the IMU,
R = the world, as EuRoC names them): the measured channel where the events have one, else the truth. truth.csv (same
layout) holds the truth when data.csv is measured. imu.yaml: Kalibr's noise file (rostopic, update_rate and the four
noise parameters; zeros when the bundle declares no noise model). Values are written with Python's shortest
round-trip repr: nothing is rounded.
"""
from __future__ import annotations

import numpy as np

from rowbeam.adapters.adapter import AdapterFormat, bundle_to_folder
from rowbeam.adapters.output import (
    FOLDER_SIDECAR,
    check_output_dir,
    folder_listing,
    sidecar,
    sidecar_bytes,
    staged_dir,
    write_file,
)
from rowbeam.bundle.reader import Bundle
from rowbeam.model.imu_noise import Channel, ImuNoise
from rowbeam.sensors.imu import IMU
from rowbeam.util.errors import RowbeamError

HEADER = ("#timestamp [ns],w_RS_S_x [rad s^-1],w_RS_S_y [rad s^-1],w_RS_S_z [rad s^-1],a_RS_S_x [m s^-2],"
          "a_RS_S_y [m s^-2],a_RS_S_z [m s^-2]")


def csv_text(t_ns: np.ndarray, omega: np.ndarray, force: np.ndarray) -> str:
    """EuRoC CSV text (HEADER, then one row per sample: integer ns, then six repr floats)."""
    rows = [HEADER]
    for t, w, a in zip(t_ns.tolist(), omega.tolist(), force.tolist(), strict=True):
        rows.append(",".join([str(int(t))] + [repr(float(x)) for x in (*w, *a)]))
    return "\n".join(rows) + "\n"


def read_csv(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t_ns (N,) int64, omega (N, 3), force (N, 3)) of EuRoC CSV text."""
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    t = np.array([int(ln.split(",")[0]) for ln in lines], np.int64)
    v = np.array([[float(x) for x in ln.split(",")[1:]] for ln in lines], np.float64).reshape(-1, 6)
    return t, v[:, :3], v[:, 3:]


def _imu_events(bundle: Bundle, sensor: str | None) -> list:
    imus = sorted({e.sensor for e in bundle.events() if e.sensor_type == IMU}) if sensor is None else [sensor]
    if not imus:
        raise RowbeamError(f"{bundle.path}: no IMU events")
    if len(imus) > 1:
        raise RowbeamError(f"{bundle.path}: several IMU sensors ({', '.join(imus)}); choose one with --sensor")
    events = sorted(bundle.events(imus[0]), key=lambda e: e.index)
    if not events or any(e.sensor_type != IMU for e in events):
        raise RowbeamError(f"sensor {imus[0]!r} is not an IMU of this bundle")
    return events


def export_euroc_imu(bundle_path, out_dir, sensor: str | None = None) -> dict:
    """Write OUT_DIR/<sensor>/data.csv (+ truth.csv) and imu.yaml for every event of one IMU; return the sidecar."""
    bundle = Bundle.open(bundle_path)
    out_dir = check_output_dir(out_dir, bundle.path)
    events = _imu_events(bundle, sensor)
    parts = {k: [] for k in ("t", "w", "f", "wm", "fm")}
    for e in events:
        a = e.arrays(["sample_time_ns", "angular_velocity", "specific_force"]
                     + [n for n in ("angular_velocity_measured", "specific_force_measured") if n in e.names])
        for key, name in (("t", "sample_time_ns"), ("w", "angular_velocity"), ("f", "specific_force"),
                          ("wm", "angular_velocity_measured"), ("fm", "specific_force_measured")):
            if name in a:
                parts[key].append(a[name])
    measured = len(parts["wm"]) == len(events)
    t, w, f = (np.concatenate(parts[k]) for k in ("t", "w", "f"))
    cal, ev = events[0].manifest["calibration"], events[0].manifest["event"]
    noise = ImuNoise.from_manifest(cal["noise"]) if "noise" in cal else ImuNoise(Channel(0.0, 0.0), Channel(0.0, 0.0))
    name = events[0].sensor
    with staged_dir(out_dir) as stage:
        (stage / name).mkdir()
        if measured:
            write_file(stage / name / "data.csv", csv_text(t, np.concatenate(parts["wm"]),
                                                          np.concatenate(parts["fm"])).encode())
            write_file(stage / name / "truth.csv", csv_text(t, w, f).encode())
        else:
            write_file(stage / name / "data.csv", csv_text(t, w, f).encode())
        write_file(stage / name / "imu.yaml", noise.kalibr_yaml(ev["rate_hz"], f"/{name}").encode())
        doc = sidecar("euroc_imu_csv", out_dir.name, {"bundle": str(bundle.path), "sensor": name,
                                                      "events": [e.sample_id for e in events]},
                      _lost(cal), {"m/s^2": 0.0, "rad/s": 0.0}, files=folder_listing(stage),
                      channel="measured (noise model) in data.csv, truth in truth.csv" if measured else "truth",
                      frame="IMU frame: the mount's local axes, scale removed", clock="scene clock ns")
        write_file(stage / FOLDER_SIDECAR, sidecar_bytes(doc))
    return doc


def _lost(cal: dict) -> list[str]:
    return ["sample poses (sample_T_world_imu) and the reference pose; events' boundaries",
            f"gravity vector {cal['gravity_mps2']} m/s^2 (world) and the derivative scheme "
            f"({cal['derivatives']['scheme']}) are only in this sidecar's source manifests"]


def _arguments(parser) -> None:
    bundle_to_folder(parser, "the IMU sensor to write (default: the bundle's only one)")


ADAPTER_FORMATS = (
    AdapterFormat("euroc-imu", "EuRoC/Kalibr IMU CSV (+ Kalibr imu.yaml) of one IMU sensor", _arguments,
                  lambda a: export_euroc_imu(a.bundle, a.out_dir, a.sensor),
                  description="OUT_DIR/<sensor>/data.csv: #timestamp [ns], angular velocity (rad/s) and specific "
                  "force (m/s^2) in the IMU frame; measured channel where there is one (truth.csv beside it); "
                  "imu.yaml: Kalibr noise parameters."),
)

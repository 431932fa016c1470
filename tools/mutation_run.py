"""Hand-written mutation run: does the test suite notice a plausible bug?

Each mutant replaces one exact source fragment (it must occur exactly once, or the mutant is reported
`stale` and not counted) in a private copy of the repository (shutil.copytree, no .git/.venv), runs the
few fast tests chosen for it (`pytest -x -q` with the same interpreter, PYTHONPATH at the copy), and
restores the file. A mutant is killed when those tests fail (or time out). Every test selection is
first run unmutated: a selection that is red without a mutation makes its mutants `baseline-red`.

    .venv/bin/python tools/mutation_run.py [--only ID,...] [--source worktree|head] [--table FILE]

Prints one line per mutant and `killed K/N`; writes a Markdown table (default tools/mutation_results.md).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IGNORE = shutil.ignore_patterns(".git", ".venv*", "__pycache__", ".pytest_cache", ".ruff_cache", "dist", "build",
                                "*.blend", "*.blend1", "*_bundle", "bundle")

CHECKER_FAULTS = "tests/test_checker_faults.py"
CALIB = "tests/test_calibration_exports.py"


@dataclass(frozen=True)
class Mutant:
    id: str
    area: str
    file: str
    old: str
    new: str
    tests: tuple
    what: str


M = Mutant
MUTANTS = [
    # -- timing ------------------------------------------------------------------------------------------
    M("timing-half-row", "timing", "rowbeam/model/timing.py",
      "num = self.readout_ns * (2 * order + 1) + self.exposure_ns * self.rows",
      "num = self.readout_ns * (2 * order) + self.exposure_ns * self.rows",
      ("tests/test_timing.py",), "row reference time at the row's start, not its centre (half-row offset lost)"),
    M("timing-floor", "timing", "rowbeam/model/timing.py",
      "return self.frame_start_ns + (num + self.rows) // den",
      "return self.frame_start_ns + num // den",
      ("tests/test_timing.py",), "row times rounded down instead of half up"),
    M("timing-readout-direction", "timing", "rowbeam/model/timing.py",
      "return v if self.direction == \"top_to_bottom\" else self.rows - 1 - v",
      "return v if self.direction == \"top_to_bottom\" else self.rows - v",
      ("tests/test_timing.py",), "bottom-to-top readout order off by one row"),
    M("timing-cycles-row-shift", "timing", "rowbeam/blender/cycles/cycles_timing.py",
      "centre = Fraction(first_row_ns) - Fraction(row_period_ns) + readout / 2",
      "centre = Fraction(first_row_ns) + readout / 2",
      ("tests/test_timing.py",), "Cycles' (r+1)/H row time not compensated (labels one row period late)"),
    M("timing-lidar-firing-rounding", "timing", "rowbeam/sensors/lidar.py",
      "return self.sweep_start_ns + (2 * k * p.numerator + p.denominator) // (2 * p.denominator)",
      "return self.sweep_start_ns + (k * p.numerator) // p.denominator",
      ("tests/test_lidar.py", "-k", "firing_times"), "LiDAR firing times truncated instead of rounded half up"),
    M("timing-lidar-channel-offset", "timing", "rowbeam/sensors/lidar.py",
      "return self.firing_times_ns()[:, None] + np.asarray(self.time_offsets_ns, dtype=np.int64)[None, :]",
      "return self.firing_times_ns()[:, None] + 0 * np.asarray(self.time_offsets_ns, dtype=np.int64)[None, :]",
      ("tests/test_lidar.py", "-k", "channel_time_offsets or vlp16"),
      "per-channel firing delays dropped from beam times"),
    # -- frames and pixel centres ------------------------------------------------------------------------
    M("frames-opencv-flip", "frames", "rowbeam/model/frames.py",
      "T_BLENDER_CAMERA_OPENCV = np.diag([1.0, -1.0, -1.0, 1.0])",
      "T_BLENDER_CAMERA_OPENCV = np.diag([-1.0, 1.0, -1.0, 1.0])",
      ("tests/test_conventions.py",), "OpenCV<->Blender camera flip about the wrong axis (x and y swapped signs)"),
    M("pixel-centre-cx", "pixels", "rowbeam/model/camera_model.py",
      "cx = W / 2.0 - dx - 0.5", "cx = W / 2.0 - dx",
      ("tests/test_conventions.py",), "c_x = W/2 (pixel corners) instead of W/2 - 0.5"),
    M("pixel-centre-cy-shift-sign", "pixels", "rowbeam/model/camera_model.py",
      "cy = H / 2.0 + dy - 0.5", "cy = H / 2.0 - dy - 0.5",
      ("tests/test_conventions.py",), "vertical lens shift applied with the wrong sign"),
    M("range-factor-y", "geometry", "rowbeam/model/camera_model.py",
      "return np.sqrt(1.0 + xn * xn + yn * yn)", "return np.sqrt(1.0 + xn * xn)",
      (CALIB, "-k", "tilted"), "range/camera_z factor forgets y_n (shared by exporter and checker)"),
    M("camera-z-is-ray-z", "geometry", "rowbeam/blender/sensors/camera_labels.py",
      "camera_z = rng / factor", "camera_z = rng",
      (CALIB, "-k", "tilted"), "camera_z exported as the range"),
    M("rigid-last-row", "frames", "rowbeam/model/frames.py",
      "return ortho & det & last", "return ortho & det",
      ("tests/test_conventions.py", CHECKER_FAULTS, "-k", "rigid or row_pose or reference_pose or firing_pose"),
      "rigidity test ignores the homogeneous last row"),
    # -- LiDAR -------------------------------------------------------------------------------------------
    M("lidar-azimuth-sign-contract", "lidar", "rowbeam/sensors/lidar.py",
      "sign = 1.0 if self.spin_direction == \"ccw\" else -1.0", "sign = 1.0",
      ("tests/test_lidar.py", "-k", "spin_direction"), "declared cw spin ignored (beam table turns ccw)"),
    M("lidar-azimuth-sign-osl", "lidar", "rowbeam/blender/sensors/lidar_osl.py",
      "sign = 1.0 if sensor.spin_direction == \"ccw\" else -1.0", "sign = 1.0",
      ("tests/test_lidar.py", "-k", "box_room_exact or cw_sweep"),
      "rendered sweep ignores cw spin (OSL camera always turns ccw)"),
    M("lidar-frame-transpose", "frames", "rowbeam/blender/sensors/lidar_labels.py",
      "p = np.einsum(\"fcji,fcj->fci\", R, P - o)", "p = np.einsum(\"fcij,fcj->fci\", R, P - o)",
      ("tests/test_lidar.py", "-k", "box_room_exact"), "LiDAR points rotated by R instead of R^T"),
    M("lidar-nan-policy", "nan", "rowbeam/blender/sensors/lidar_labels.py",
      "\"range\": np.where(valid, rng, nan).astype(np.float32),",
      "\"range\": np.where(valid, rng, 0.0).astype(np.float32),",
      ("tests/test_lidar.py", "-k", "moving_wall_range"), "LiDAR range 0 instead of NaN where there is no return"),
    # -- camera labels, ids, NaN policy ------------------------------------------------------------------
    M("camera-nan-policy", "nan", "rowbeam/blender/sensors/camera_labels.py",
      "\"camera_z\": np.where(valid, camera_z, nan).astype(np.float32),",
      "\"camera_z\": np.where(valid, camera_z, 0.0).astype(np.float32),",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean"), "camera_z 0 instead of NaN off the surface"),
    M("ids-background-class", "ids", "rowbeam/blender/sensors/camera_labels.py",
      "lut[0] = BACKGROUND_ID", "lut[0] = VOID_ID",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean"), "background pixels labelled void instead of 0"),
    M("ids-render-index-order", "ids", "rowbeam/blender/objects/object_table.py",
      "return [ObjectEntry(name, oid, i + 1, ontology.class_of(tag), tag, source,",
      "return [ObjectEntry(name, oid, i, ontology.class_of(tag), tag, source,",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean"), "render indices start at 0 (collide with background)"),
    M("ids-hex-parse", "ids", "rowbeam/blender/objects/object_table.py",
      "value = int(str(text).strip(), 0)", "value = int(str(text).strip(), 16)",
      ("tests/test_object_ids.py",), "object ids always read as hex (decimal ids change)"),
    M("ids-class-case", "ids", "rowbeam/model/ontology.py",
      "return self.tag_to_id.get(tag.strip().lower(), VOID_ID)", "return self.tag_to_id.get(tag, VOID_ID)",
      ("tests/test_object_ids.py",), "class tags matched case-sensitively"),
    # -- flow --------------------------------------------------------------------------------------------
    M("flow-direction", "flow", "rowbeam/blender/flow/flow_math.py",
      "flow[idx[defined], 0] = (ud - u)[defined]", "flow[idx[defined], 0] = (u - ud)[defined]",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean"), "horizontal flow points from destination to source"),
    M("flow-in-bounds-edge", "flags", "rowbeam/blender/flow/flow_math.py",
      "in_bounds = defined & (ud >= -0.5) & (ud < W - 0.5) & (vn >= -0.5) & (vn < H - 0.5)",
      "in_bounds = defined & (ud >= 0) & (ud < W - 1) & (vn >= 0) & (vn < H - 1)",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean"),
      "dest_in_bounds tested against pixel centres, not pixel edges"),
    M("flow-visible-not-nested", "flags", "rowbeam/blender/flow/flow_math.py",
      "visible = in_bounds & _depth_test(dst, ud, vn, Xc[:, 2], render, depth_abs_m, depth_rel)",
      "visible = defined & _depth_test(dst, ud, vn, Xc[:, 2], render, depth_abs_m, depth_rel)",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean"), "dest_visible set for points landing outside"),
    # -- checker -----------------------------------------------------------------------------------------
    M("check-intrinsics-size-only", "checker", "rowbeam/check/camera_checks.py",
      "add(\"intrinsics\", err < 1e-9 and size_ok,", "add(\"intrinsics\", size_ok,",
      (CHECKER_FAULTS, "-k", "intrinsics"), "intrinsics check ignores K"),
    M("check-reference-pose-stamp", "checker", "rowbeam/check/camera_checks.py",
      "ok = is_rigid(np.array(T[\"matrix\"]), tol.RIGID_TOL) and T.get(\"time_ns\") == "
      "manifest[\"event\"][\"reference_time_ns\"]",
      "ok = is_rigid(np.array(T[\"matrix\"]), tol.RIGID_TOL)",
      (CHECKER_FAULTS, "-k", "reference_pose"), "camera reference pose time stamp not checked"),
    M("check-normal-length-squared", "checker", "rowbeam/check/camera_checks.py",
      "length_err = np.abs(np.sqrt(np.einsum(\"hwc,hwc->hw\", n, n)) - 1.0)",
      "length_err = np.abs(np.einsum(\"hwc,hwc->hw\", n, n) - 1.0)",
      (CHECKER_FAULTS, "-k", "normal_not_unit"), "unit-normal check measures |n|^2 - 1"),
    M("check-verification-strict", "checker", "rowbeam/check/camera_checks.py",
      "ok = r <= tol.VERIFY_MAX_RANGE_ERROR_M and px <= tol.VERIFY_MAX_SILHOUETTE_ERROR_PX",
      "ok = r < tol.VERIFY_MAX_RANGE_ERROR_M and px < tol.VERIFY_MAX_SILHOUETTE_ERROR_PX",
      (CHECKER_FAULTS, "-k", "verification"), "published limits made exclusive"),
    M("check-object-table-ids", "checker", "rowbeam/check/label_checks.py",
      "table_ok = len(by_index) == len(objects) and len(set(ids)) == len(ids)",
      "table_ok = len(by_index) == len(objects)",
      (CHECKER_FAULTS, "-k", "object_table"), "duplicate 64-bit ids in the object table accepted"),
    M("check-semantic-trusts-table", "checker", "rowbeam/check/label_checks.py",
      "known = {c[\"id\"] for c in manifest[\"ontology\"][\"classes\"]} | {BACKGROUND_ID, VOID_ID}",
      "known = {c[\"id\"] for c in manifest[\"ontology\"][\"classes\"]} | {BACKGROUND_ID, VOID_ID} | "
      "{o[\"class_id\"] for o in objects}",
      (CHECKER_FAULTS, "-k", "semantic"), "classes of the object table count as known"),
    M("check-lidar-cos-sign", "checker", "rowbeam/check/lidar_checks.py",
      "cos = -np.einsum(\"ij,ij->i\", n, d)", "cos = np.einsum(\"ij,ij->i\", n, d)",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean or cos_incidence"), "checker's cos_incidence sign flipped"),
    M("check-lidar-verification-ids", "checker", "rowbeam/check/lidar_checks.py",
      "ok = r <= tol.VERIFY_MAX_RANGE_ERROR_M and frac <= tol.VERIFY_MAX_ID_MISMATCH_FRACTION",
      "ok = r <= tol.VERIFY_MAX_RANGE_ERROR_M",
      (CHECKER_FAULTS, "-k", "lidar_recorded_verification"), "LiDAR id mismatches ignored by exact_reference"),
    M("check-motion-compensation-transpose", "checker", "rowbeam/check/lidar_checks.py",
      "expected = world @ T_lidar_world_ref[:3, :3].T + T_lidar_world_ref[:3, 3]",
      "expected = world @ T_lidar_world_ref[:3, :3] + T_lidar_world_ref[:3, 3]",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean or motion_compensated"),
      "motion-compensated points checked with the transposed rotation"),
    M("check-flow-flag-nesting", "checker", "rowbeam/check/flow_checks.py",
      "(in_bounds, defined, \"dest_in_bounds without correspondence_defined\"),\n", "",
      (CHECKER_FAULTS, "-k", "flow_flags"), "dest_in_bounds => correspondence_defined not checked"),
    M("check-flow-cycle-tolerance", "checker", "rowbeam/check/flow_checks.py",
      "bad = int(np.count_nonzero(err > tol.FLOW_CYCLE_TOL_PX))",
      "bad = int(np.count_nonzero(err > 10 * tol.FLOW_CYCLE_TOL_PX))",
      (CHECKER_FAULTS, "-k", "does_not_return"), "cycle tolerance 1 px instead of 0.1 px"),
    M("check-scene-flow-frame", "checker", "rowbeam/check/flow_checks.py",
      "R_cw = np.transpose(src[\"row_T_world_camera\"][:, :3, :3], (0, 2, 1))",
      "R_cw = src[\"row_T_world_camera\"][:, :3, :3]",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean or wrong_frame"), "scene flow frame checked with R_world_camera"),
    M("check-reference-time-slack", "checker", "rowbeam/check/camera_checks.py",
      "ref_ok = event[\"reference_time_ns\"] == timing.reference_time_ns()",
      "ref_ok = abs(event[\"reference_time_ns\"] - timing.reference_time_ns()) <= 1",
      (CHECKER_FAULTS, "-k", "reference_time"), "reference time accepted 1 ns off the model"),
    M("check-rgb-one-channel", "checker", "rowbeam/check/camera_checks.py",
      "finite = bool(np.isfinite(arrays[\"rgb\"]).all())", "finite = bool(np.isfinite(arrays[\"rgb\"][..., 0]).all())",
      (CHECKER_FAULTS, "-k", "rgb"), "rgb finiteness tested on the red channel only"),
    M("check-firing-pose-tolerance", "checker", "rowbeam/check/lidar_checks.py",
      "bad = np.flatnonzero(~rigid_mask(poses.reshape(-1, 4, 4), tol.RIGID_TOL))",
      "bad = np.flatnonzero(~rigid_mask(poses.reshape(-1, 4, 4), 1e-2))",
      (CHECKER_FAULTS, "-k", "firing_pose"), "firing-pose rigidity tolerance 1e-2"),
    M("check-lidar-reference-stamp", "checker", "rowbeam/check/lidar_checks.py",
      "ok = is_rigid(np.array(T_ref[\"matrix\"]), tol.RIGID_TOL) and T_ref.get(\"time_ns\") == "
      "event[\"reference_time_ns\"]",
      "ok = is_rigid(np.array(T_ref[\"matrix\"]), tol.RIGID_TOL)",
      (CHECKER_FAULTS, "-k", "lidar_reference_pose"), "LiDAR reference pose time stamp not checked"),
    M("check-beam-times-off", "checker", "rowbeam/check/lidar_checks.py",
      "add(\"beam_times\", bad.size == 0,", "add(\"beam_times\", True,",
      (CHECKER_FAULTS, "-k", "beam_time"), "beam_times check never fails"),
    M("check-lidar-normal-length-squared", "checker", "rowbeam/check/lidar_checks.py",
      "length = np.abs(np.linalg.norm(n, axis=-1) - 1.0)", "length = np.abs(np.einsum(\"ij,ij->i\", n, n) - 1.0)",
      (CHECKER_FAULTS, "-k", "lidar_normal"), "LiDAR unit-normal check measures |n|^2 - 1"),
    M("check-points-order-within-firing", "checker", "rowbeam/check/lidar_checks.py",
      "same_beams = pts.size == k.size and np.array_equal(pts[\"firing\"], k) and np.array_equal(pts[\"channel\"], c)",
      "same_beams = pts.size == k.size and np.array_equal(pts[\"firing\"], k)",
      (CHECKER_FAULTS, "-k", "beam_order"), "point order within a firing not checked"),
    M("check-points-frame-transpose", "checker", "rowbeam/check/lidar_checks.py",
      "expected_local = np.einsum(\"nji,nj->ni\", T[:, :3, :3], world - origin)",
      "expected_local = np.einsum(\"nij,nj->ni\", T[:, :3, :3], world - origin)",
      (CHECKER_FAULTS, "-k", "fixtures_are_clean or along_its_beam"), "points_lidar_frame uses R instead of R^T"),
    M("check-flow-defined-needs-source", "checker", "rowbeam/check/flow_checks.py",
      "(defined, valid, \"correspondence_defined without source_valid\")", "(defined, defined, \"\")",
      (CHECKER_FAULTS, "-k", "defined_without"), "correspondence_defined => source_valid not checked"),
]


def copy_repo(source: str, dst: Path) -> None:
    """The repository under test: the working tree (default) or the last commit (git archive HEAD)."""
    if source == "head":
        dst.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dst)], input=archive, check=True)
    else:
        shutil.copytree(REPO, dst, ignore=IGNORE, symlinks=True)


def run_tests(copy: Path, tests: tuple, timeout: float) -> tuple[str, float, str]:
    """('pass' | 'fail' | 'timeout' | 'error', seconds, last output line)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - t0, f"timed out after {timeout:.0f} s"
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    status = {0: "pass", 1: "fail"}.get(r.returncode, "error")
    return status, time.perf_counter() - t0, (lines[-1] if lines else f"exit {r.returncode}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--source", choices=("worktree", "head"), default="worktree")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    ap.add_argument("--table", type=Path, default=REPO / "tools" / "mutation_results.md")
    args = ap.parse_args(argv)
    mutants = MUTANTS
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m.id for m in MUTANTS}
        if unknown:
            print(f"mutation_run: error: unknown mutant ids {sorted(unknown)}", file=sys.stderr)
            return 2
        mutants = [m for m in MUTANTS if m.id in wanted]
    t_start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rowbeam_mutants_") as tmp:
        copy = Path(tmp) / "repo"
        copy_repo(args.source, copy)
        baseline = {}
        for m in mutants:
            path = copy / m.file
            original = path.read_text()
            if original.count(m.old) != 1:
                rows.append((m, "stale", 0.0, f"fragment found {original.count(m.old)} times in {m.file}"))
                print(f"{'stale':13} {m.id}", flush=True)
                continue
            if m.tests not in baseline:
                baseline[m.tests] = run_tests(copy, m.tests, args.timeout)
            if baseline[m.tests][0] != "pass":
                rows.append((m, "baseline-red", 0.0, baseline[m.tests][2]))
                print(f"{'baseline-red':13} {m.id}: {baseline[m.tests][2]}", flush=True)
                continue
            path.write_text(original.replace(m.old, m.new))
            try:
                status, secs, last = run_tests(copy, m.tests, args.timeout)
            finally:
                path.write_text(original)
            verdict = {"fail": "killed", "timeout": "killed", "error": "killed", "pass": "SURVIVED"}[status]
            if status in ("timeout", "error"):
                verdict += f" ({status})"
            rows.append((m, verdict, secs, last))
            print(f"{verdict:13} {m.id} [{secs:.0f} s]: {last}", flush=True)
    counted = [r for r in rows if r[1] not in ("stale", "baseline-red")]
    killed = [r for r in counted if r[1].startswith("killed")]
    wall = time.perf_counter() - t_start
    summary = f"killed {len(killed)}/{len(counted)} mutants in {wall / 60:.1f} min ({args.source})"
    survivors = [r[0].id for r in counted if r[1] == "SURVIVED"]
    print(summary)
    print("survivors:", ", ".join(survivors) or "none")
    lines = ["# Mutation run (tools/mutation_run.py)", "", summary, "",
             "| id | area | mutation | file | tests | result | s |", "|---|---|---|---|---|---|---|"]
    for m, verdict, secs, _last in rows:
        lines.append(f"| {m.id} | {m.area} | {m.what} | {m.file} | {' '.join(m.tests)} | {verdict} | {secs:.0f} |")
    if args.only is None:
        args.table.write_text("\n".join(lines) + "\n")
    else:
        print("\n".join(lines[4:]))
    return 0 if not survivors else 1


if __name__ == "__main__":
    sys.exit(main())

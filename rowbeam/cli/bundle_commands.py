"""rowbeam contracts command line.

  python -m rowbeam check BUNDLE [--report FILE]      exit 0 pass, 1 hard QA failure, 2 unusable input
  python -m rowbeam adapt {flo,kitti-flow,pfm} FLOW_DIR OUT [--variant V] [--direction forward|backward]
  python -m rowbeam adapt {kitti-lidar,bop,kitti-object,rectify} BUNDLE OUT_DIR | coco BUNDLE OUT.json | ply SOURCE OUT
  python -m rowbeam associate BUNDLE --max-skew-us N  camera row bands <-> LiDAR beams / radar chirps
"""
from __future__ import annotations

import argparse
import os
import sys

from rowbeam.check.runner import check_bundle, check_report_path, summary_lines, write_report
from rowbeam.util.errors import RowbeamError, quiet_numpy_float_warnings


def main(argv=None, prog: str = "rowbeam") -> int:
    quiet_numpy_float_warnings()
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    chk = sub.add_parser("check", help="check a bundle (or one event folder) against its contracts",
                         description="Check a bundle (or one event/flow folder) against its contracts: JSON Schema "
                         "of every document, sha256 of every payload, conventions, timing models and cross-modal "
                         "invariants. Exit 0 publishable, 1 a hard QA failure, 2 unusable input.",
                         epilog="The schemas are published: `rowbeam schemas DIR` writes them; docs/check.md shows "
                         "how to validate with plain jsonschema + referencing.")
    chk.add_argument("bundle", help="bundle folder (holds bundle.json), or one event/flow folder, or its manifest.json")
    chk.add_argument("--report", help="also write the JSON QA report (rowbeam/qa_report@1) to this file")
    ad = sub.add_parser("adapt", help="write bundle data in an external format, with a JSON sidecar of what is lost",
                        description="One-way adapters. Each writes its output plus a rowbeam/adapter_sidecar@1 JSON "
                        "listing what the format loses and the largest rounding error (OUT.json beside a file output, "
                        "OUT_DIR/rowbeam_adapter_sidecar.json inside a folder output). Nothing is half-written: files "
                        "are renamed into place, folders are staged beside OUT_DIR and renamed.")
    fmts = ad.add_subparsers(dest="format", required=True, metavar="format",
                            help="the output format; `adapt FORMAT --help` explains its arguments")
    for name, fmt_help in (("flo", "Middlebury .flo of one flow folder: float32, unknown = 1e10"),
                           ("kitti-flow", "KITTI 2015 flow PNG of one flow folder: 16-bit, 1/64 px, |flow| <= 512 px"),
                           ("kitti", "deprecated alias of kitti-flow"),
                           ("pfm", "PFM of one flow folder: float32 (u, v, 0), rows bottom to top, NaN kept")):
        f = fmts.add_parser(name, help=fmt_help, description=fmt_help)
        f.add_argument("flow_dir", help="a flow folder of a bundle: flows/<sensor>/<i0>-<i1>")
        f.add_argument("out", help="output file (its sidecar is written to OUT.json)")
        f.add_argument("--variant", help="flo: valid (dest_visible pixels, default) | geometric (every defined "
                       "correspondence); kitti-flow: noc (non-occluded: dest_visible, default) | occ (all defined)")
        f.add_argument("--direction", choices=("forward", "backward"), default="forward",
                       help="flow_forward (source grid, default) or flow_backward (destination grid)")
    kl = fmts.add_parser("kitti-lidar", help="KITTI velodyne .bin per sweep (float32 x y z intensity)",
                         description="OUT_DIR/velodyne/<index:06d>.bin for every sweep of one LiDAR sensor: float32 "
                         "x y z intensity, LiDAR frame (x forward, y left, z up, m).")
    kl.add_argument("bundle", help="a rowbeam bundle folder (holds bundle.json)")
    kl.add_argument("out_dir", help="a new (or empty) output folder; staged beside it and renamed when complete")
    kl.add_argument("--sensor", help="LiDAR sensor id (needed when the bundle has several)")
    kl.add_argument("--frame", choices=("own_time", "reference"), default="own_time",
                    help="own_time: each point in the LiDAR frame at its own beam time (default); reference: motion "
                    "compensated to the sweep's reference time")
    kl.add_argument("--intensity", choices=("cos_incidence", "zero"), default="cos_incidence",
                    help="rowbeam has no intensity: write cos_incidence (default) or 0")
    ply = fmts.add_parser("ply", help="binary PLY of LiDAR returns (x y z t_ns cos_incidence channel firing ids)",
                          description="An event folder -> one PLY file OUT; a bundle -> OUT/<sensor>/<index:06d>.ply "
                          "for every LiDAR event.")
    ply.add_argument("source", help="a bundle folder or one LiDAR event folder")
    ply.add_argument("out", help="output PLY file (event) or a new folder (bundle)")
    coco = fmts.add_parser("coco", help="COCO instances JSON from modal masks (RLE) of camera object labels")
    coco.add_argument("bundle", help="a rowbeam bundle folder (holds bundle.json)")
    coco.add_argument("out", help="output JSON file (sidecar: OUT + '.json')")
    coco.add_argument("--sensor", help="camera sensor id (default: every camera with object labels)")
    bop = fmts.add_parser("bop", help="BOP scene folders: scene_camera/scene_gt/scene_gt_info, depth, rgb, masks, "
                          "models in mm")
    bop.add_argument("bundle", help="a rowbeam bundle folder (holds bundle.json)")
    bop.add_argument("out_dir", help="a new (or empty) output folder; staged beside it and renamed when complete")
    bop.add_argument("--split", default="test", help="split folder name (default test)")
    ko = fmts.add_parser("kitti-object", help="KITTI object label_2 + calib (3D boxes only for yaw-only objects)")
    ko.add_argument("bundle", help="a rowbeam bundle folder (holds bundle.json)")
    ko.add_argument("out_dir", help="a new (or empty) output folder; staged beside it and renamed when complete")
    ko.add_argument("--sensor", help="camera sensor id (default: the only camera with object labels)")
    rect = fmts.add_parser("rectify", help="rectified (undistorted) pinhole view of distorted camera events: "
                           "camera_z, range, ids (nearest neighbour), validity, source row",
                           description="OUT_DIR/<sensor>/<index:06d>/ (camera_z, range, instance_id, semantic_id, valid, "
                           "normals, rgb, source_row/col, objects.json) for every camera event with a lens model and "
                           "OUT_DIR/<sensor>/<i0>-<i1>/ for the flows between them (rowbeam/adapters/rectify.py).")
    rect.add_argument("bundle", help="a rowbeam bundle folder (holds bundle.json)")
    rect.add_argument("out_dir", help="a new (or empty) output folder; staged beside it and renamed when complete")
    rect.add_argument("--sensor", help="camera sensor id (default: every camera with a lens)")
    rect.add_argument("--K", help="pinhole intrinsics fx,fy,cx,cy in px (default: the event's K)")
    rect.add_argument("--size", help="pinhole image size WxH (default: the event's)")
    rect.add_argument("--alpha", help="choose K like cv2.getOptimalNewCameraMatrix (opencv lenses) or "
                      "cv2.fisheye.estimateNewCameraMatrixForUndistortRectify balance (fisheye): 0 = every pixel has "
                      "a source, 1 = the whole source image kept (0..1; not with --K)")
    rect.add_argument("--format", default="exr", choices=("exr", "npy"), dest="array_format",
                      help="image arrays as EXR with the bundle's channels and dtypes (default) or .npy")
    rect.add_argument("--png", action="store_true", help="also depth.png (16-bit, BOP) and flow_*.png (16-bit, KITTI)")
    rect.add_argument("--interpolation", default="bilinear", choices=("bilinear", "nearest"),
                      help="camera_z (inverse depth) and rgb: bilinear (default) or nearest; ids, normals, flow "
                      "always nearest")
    asc = sub.add_parser("associate", help="pair camera row bands with LiDAR beams / radar chirps within a skew",
                         description="For each camera event and each LiDAR or radar event overlapping it, pair every "
                         "camera row with the nearest firing group / chirp and keep the pair only when the skew is at "
                         "most --max-skew-us; writes BUNDLE/associations/max_skew_<ns>ns.json (rowbeam/associations@1) "
                         "with each band's rows, times, skew and state-log pose support. The checker verifies it.")
    asc.add_argument("bundle", help="a rowbeam bundle folder (holds bundle.json)")
    asc.add_argument("--max-skew-us", type=float, required=True, help="largest |t_row - t_beam| of a pair, microseconds")
    args = parser.parse_args(argv)
    if args.command == "adapt":
        return _adapt(args)
    if args.command == "associate":
        from rowbeam.bundle.associations import associate_bundle

        try:
            path, doc = associate_bundle(args.bundle, args.max_skew_us)
        except RowbeamError as exc:
            return _error("rowbeam associate", exc)
        bands = sum(len(p["bands"]) for p in doc["pairs"])
        return _emit([f"rowbeam associate: wrote {path} ({len(doc['pairs'])} event pairs, {bands} row bands, "
                      f"max skew {doc['max_skew_ns']} ns)"], 0)
    try:
        if args.report:
            check_report_path(args.report)      # before the (long) check: nothing is written if it cannot be
        report = check_bundle(args.bundle)
        if args.report:
            write_report(args.report, report)
    except RowbeamError as exc:
        return _error("rowbeam check", exc)
    lines = summary_lines(report) + ([f"  report: {args.report}"] if args.report else [])
    return _emit(lines, 1 if report["status"] == "fail" else 0)


def _error(prog: str, exc: RowbeamError) -> int:
    """One line on stderr, the error's exit status."""
    try:
        print(f"{prog}: error: {exc}", file=sys.stderr)
    except BrokenPipeError:
        pass
    return exc.exit_code


def _emit(lines: list[str], status: int) -> int:
    """Print to stdout; a reader that closed the pipe early (`| head`) is not an error: keep `status`."""
    try:
        print("\n".join(lines))
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return status


def _adapt(args) -> int:
    try:
        line = _run_adapter(args)
    except RowbeamError as exc:
        return _error("rowbeam adapt", exc)
    return _emit([line], 0)


def _run_adapter(args) -> str:
    """Run the chosen adapter; the one-line summary it prints."""
    fmt = args.format
    if fmt in ("flo", "kitti-flow", "kitti", "pfm"):
        from rowbeam.adapters.flow_formats import export_flow

        s = export_flow(args.flow_dir, fmt, args.out, args.variant, args.direction)
        return (f"rowbeam adapt: wrote {args.out} ({s['format']}, {s['variant']}, max rounding error "
                f"{s['max_rounding_error_px']:.4g} px); sidecar {args.out}.json")
    if fmt == "kitti-lidar":
        from rowbeam.adapters.lidar_formats import export_kitti_lidar

        s = export_kitti_lidar(args.bundle, args.out_dir, args.sensor, args.frame, args.intensity)
    elif fmt == "rectify":
        from rowbeam.adapters.rectify import export_rectified

        s = export_rectified(args.bundle, args.out_dir, args.sensor, args.K, args.size, args.alpha, args.array_format,
                             args.png, args.interpolation)
    elif fmt == "ply":
        from rowbeam.adapters.lidar_formats import export_ply

        s = export_ply(args.source, args.out)
    elif fmt == "coco":
        from rowbeam.adapters.coco import export_coco

        s = export_coco(args.bundle, args.out, args.sensor)
    elif fmt == "bop":
        from rowbeam.adapters.bop import export_bop

        s = export_bop(args.bundle, args.out_dir, args.split)
    else:
        from rowbeam.adapters.kitti_object import export_kitti_object

        s = export_kitti_object(args.bundle, args.out_dir, args.sensor)
    err = ", ".join(f"{v:.4g} {k}" for k, v in s["max_rounding_error"].items())
    dropped = f"; {s['dropped']}" if s.get("dropped") else ""
    return (f"rowbeam adapt: wrote {s['file']} ({s['format']}; max rounding error {err}); {len(s['lost'])} losses in "
            f"the sidecar{dropped}")


if __name__ == "__main__":
    sys.exit(main())

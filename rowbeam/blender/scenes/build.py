"""Build a scene and its rig file:  python -m rowbeam.blender.scenes.build NAME OUT.blend [options]

NAME is `running_example`, a calibration scene (fronto_plane, marker, tilted_plane,
moving_plane, ego_forward, ego_yaw), `lens_board` (markers for lens models, rowbeam/blender/scenes/lens_scenes.py),
`surfaces` (closed-form transparent, glass, volume and node surfaces) or `street_surfaces` (a street of them).
Writes OUT.blend and OUT.rig.json beside it. Importing this module needs no bpy (`rowbeam scenes --help`); the scene
builders are imported when a scene is built.
"""
from __future__ import annotations

import argparse
import sys

from rowbeam.util.command_line import Parser, fail
from rowbeam.util.errors import RowbeamError

# the scene names (calibration.SCENES in between) and lens_scenes.SCENE_LENSES, here without bpy; a test keeps
# them equal to the builders' own tables
NAMES = ("running_example", "fronto_plane", "marker", "tilted_plane", "moving_plane", "ego_forward", "ego_yaw",
         "lens_board", "surfaces", "street_surfaces")
LENSES = ("opencv", "opencv_fisheye")
PROG = "rowbeam scenes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = __doc__.splitlines()[0]
    p.add_argument("name", choices=NAMES, metavar="name", help="scene to build: " + ", ".join(NAMES))
    p.add_argument("out", help="output .blend path")
    p.add_argument("--scale", type=int, default=1, help="divide the 1280x720 seed resolution by this")
    p.add_argument("--rgb-samples", type=int, default=None, help="rgb samples in the rig (0: labels only)")
    p.add_argument("--object-labels", action=argparse.BooleanOptionalAction, default=True,
                   help="running_example: export object labels (amodal masks, boxes, poses) for the camera "
                        "(default; --no-object-labels leaves them out)")
    p.add_argument("--lens", choices=LENSES,
                   help="give every camera this lens (K from the Blender camera; lens_board: its own preset)")


def run(args: argparse.Namespace) -> int:
    """Build the scene, save OUT.blend and OUT.rig.json; a path that cannot be written is one line, exit 2."""
    try:
        path = _build(args)
    except RowbeamError as exc:
        return fail(PROG, exc)
    except OSError as exc:
        return fail(PROG, RowbeamError(f"{args.out}: {exc.strerror or exc}"))
    print(f"scene {args.name}: {path} (rig {path.with_suffix('.rig.json')})")
    return 0


def _build(args: argparse.Namespace):
    from rowbeam.blender.scenes import (calibration, common, lens_scenes, running_example, street_surfaces,
                                        surface_scenes)
    from rowbeam.sensors import sensor_type

    if args.name == "surfaces":
        _, rig = surface_scenes.surfaces(scale=args.scale)
    elif args.name == "street_surfaces":
        rig = street_surfaces.street(scale=args.scale)
    elif args.name == "lens_board":
        _, rig = lens_scenes.marker_board(lens=args.lens or "opencv", scale=args.scale)
    elif args.name == "running_example":
        running_example.build(1280 // args.scale, 720 // args.scale)
        rig = running_example.rig(radar=True, state_log=True, imu=True, clocks=True, object_labels=args.object_labels)
    else:
        _, rig = calibration.SCENES[args.name](scale=args.scale)
    if args.lens and args.name != "lens_board":
        for s in rig["sensors"]:
            if sensor_type(s["type"]).has_rows:
                s["lens"] = lens_scenes.SCENE_LENSES[args.lens]
    if args.rgb_samples is not None:
        for s in rig["sensors"]:
            if sensor_type(s["type"]).has_rows:
                s["rgb_samples"] = args.rgb_samples
    return common.save(args.out, rig)


def main(argv=None, prog: str = "python -m rowbeam.blender.scenes.build") -> int:
    p = Parser(prog=prog)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

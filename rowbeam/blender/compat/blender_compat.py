"""Every difference between the Blender versions rowbeam supports, in one place (bpy).

Supported: Blender 4.2 LTS to 5.3 (tested: 4.2, 4.5, 5.0, 5.3 — `make test-matrix`). Blender up
to 5.0 embeds Python 3.11 and numpy 1.x, 5.1 and later Python 3.13 and numpy 2.x. Each difference
is decided by the Blender version (the release that introduced the API), never by trying and
catching; tests/blender/compat/test_blender_compat.py pins every branch to the real API of the running Blender.

| difference                    | 4.2            | 4.5             | 5.0 / 5.3                       |
|-------------------------------|----------------|-----------------|---------------------------------|
| multilayer EXR output         | file_format    | file_format     | media_type + file_format        |
| single-part EXR               | always         | always          | use_exr_interleave              |
| object index channel          | IndexOB        | IndexOB         | Object Index                    |
| animation curves              | Action.fcurves | channelbag/slot | channelbag/slot (no .fcurves)   |
| new material has a node tree  | use_nodes=True | use_nodes=True  | always                          |
| custom (OSL) camera: LiDAR, radar | — (refused) | CUSTOM          | CUSTOM                          |
| oslquery (bpy wheel)          | —              | <bpy>/<ver>/python/lib/python3.X/site-packages |  |
| Python / numpy                | 3.11 / 1.x     | 3.11 / 1.x      | 3.11 / 1.x (5.0); 3.13 / 2.x (5.3) |
"""
from __future__ import annotations

import os
import sys

import bpy
import numpy as np

from rowbeam.util.errors import RowbeamError
from rowbeam.sensors.camera import CAMERA
from rowbeam.sensors.lidar import LIDAR
from rowbeam.sensors.radar import RADAR

MIN_VERSION = (4, 2, 0)
MAX_MINOR = (5, 3)                          # newest Blender line tested (bpy 5.3.0 on PyPI)
TESTED = ("4.2", "4.5", "5.0", "5.3")
PYTHON_OF_LINE = (((5, 1), (3, 13)), ((4, 2), (3, 11)))    # first Blender line -> its embedded Python
NUMPY_MAJOR_OF_LINE = (((5, 1), 2), ((4, 2), 1))          # first Blender line -> numpy major it is built with

VERSION: tuple[int, int, int] = tuple(bpy.app.version)
VERSION_STRING = ".".join(str(v) for v in VERSION)

# The Blender release where each API appeared.
MEDIA_TYPE_SINCE = (5, 0, 0)                # ImageFormatSettings.media_type ('MULTI_LAYER_IMAGE')
EXR_INTERLEAVE_SINCE = (5, 0, 0)            # ImageFormatSettings.use_exr_interleave (multi-part EXR by default)
OBJECT_INDEX_NAME_SINCE = (5, 0, 0)         # EXR pass "Object Index" (before: "IndexOB")
LAYERED_ACTIONS_SINCE = (4, 4, 0)           # Action.layers / slots / channelbags
LEGACY_FCURVES_UNTIL = (5, 0, 0)            # Action.fcurves removed
CUSTOM_CAMERA_SINCE = (4, 5, 0)             # Camera.type 'CUSTOM' (OSL camera): spinning LiDAR
NODE_MATERIALS_SINCE = (5, 0, 0)            # every material renders its node tree (use_nodes deprecated)

HAS_MEDIA_TYPE = VERSION >= MEDIA_TYPE_SINCE
HAS_EXR_INTERLEAVE = VERSION >= EXR_INTERLEAVE_SINCE
HAS_LAYERED_ACTIONS = VERSION >= LAYERED_ACTIONS_SINCE
HAS_CUSTOM_CAMERA = VERSION >= CUSTOM_CAMERA_SINCE
ALWAYS_NODE_MATERIALS = VERSION >= NODE_MATERIALS_SINCE
OBJECT_INDEX_PASS = "Object Index" if VERSION >= OBJECT_INDEX_NAME_SINCE else "IndexOB"

# Sensor types and the first Blender that can export them.
SENSOR_MIN_VERSION = {CAMERA: MIN_VERSION, LIDAR: CUSTOM_CAMERA_SINCE, RADAR: CUSTOM_CAMERA_SINCE}


def _line_value(table, version):
    return next(value for line, value in table if tuple(version[:2]) >= line)


def supported_text() -> str:
    return (f"supported: Blender {MIN_VERSION[0]}.{MIN_VERSION[1]} to {MAX_MINOR[0]}.{MAX_MINOR[1]} "
            f"(tested {', '.join(TESTED)}) with Python 3.11 (Blender < 5.1) or 3.13 (5.1 and later)")


def support_problem(version=VERSION, python=tuple(sys.version_info[:2]), numpy_version=np.__version__) -> str | None:
    """Why this Blender/Python/numpy combination is outside the supported matrix (None: supported)."""
    version, python = tuple(version), tuple(python)
    if not MIN_VERSION <= version < (MAX_MINOR[0], MAX_MINOR[1] + 1, 0):
        return f"Blender {'.'.join(map(str, version))} is not supported ({supported_text()})"
    want = _line_value(PYTHON_OF_LINE, version)
    if python != want:
        return (f"Python {python[0]}.{python[1]} with Blender {'.'.join(map(str, version))} is not supported "
                f"(Blender {version[0]}.{version[1]} needs Python {want[0]}.{want[1]}; {supported_text()})")
    major = _line_value(NUMPY_MAJOR_OF_LINE, version)
    if int(numpy_version.split(".")[0]) != major:
        need = "numpy<2" if major == 1 else "numpy>=2"
        return (f"numpy {numpy_version} with Blender {'.'.join(map(str, version))} is not supported "
                f"(it is built against numpy {major}.x: install {need})")
    return None


def check_supported() -> None:
    """Refuse (RowbeamError, one line, exit 2) a Blender, Python or numpy outside the matrix."""
    problem = support_problem()
    if problem:
        raise RowbeamError(problem)


def require_sensor_support(sensor_id: str, sensor_type: str, version=VERSION) -> None:
    """Refuse a sensor this Blender cannot export, naming the minimum version."""
    need = SENSOR_MIN_VERSION.get(sensor_type, MIN_VERSION)
    if tuple(version) < need:
        raise RowbeamError(f"sensor {sensor_id!r} ({sensor_type}) needs Blender >= {need[0]}.{need[1]} "
                           f"(found {'.'.join(map(str, version))})")


def set_multilayer_exr(patch, image_settings) -> None:
    """Render output = one single-part (interleaved) multilayer OpenEXR holding every pass. 5.0 first
    selects the media type, and writes multi-part files unless asked to interleave (multi-part writing
    fails on non-square pixels: conflicting pixelAspectRatio headers between parts, bpy 5.0.1);
    4.x has neither setting and always writes a single part."""
    if HAS_MEDIA_TYPE:
        patch.set(image_settings, "media_type", "MULTI_LAYER_IMAGE")
    patch.set(image_settings, "file_format", "OPEN_EXR_MULTILAYER")
    if HAS_EXR_INTERLEAVE:
        patch.set(image_settings, "use_exr_interleave", True)


def new_material(name: str):
    """A material whose node tree renders (a Principled BSDF): 4.x creates it with use_nodes off."""
    mat = bpy.data.materials.new(name)
    if not ALWAYS_NODE_MATERIALS:
        mat.use_nodes = True
    return mat


def ensure_node_tree(patch, mat) -> None:
    """Make Cycles render `mat` through its node tree (so an AOV added there is written), undone by `patch`.
    5.x renders every material's nodes (a tree is created when missing); 4.x only with use_nodes on."""
    if mat.node_tree is None or (not ALWAYS_NODE_MATERIALS and not mat.use_nodes):
        patch.set(mat, "use_nodes", True)


def pass_channels(layer: str) -> dict:
    """Multilayer EXR channel names of the scalar passes rowbeam reads, per key."""
    return {"depth": f"{layer}.Depth.Z", "index": f"{layer}.{OBJECT_INDEX_PASS}.X"}


def fcurves(id_data) -> list:
    """The F-curves animating `id_data` (object, camera data, ...): 4.2 `Action.fcurves`; from 4.4 the
    channelbag of the object's action slot (5.0 removed `Action.fcurves`)."""
    anim = id_data.animation_data
    action = anim.action if anim else None
    if action is None:
        return []
    if not HAS_LAYERED_ACTIONS:
        return list(action.fcurves)
    from bpy_extras import anim_utils

    bag = anim_utils.action_get_channelbag_for_slot(action, anim.action_slot)
    return list(bag.fcurves) if bag else []


def oslquery_site_packages() -> str:
    """Where the bpy wheel keeps `oslquery` (Blender's custom-camera update hook imports it):
    <bpy>/<major.minor>/python/lib/python<X.Y>/site-packages."""
    return os.path.join(bpy.utils.resource_path("LOCAL"), "python", "lib",
                        f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")


def ensure_oslquery_importable() -> None:
    """A real Blender has `oslquery` on sys.path already; the bpy wheel needs its bundled site-packages."""
    try:
        import oslquery  # noqa: F401
    except ImportError:
        path = oslquery_site_packages()
        if os.path.isdir(path) and path not in sys.path:
            sys.path.append(path)

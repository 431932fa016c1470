"""ROS 2 message definitions (the standard Humble field lists, as a ROS 2 MCAP schema holds them) and builders of
the message values the MCAP adapter writes, as plain dicts the `mcap-ros2-support` encoder takes. No ROS needed.

Times: builtin_interfaces/Time {sec, nanosec} from integer ns on the scene clock (sec = t // 1e9, nanosec = the
rest; exact). Poses: translation in metres, rotation as a unit quaternion (x, y, z, w; w >= 0) of the 3x3 block.
"""
from __future__ import annotations

import re

import numpy as np

from rowbeam.model.frames import quat_wxyz_from_matrix

_SEPARATOR = "=" * 80
_HEADER = "std_msgs/Header header"
DEFINITIONS = {
    "builtin_interfaces/Time": "int32 sec\nuint32 nanosec",
    "builtin_interfaces/Duration": "int32 sec\nuint32 nanosec",
    "std_msgs/Header": "builtin_interfaces/Time stamp\nstring frame_id",
    "std_msgs/String": "string data",
    "std_msgs/ColorRGBA": "float32 r\nfloat32 g\nfloat32 b\nfloat32 a",
    "geometry_msgs/Vector3": "float64 x\nfloat64 y\nfloat64 z",
    "geometry_msgs/Point": "float64 x\nfloat64 y\nfloat64 z",
    "geometry_msgs/Quaternion": "float64 x\nfloat64 y\nfloat64 z\nfloat64 w",
    "geometry_msgs/Pose": "geometry_msgs/Point position\ngeometry_msgs/Quaternion orientation",
    "geometry_msgs/PoseStamped": f"{_HEADER}\ngeometry_msgs/Pose pose",
    "geometry_msgs/Transform": "geometry_msgs/Vector3 translation\ngeometry_msgs/Quaternion rotation",
    "geometry_msgs/TransformStamped": f"{_HEADER}\nstring child_frame_id\ngeometry_msgs/Transform transform",
    "tf2_msgs/TFMessage": "geometry_msgs/TransformStamped[] transforms",
    "nav_msgs/Path": f"{_HEADER}\ngeometry_msgs/PoseStamped[] poses",
    "sensor_msgs/Image": f"{_HEADER}\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\nuint32 step\n"
                         "uint8[] data",
    "sensor_msgs/CompressedImage": f"{_HEADER}\nstring format\nuint8[] data",
    "sensor_msgs/RegionOfInterest": "uint32 x_offset\nuint32 y_offset\nuint32 height\nuint32 width\nbool do_rectify",
    "sensor_msgs/CameraInfo": f"{_HEADER}\nuint32 height\nuint32 width\nstring distortion_model\nfloat64[] d\n"
                              "float64[9] k\nfloat64[9] r\nfloat64[12] p\nuint32 binning_x\nuint32 binning_y\n"
                              "sensor_msgs/RegionOfInterest roi",
    "sensor_msgs/PointField": "uint8 INT8=1\nuint8 UINT8=2\nuint8 INT16=3\nuint8 UINT16=4\nuint8 INT32=5\n"
                              "uint8 UINT32=6\nuint8 FLOAT32=7\nuint8 FLOAT64=8\nstring name\nuint32 offset\n"
                              "uint8 datatype\nuint32 count",
    "sensor_msgs/PointCloud2": f"{_HEADER}\nuint32 height\nuint32 width\nsensor_msgs/PointField[] fields\n"
                               "bool is_bigendian\nuint32 point_step\nuint32 row_step\nuint8[] data\nbool is_dense",
    "sensor_msgs/Imu": f"{_HEADER}\ngeometry_msgs/Quaternion orientation\nfloat64[9] orientation_covariance\n"
                       "geometry_msgs/Vector3 angular_velocity\nfloat64[9] angular_velocity_covariance\n"
                       "geometry_msgs/Vector3 linear_acceleration\nfloat64[9] linear_acceleration_covariance",
    "visualization_msgs/UVCoordinate": "float32 u\nfloat32 v",
    "visualization_msgs/MeshFile": "string filename\nuint8[] data",
    "visualization_msgs/Marker": (
        "int32 ARROW=0\nint32 CUBE=1\nint32 SPHERE=2\nint32 CYLINDER=3\nint32 LINE_STRIP=4\nint32 LINE_LIST=5\n"
        "int32 CUBE_LIST=6\nint32 SPHERE_LIST=7\nint32 POINTS=8\nint32 TEXT_VIEW_FACING=9\nint32 MESH_RESOURCE=10\n"
        "int32 TRIANGLE_LIST=11\nint32 ADD=0\nint32 MODIFY=0\nint32 DELETE=2\nint32 DELETEALL=3\n"
        f"{_HEADER}\nstring ns\nint32 id\nint32 type\nint32 action\ngeometry_msgs/Pose pose\n"
        "geometry_msgs/Vector3 scale\nstd_msgs/ColorRGBA color\nbuiltin_interfaces/Duration lifetime\n"
        "bool frame_locked\ngeometry_msgs/Point[] points\nstd_msgs/ColorRGBA[] colors\nstring texture_resource\n"
        "sensor_msgs/CompressedImage texture\nvisualization_msgs/UVCoordinate[] uv_coordinates\nstring text\n"
        "string mesh_resource\nvisualization_msgs/MeshFile mesh_file\nbool mesh_use_embedded_materials"),
    "visualization_msgs/MarkerArray": "visualization_msgs/Marker[] markers",
}
_FIELD_TYPE = re.compile(r"^([A-Za-z0-9_]+/[A-Za-z0-9_]+)(\[\d*\])? ", re.MULTILINE)
POINT_FIELD_TYPES = {np.dtype("int8"): 1, np.dtype("uint8"): 2, np.dtype("int16"): 3, np.dtype("uint16"): 4,
                     np.dtype("int32"): 5, np.dtype("uint32"): 6, np.dtype("float32"): 7, np.dtype("float64"): 8}


def msgdef(name: str) -> str:
    """The ROS 2 MCAP schema text of message `name` ('pkg/Type'): its fields, then every type it uses, each after
    a line of 80 '=' and 'MSG: pkg/Type' (the layout ros2 bag record writes)."""
    order: list[str] = []

    def visit(n: str) -> None:
        for dep, _ in _FIELD_TYPE.findall(DEFINITIONS[n]):
            if dep not in order:
                order.append(dep)
                visit(dep)
    visit(name)
    return "\n".join([DEFINITIONS[name], *(f"{_SEPARATOR}\nMSG: {d}\n{DEFINITIONS[d]}" for d in order)]) + "\n"


def schema_name(name: str) -> str:
    """'pkg/Type' -> 'pkg/msg/Type', the schema name of ROS 2 bags (the dependent sections keep 'pkg/Type')."""
    pkg, typ = name.split("/")
    return f"{pkg}/msg/{typ}"


def stamp(t_ns: int) -> dict:
    """builtin_interfaces/Time of integer ns >= 0 (exact)."""
    t = int(t_ns)
    return {"sec": t // 1_000_000_000, "nanosec": t % 1_000_000_000}


def header(t_ns: int, frame_id: str) -> dict:
    return {"stamp": stamp(t_ns), "frame_id": frame_id}


def quaternion(T) -> dict:
    """geometry_msgs/Quaternion (x, y, z, w; w >= 0) of the rotation block of a 4x4 (or 3x3) matrix."""
    w, x, y, z = quat_wxyz_from_matrix(np.asarray(T, np.float64)[:3, :3])
    return {"x": float(x), "y": float(y), "z": float(z), "w": float(w)}


def pose(T) -> dict:
    """geometry_msgs/Pose of a rigid 4x4 (position = translation column, metres)."""
    t = np.asarray(T, np.float64)[:3, 3]
    return {"position": {"x": float(t[0]), "y": float(t[1]), "z": float(t[2])}, "orientation": quaternion(T)}


def transform_stamped(t_ns: int, parent: str, child: str, T_parent_child) -> dict:
    """geometry_msgs/TransformStamped: T_parent_child maps child-frame coordinates into the parent frame."""
    p = pose(T_parent_child)
    return {"header": header(t_ns, parent), "child_frame_id": child,
            "transform": {"translation": p["position"], "rotation": p["orientation"]}}


def image(t_ns: int, frame_id: str, pixels: np.ndarray, encoding: str) -> dict:
    """sensor_msgs/Image of an (H, W) or (H, W, C) array in little-endian row-major order, row 0 at the top."""
    a = np.ascontiguousarray(pixels)
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    H, W = a.shape[:2]
    return {"header": header(t_ns, frame_id), "height": H, "width": W, "encoding": encoding, "is_bigendian": 0,
            "step": a.strides[0], "data": a.tobytes()}


def point_cloud(t_ns: int, frame_id: str, columns: dict[str, np.ndarray]) -> dict:
    """sensor_msgs/PointCloud2 (height 1, little-endian, packed fields in the given order) of {name: (N,) array};
    each column keeps its dtype (one of POINT_FIELD_TYPES)."""
    names = list(columns)
    dtype = np.dtype([(n, np.asarray(columns[n]).dtype.newbyteorder("<")) for n in names])
    n = len(next(iter(columns.values()))) if columns else 0
    rec = np.empty(n, dtype)
    for name in names:
        rec[name] = columns[name]
    fields = [{"name": name, "offset": dtype.fields[name][1], "datatype": POINT_FIELD_TYPES[dtype.fields[name][0]
              .newbyteorder("=")], "count": 1} for name in names]
    return {"header": header(t_ns, frame_id), "height": 1, "width": n, "fields": fields, "is_bigendian": False,
            "point_step": dtype.itemsize, "row_step": dtype.itemsize * n, "data": rec.tobytes(), "is_dense": True}


def string(text: str) -> dict:
    return {"data": text}

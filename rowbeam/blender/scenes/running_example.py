"""The running example: a shuttle at dusk, a parked delivery van, and a pedestrian
emerging from behind it (bpy).

World: x along the street (the shuttle's direction), y left, z up, metres. The ego camera
(1280x720, seed K) rides at 1.6 m and moves forward at 10 m/s. The van is parked on the right
at x = 30; the pedestrian starts hidden beyond it and walks left across the street at 2 m/s: a skinned
figure (torso, head, two legs, two arms; one mesh) on a procedural armature with a 1 Hz walk cycle (legs
swing +-26 deg, arms +-17 deg in opposition, sine in time), so its flow is deforming, not rigid.
Buildings, parked cars, poles, trees and signs bring the scene to about 200 objects. The rig
(an empty "shuttle" moving forward at 10 m/s) carries the camera, a spinning LiDAR mount, a front radar mount and
an IMU. A cyclist accelerates with Bezier keys, so motion-step interpolation is exercised, not only linear motion.
"""
from __future__ import annotations

import json
import math

import bpy

from rowbeam.blender.compat import blender_compat
from rowbeam.blender.export.run import LINEAGE_PROPERTY, SCENARIO_PROPERTY

from rowbeam.blender.scenes import common

FPS = 30
SPEED_EGO = 10.0
SPEED_PEDESTRIAN = 2.0
ID_BASE = 0x0D05_C000_0000_0000
SCENARIO = "dusk_shuttle"
LINEAGE_GROUP = "dusk_shuttle/checkpoint_pre_emergence"


class _Ids:
    def __init__(self):
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return ID_BASE + self.n


def _materials():
    colours = {"road": (0.08, 0.08, 0.09), "sidewalk": (0.35, 0.34, 0.32), "building": (0.45, 0.30, 0.22),
               "van": (0.85, 0.85, 0.8), "pedestrian": (0.7, 0.2, 0.15), "car": (0.1, 0.2, 0.5),
               "pole": (0.2, 0.2, 0.2), "tree": (0.1, 0.35, 0.12), "sign": (0.8, 0.7, 0.1)}
    out = {}
    for name, rgb in colours.items():
        m = blender_compat.new_material(name)
        bsdf = next(n for n in m.node_tree.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
        bsdf.inputs["Base Color"].default_value = (*rgb, 1.0)
        out[name] = m
    return out


def _box(ids, mats, name, size, loc, cls, mat, rot=0.0):
    o = common.add_box(name, size, loc, rot)
    o.data.materials.append(mats[mat])
    return common.tag(o, ids.next(), cls)


# Walker parts in the figure's frame (x: shoulder axis, y: walking direction, z up; origin 0.875 m above the
# feet): (name, half sizes, centre, bone). Limbs hang from their bone's head; every vertex follows one bone.
WALKER_PARTS = (("torso", (0.2, 0.12, 0.3), (0.0, 0.0, 0.275), "spine"),
                ("head", (0.11, 0.11, 0.12), (0.0, 0.0, 0.73), "spine"),
                ("leg_L", (0.07, 0.07, 0.425), (-0.1, 0.0, -0.45), "leg_L"),
                ("leg_R", (0.07, 0.07, 0.425), (0.1, 0.0, -0.45), "leg_R"),
                ("arm_L", (0.05, 0.05, 0.28), (-0.26, 0.0, 0.27), "arm_L"),
                ("arm_R", (0.05, 0.05, 0.28), (0.26, 0.0, 0.27), "arm_R"))
WALKER_BONES = (("spine", (0.0, 0.0, -0.025), (0.0, 0.0, 0.85), None),
                ("leg_L", (-0.1, 0.0, -0.025), (-0.1, 0.0, -0.875), "spine"),
                ("leg_R", (0.1, 0.0, -0.025), (0.1, 0.0, -0.875), "spine"),
                ("arm_L", (-0.26, 0.0, 0.55), (-0.26, 0.0, -0.01), "spine"),
                ("arm_R", (0.26, 0.0, 0.55), (0.26, 0.0, -0.01), "spine"))
WALK_HZ = 1.0
WALK_SWING = {"leg_L": 0.45, "leg_R": -0.45, "arm_L": -0.3, "arm_R": 0.3}     # rad amplitude, sign = phase


def _walker(ids, mats, location):
    """The skinned pedestrian: one mesh of six boxes (each split into 4 segments along its height so the
    silhouette is a real mesh) on an armature child of it, walk cycle as sine F-curve modifiers."""
    verts, faces, owner = [], [], []
    for _part, half, centre, bone in WALKER_PARTS:
        hx, hy, hz = half
        levels = [centre[2] - hz + 2 * hz * i / 4 for i in range(5)]
        base = len(verts)
        ring = [(-hx, -hy), (hx, -hy), (hx, hy), (-hx, hy)]
        for z in levels:
            verts += [(centre[0] + x, centre[1] + y, z) for x, y in ring]
            owner += [bone] * 4
        for i in range(4):
            a, b = base + 4 * i, base + 4 * (i + 1)
            faces += [(a + k, a + (k + 1) % 4, b + (k + 1) % 4, b + k) for k in range(4)]
        faces += [(base + 3, base + 2, base + 1, base), (base + 16, base + 17, base + 18, base + 19)]
    ped = common._mesh_object("pedestrian", verts, faces)
    ped.location = location
    ped.data.materials.append(mats["pedestrian"])
    common.tag(ped, ids.next(), "pedestrian")
    arm = bpy.data.objects.new("pedestrian_rig", bpy.data.armatures.new("pedestrian_rig"))
    bpy.context.scene.collection.objects.link(arm)
    arm.parent = ped
    bpy.context.view_layer.objects.active = arm
    bpy.ops.object.mode_set(mode="EDIT")
    for name, head, tail, parent in WALKER_BONES:
        b = arm.data.edit_bones.new(name)
        b.head, b.tail = head, tail
        b.align_roll((0.0, 1.0, 0.0) if name != "spine" else (0.0, -1.0, 0.0))   # bone x = figure x
        if parent:
            b.parent = arm.data.edit_bones[parent]
    bpy.ops.object.mode_set(mode="OBJECT")
    for bone in {b for _, _, _, b in WALKER_PARTS}:
        ped.vertex_groups.new(name=bone).add([i for i, o in enumerate(owner) if o == bone], 1.0, "REPLACE")
    mod = ped.modifiers.new("walk", "ARMATURE")
    mod.object = arm
    for name, _amplitude in WALK_SWING.items():
        pb = arm.pose.bones[name]
        pb.rotation_mode = "XYZ"
        pb.keyframe_insert("rotation_euler", index=0, frame=1)
    for fc in blender_compat.fcurves(arm):
        name = fc.data_path.split('"')[1]
        gen = fc.modifiers.new("FNGENERATOR")      # amplitude * sin(phase_multiplier * frame + phase_offset)
        gen.function_type = "SIN"
        gen.amplitude = WALK_SWING[name]
        gen.phase_multiplier = 2 * math.pi * WALK_HZ / FPS
        gen.phase_offset = -2 * math.pi * WALK_HZ / FPS          # phase 0 at frame 1
        gen.use_additive = False
    return ped


def build(width: int = 1280, height: int = 720, frames: int = 60):
    scene = common.new_scene(width, height, fps=FPS, frame_start=1, frame_end=frames)
    scene[SCENARIO_PROPERTY] = SCENARIO
    scene[LINEAGE_PROPERTY] = LINEAGE_GROUP
    scene.world.color = (0.02, 0.025, 0.05)
    ids, mats = _Ids(), _materials()

    sun = bpy.data.objects.new("dusk_sun", bpy.data.lights.new("dusk_sun", "SUN"))
    sun.data.energy = 0.4
    sun.rotation_euler = (math.radians(80), 0, math.radians(-40))
    scene.collection.objects.link(sun)

    road = common.add_quad("road", 150, 6)
    road.location = (120, 0, 0)
    road.data.materials.append(mats["road"])
    common.tag(road, ids.next(), "road")
    for side in (1, -1):
        _box(ids, mats, f"sidewalk_{'L' if side > 0 else 'R'}", (300, 3, 0.15), (120, side * 7.5, 0.075),
             "sidewalk", "sidewalk")
        for i in range(30):
            x = -20 + i * 10
            h = 6 + (i * 37 % 11)
            _box(ids, mats, f"building_{'L' if side > 0 else 'R'}{i:02d}", (9, 8, h), (x, side * 13.5, h / 2),
                 "building", "building")
        for i in range(20):
            x = -10 + i * 14
            _box(ids, mats, f"pole_{'L' if side > 0 else 'R'}{i:02d}", (0.2, 0.2, 5), (x, side * 6.4, 2.5), "pole", "pole")
            _box(ids, mats, f"tree_{'L' if side > 0 else 'R'}{i:02d}", (1.6, 1.6, 3), (x + 7, side * 8.2, 3.5),
                 "tree", "tree")
        for i in range(9):
            x = 45 + i * 12
            _box(ids, mats, f"car_{'L' if side > 0 else 'R'}{i:02d}", (4.2, 1.8, 1.5), (x, side * 4.6, 0.75), "car", "car")
        for i in range(15):
            _box(ids, mats, f"bollard_{'L' if side > 0 else 'R'}{i:02d}", (0.25, 0.25, 0.9),
                 (3 + i * 17, side * 6.1, 0.45), "pole", "pole")
    for i in range(8):
        _box(ids, mats, f"sign_{i}", (0.05, 0.8, 0.8), (12 + i * 25, -6.2, 2.4), "sign", "sign")

    van = _box(ids, mats, "delivery_van", (5.5, 2.1, 2.6), (30, -4.4, 1.3), "van", "van")
    start = (33.6, -4.9, 0.875)        # just beyond the van, hidden from the shuttle until ~0.6 s
    pedestrian = _walker(ids, mats, start)
    common.key_locations(pedestrian, [(1, start), (1 + FPS, (start[0], start[1] + SPEED_PEDESTRIAN, start[2]))])
    cyclist = _box(ids, mats, "cyclist", (1.8, 0.5, 1.7), (20, 2.5, 0.85), "pedestrian", "pedestrian")
    for frame, x in ((1, 20.0), (1 + frames, 45.0)):   # Bezier ease-in/out: non-linear in time
        cyclist.location.x = x
        cyclist.keyframe_insert("location", index=0, frame=frame)
    for fc in blender_compat.fcurves(cyclist):
        for kp in fc.keyframe_points:
            kp.interpolation = "BEZIER"

    # The shuttle (an empty) carries the rig: camera at 1.6 m, spinning LiDAR mount on the roof at 2.1 m.
    shuttle = common.add_empty("shuttle")
    common.key_locations(shuttle, [(1, (0, 0, 0)), (1 + FPS, (SPEED_EGO, 0, 0))])
    f, cx, cy = 800.0 * width / 1280, width / 2.0, height / 2.0
    cam = common.add_camera("ego_camera", common.look_along((0, 0, 1.6), forward=(1, 0, 0), down=(0, 0, -1)),
                            f, cx, cy, width, height)
    lidar = common.add_empty("lidar_mount", (0.0, 0.0, 2.1))
    radar = common.add_empty("radar_mount", (2.2, 0.0, 0.6))      # front bumper, facing +x
    imu = common.add_empty("imu_mount", (0.4, 0.0, 1.0))          # in the cabin, axes the shuttle's
    for child in (cam, lidar, radar, imu):
        child.parent = shuttle                  # shuttle is at the origin at frame 1: parent inverse = identity
    return scene, van, pedestrian


RADAR = {"id": "radar_front", "type": "radar", "object": "radar_mount", "rate_hz": 20, "first_frame_ns": 0,
         "chirps": 64, "chirp_period_ns": 50_000, "azimuth_fov_deg": [-45.0, 45.0], "elevation_fov_deg": [-4.0, 4.0],
         "azimuth_beams": 16, "elevation_beams": 2, "min_range_m": 0.5, "max_range_m": 150.0,
         "max_radial_velocity_mps": 60.0, "verify_chirps": 2}


# Plausible sensor clocks and delivery (rowbeam/model/sensor_clock.py): the camera stamped by its host driver
# (microsecond ticks, a little fast, 20 us jitter; frames reach the consumer ~35 ms after readout), the LiDAR
# PTP-disciplined (1 us ticks; a sweep is delivered ~15 ms after its last firing), the radar stamped on a
# CAN bus (100 us ticks rounded to nearest, 2.1 ms behind, ~60 ms processing latency), the IMU stamped by its
# microcontroller (1 us ticks, a crystal 20 ppm slow; a block of samples reaches the host ~2 ms after its last).
CLOCKS = {
    "camera_front": ({"offset_ns": -350_000, "drift_ppm": 12.0, "resolution_ns": 1000, "rounding": "floor",
                      "jitter_ns": 20_000.0, "seed": 1}, {"latency_ns": 35_000_000, "jitter_ns": 2_000_000.0, "seed": 2}),
    "lidar_top": ({"offset_ns": 40_000, "drift_ppm": -3.0, "resolution_ns": 1000, "rounding": "floor",
                   "jitter_ns": 1_000.0, "seed": 3}, {"latency_ns": 15_000_000, "jitter_ns": 500_000.0, "seed": 4}),
    "radar_front": ({"offset_ns": -2_100_000, "drift_ppm": 35.0, "resolution_ns": 100_000, "rounding": "nearest",
                     "jitter_ns": 50_000.0, "seed": 5}, {"latency_ns": 60_000_000, "jitter_ns": 5_000_000.0, "seed": 6}),
    "imu_shuttle": ({"offset_ns": 120_000, "drift_ppm": -20.0, "resolution_ns": 1000, "rounding": "floor",
                     "jitter_ns": 5_000.0, "seed": 7}, {"latency_ns": 2_000_000, "jitter_ns": 200_000.0, "seed": 8}),
}


IMU = {"id": "imu_shuttle", "type": "imu", "object": "imu_mount", "rate_hz": 200, "samples_per_event": 20,
       "noise": {"gyroscope_noise_density": 1.7e-4, "gyroscope_random_walk": 1.9e-5,
                 "accelerometer_noise_density": 2.0e-3, "accelerometer_random_walk": 3.0e-3, "seed": 1}}


def rig(lidar: bool = True, lidar_fields: dict | None = None, radar: bool = False, state_log: bool = False,
        imu: bool = False, clocks: bool = False, **camera_fields) -> dict:
    """camera_front (the seed's rolling-shutter camera; object labels unless object_labels=False), by default
    lidar_top (10 Hz, 64 x 2048); with radar=True radar_front (20 Hz, 64 chirps x 32 beams: small, so `make demo`
    stays quick), with state_log=True the 200 Hz state log with the shuttle as ego body, with imu=True imu_shuttle
    (200 Hz, 20 samples per event, a consumer-grade noise model), with clocks=True each sensor's CLOCKS clock and
    delivery latency (`rowbeam scenes running_example` turns all four on)."""
    doc = common.camera_rig("camera_front", "ego_camera", **{"object_labels": True, **camera_fields})
    if lidar:
        fields = {"azimuth_steps": 2048, "preset": "uniform_64", **(lidar_fields or {})}
        doc["sensors"] += common.lidar_rig("lidar_top", "lidar_mount", **fields)["sensors"]
    if radar:
        doc["sensors"].append(dict(RADAR))
    if imu:
        doc["sensors"].append(json.loads(json.dumps(IMU)))
    if state_log:
        doc["state_log"] = {"ego_object": "shuttle", "ego_rate_hz": 200, "objects_rate_hz": 200}
    if clocks:
        for sensor in doc["sensors"]:
            sensor["clock"], sensor["delivery"] = (dict(d) for d in CLOCKS[sensor["id"]])
    return doc

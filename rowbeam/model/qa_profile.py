"""QA tolerances, each with the reason for its size.

float32 storage carries ~6e-8 relative error per value; derived products (range from
camera_z) compare two independently rounded float32 values.
"""

Z_RANGE_REL_TOL = 1e-6          # 16x float32 epsilon: both stored values rounded once
Z_RANGE_ABS_TOL = 1e-6          # m
NORMAL_UNIT_TOL = 1e-4          # | |n| - 1 |; float32 components renormalised before storage
GEOMETRIC_FACING_TOL = 1e-4     # n_g . ray_dir must be <= this (Cycles flips normals toward the ray)
RIGID_TOL = 1e-6                # orthonormality of stored poses
# Label-vs-exact-reference thresholds (measured by the exporter, recorded in the manifest).
# 1 mm range and 1 px silhouette: below a 2 m/s pedestrian's motion in one 0.5 ms readout step.
VERIFY_MAX_RANGE_ERROR_M = 1e-3
VERIFY_MAX_SILHOUETTE_ERROR_PX = 1.0
# Deformation between Cycles' motion steps (linear per vertex) vs the exactly evaluated mesh: the exporter
# raises an object's motion_steps until its worst vertex error is within both (1 mm: VERIFY_MAX_RANGE_ERROR_M).
DEFORM_MAX_ERROR_M = 1e-3
DEFORM_MAX_ERROR_PX = 0.1

# LiDAR
LIDAR_RANGE_TOL_M = 2e-5            # |range - |p_world - origin||: float32 world hits near 100 m carry ~8e-6 m
LIDAR_LATERAL_TOL_M = 2e-4          # distance of a return from its beam-table line: float32 OSL angles
                                    # (~5e-7 rad x 120 m) + float32 hit positions (~2e-5 m on 300 m triangles)
LIDAR_POINT_TOL_M = 1e-6            # point table vs its own world point and pose (float64 arithmetic)
COS_INCIDENCE_TOL = 1e-5
VERIFY_MAX_ID_MISMATCH_FRACTION = 0.01   # beams grazing an edge may hit the neighbour in the BVH cast

# LiDAR <-> camera: a static return projected into the camera row whose time matches
LIDAR_CAMERA_MAX_SKEW_NS = 1_000_000     # pair a return with a camera row at most 1 ms apart
LIDAR_CAMERA_Z_ABS_TOL_M = 5e-3          # inverse-depth interpolation between pixel centres on planar faces
LIDAR_CAMERA_Z_REL_TOL = 1e-3            # + neighbouring rows' poses differ by one row period of motion

# Flow
FLOW_DEPTH_TEST_ABS_M = 0.02        # dest_visible depth test: inverse-depth interpolation across a pixel on
FLOW_DEPTH_TEST_REL = 0.01          # slanted faces, not occluders (those show another object id)
FLOW_CYCLE_TOL_PX = 0.1             # forward then backward (bilinear) returns within 0.1 px where both visible
FLOW_CYCLE_KINK_PX = 0.02           # a forward flow second difference above this is a fold (hinge, triangle edge):
FLOW_CYCLE_KINK_REACH_PX = 2        # pixels within this reach of a fold are not round-trip compared
FLOW_REPROJECTION_TOL_PX = 1e-3     # flow = projection of (source point + scene flow) at the landing row
FLOW_SCENE_FLOW_TOL_M = 1e-4        # scene flow consistency (float32 storage of metres-scale vectors)

# State log (rowbeam/model/state_log.py): 200 Hz samples, lerp + slerp between them
STATE_LOG_POSE_TOL_M = 1e-4             # chord error of curved motion between samples (a*dt^2/8) + float32 poses
STATE_LOG_ROTATION_TOL_RAD = 1e-4
STATE_LOG_VELOCITY_TOL_MPS = 1e-2       # central differences of float32 matrix_world over +-2 ms, lerp between samples
# IMU truth vs the state log differentiated on its own (logged angular velocity; central differences of logged
# velocity over +-1 sample): absolute + relative part, plus for specific force the float32 roundoff of the logged
# positions |p| * eps32 carried through both differences (IMU_LOG_ROUNDOFF_GAIN = 2 / (2h_v * 2h_log), 1/s^2)
IMU_LOG_ANGULAR_VELOCITY_TOL_RAD_S = 2e-3
IMU_LOG_FORCE_TOL_MPS2 = 0.05
IMU_LOG_RELATIVE_TOL = 0.02
IMU_LOG_ROUNDOFF_GAIN = 5e4
IMU_POSE_RATE_TOL_RAD_S = 2e-3          # angular velocity vs consecutive sample poses (trapezoid), + relative 2 %
# IMU truth vs central differences (step h) of Blender's float32 matrix_world at export (warn above): absolute +
# relative, + the roundoff of positions |p| * eps32 through the second difference (4 / h^2 with h = 10 ms: 4e4 / s^2)
IMU_VERIFY_ANGULAR_VELOCITY_TOL_RAD_S = 2e-3
IMU_VERIFY_FORCE_TOL_MPS2 = 0.05
IMU_VERIFY_RELATIVE_TOL = 0.05
IMU_VERIFY_ROUNDOFF_GAIN = 4e4
IMU_NOISE_REPRODUCTION_TOL = 1e-9       # measured channel regenerated from the recorded seed (relative to scale)
RADAR_LIDAR_PLANE_TOL_M = 1e-3          # radar return vs the LiDAR's tangent plane on one static face (both refined)

# Labels vs what the rgb render sees (check label_coverage; rgb_coverage = Cycles Mist pass as 1 - transmittance)
COVERAGE_FULL = 1.0 - 1e-3      # rgb coverage at or above: every rgb sample of the pixel met a surface (float sums of
COVERAGE_EMPTY = 1e-3           # filter weights round ~1e-7); at or below: none did
COVERAGE_EDGE_PX = 1            # + the rgb pixel filter's half width: a pixel is judged only when its whole
                                # neighbourhood of this radius is fully covered (or empty) in the rgb

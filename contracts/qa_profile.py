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

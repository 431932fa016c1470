"""One-way adapters from a rowbeam bundle to external formats. Each writes its output plus a
`rowbeam/adapter_sidecar@1` JSON listing what the format loses and the largest rounding error.

- lidar_formats: KITTI velodyne .bin and PLY point clouds from LiDAR events
- coco: COCO instances JSON (modal masks as RLE) from camera events with object labels
- bop: BOP scene folder (scene_camera, scene_gt, scene_gt_info, depth, rgb, masks, models)
- kitti_object: KITTI object label_2 + calib
Flow formats (.flo, KITTI flow PNG, PFM) live in rowbeam.adapters.flow_formats.
"""

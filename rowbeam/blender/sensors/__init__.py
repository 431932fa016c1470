"""Per sensor type: render one event in Blender and derive its labels (camera, spinning LiDAR, radar)."""

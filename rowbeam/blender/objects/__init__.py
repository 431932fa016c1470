"""Object identity and object-level labels (masks, boxes, poses, assets) of camera events."""

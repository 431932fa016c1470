"""Optical flow and scene flow between two camera events: material points, mesh motion, flow math."""

"""The checker (no Blender): every executable contract a bundle is proved against."""

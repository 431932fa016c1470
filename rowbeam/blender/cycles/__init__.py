"""Cycles: render setup, the shutter model that maps timed rows onto Cycles, OSL custom cameras (lenses)."""

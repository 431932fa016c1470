"""A sample's identity and what is derived from it deterministically (the RGB noise seed).

sample_id = "<scenario>.<sensor id>.<reference time ns>": unique per event of a dataset, stable
across re-exports, independent of folder names. The RGB render's Cycles seed is a hash of it, so
consecutive events get independent noise and a re-export reproduces the same pixels.
"""
from __future__ import annotations

import hashlib
import re

RGB_SEED_RULE = "rowbeam.rgb_seed@1: first 4 bytes (little-endian) of sha256('rowbeam.rgb_seed@1:' + sample_id) & 0x7fffffff"


def token_from_name(name: str) -> str:
    """A scenario token (the rig schema's `token`: 1-64 of [A-Za-z0-9_.-], starting with a letter or digit)
    made from a free-form name such as a .blend file's stem: other characters become '_'."""
    token = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip("_.-")[:64]
    return token or "untitled"


def sample_id(scenario: str, sensor_id: str, reference_time_ns: int) -> str:
    return f"{scenario}.{sensor_id}.{int(reference_time_ns)}"


def rgb_seed(sample: str) -> int:
    """Cycles seed (0 .. 2^31-1, Cycles' hard range) of the RGB render of `sample`."""
    digest = hashlib.sha256(f"rowbeam.rgb_seed@1:{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF

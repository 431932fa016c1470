"""Reading exported events in tests."""
from __future__ import annotations

import json
from pathlib import Path

from contracts.arrays import decode_payload


def load_event(event_dir) -> tuple[dict, dict]:
    """(manifest, {modality: array}) of one published event folder."""
    event_dir = Path(event_dir)
    manifest = json.loads((event_dir / "manifest.json").read_text())
    arrays = {name: decode_payload(event_dir / e["uri"], e) for name, e in manifest["modalities"].items()}
    return manifest, arrays

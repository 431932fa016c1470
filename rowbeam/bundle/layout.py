"""The folders of a bundle: events/<sensor>/<index:06d>/ and flows/<sensor>/<i0:06d>-<i1:06d>/, each holding a
manifest.json, beside bundle.json; what a reader could take for data but is not well-formed, and hidden litter."""
from __future__ import annotations

import os
import re
from pathlib import Path

from rowbeam.bundle.files import STAGING_DIR, is_inside

MANIFEST = "manifest.json"
BUNDLE = "bundle.json"
EVENT_FOLDER = re.compile(r"^[0-9]+$")
FLOW_FOLDER = re.compile(r"^([0-9]+)-([0-9]+)$")


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def scan_layout(root: Path) -> tuple[list[Path], list[str], list[str]]:
    """(manifests, problems, litter) of a bundle's events/ and flows/: problems are entries a reader could
    take for data but that are not well-formed event or flow folders; litter are hidden entries."""
    manifests, problems, litter = [], [], []
    for top, pattern, kind in (("events", EVENT_FOLDER, "event"), ("flows", FLOW_FOLDER, "flow")):
        base = root / top
        if not _exists(base):
            continue
        if not base.is_dir():
            problems.append(f"{top} is not a folder")
            continue
        for sensor in sorted(base.iterdir()):
            rel = f"{top}/{sensor.name}"
            if sensor.name.startswith("."):
                litter.append(rel)
                continue
            if not sensor.is_dir() or not is_inside(root, sensor):
                problems.append(f"{rel} is not a sensor folder inside the bundle")
                continue
            for item in sorted(sensor.iterdir()):
                rel = f"{top}/{sensor.name}/{item.name}"
                if item.name.startswith("."):
                    litter.append(rel)
                elif not is_inside(root, item):
                    problems.append(f"{rel} resolves outside the bundle (a link); not read")
                elif not pattern.match(item.name) or not item.is_dir():
                    problems.append(f"{rel} is not a{'n' if kind == 'event' else ''} {kind} folder "
                                    f"({'<index:06d>' if kind == 'event' else '<i0:06d>-<i1:06d>'})")
                elif not _exists(item / MANIFEST):
                    problems.append(f"{rel} looks like a{'n' if kind == 'event' else ''} {kind} but holds no {MANIFEST}")
                else:
                    manifests.append(item / MANIFEST)
    staging = root / STAGING_DIR
    if staging.is_dir() and any(not q.is_dir() for q in staging.rglob("*")):
        litter.append(".staging (an export is running or was interrupted)")
    litter += sorted(p.name for p in root.glob(f".{BUNDLE}.tmp-*"))
    return manifests, problems, litter

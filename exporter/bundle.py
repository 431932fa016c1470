"""Output folder management: dataset identity, staging, atomic publish, quarantine, resume.

Layout:  OUT/bundle.json                               dataset identity (rowbeam/bundle@1)
         OUT/events/<sensor>/<index:06d>/              manifest.json, payloads, qa_report.json
         OUT/flows/<sensor>/<index0:06d>-<index1:06d>/ flow between two camera events (rowbeam/flow@1)
         OUT/quarantine/events|flows/...               what failed a hard QA check, with its evidence
         OUT/.staging/                                 folders being written (never referenced)
An event folder appears by one directory rename after every payload and its manifest are
fsynced, so an interrupted run never leaves a manifest pointing at a partial payload.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from contracts.errors import RowbeamError
from contracts.files import atomic_write_json, canonical_json, fsync_path, resolve_inside, sha256_file
from contracts.schema import schema_errors

BUNDLE_FILE = "bundle.json"
LAYOUT = "events/<sensor>/<index:06d>/manifest.json; flows/<sensor>/<index0:06d>-<index1:06d>/manifest.json"


def event_location(sensor_id: str, index: int) -> str:
    return f"events/{sensor_id}/{index:06d}"


def flow_location(sensor_id: str, i0: int, i1: int) -> str:
    return f"flows/{sensor_id}/{i0:06d}-{i1:06d}"


def dataset_id(identity: dict) -> str:
    return hashlib.sha256(canonical_json(identity)).hexdigest()


class BundleWriter:
    def __init__(self, out_dir, identity: dict, extra: dict | None = None):
        self.root = Path(out_dir)
        self.identity = identity
        self.dataset_id = dataset_id(identity)
        self.extra = extra or {}

    def validate(self) -> None:
        """Refuse a folder that holds something else; creates nothing."""
        if self.root.exists() and not self.root.is_dir():
            raise RowbeamError(f"--out {self.root}: exists and is not a folder")
        if not self.root.exists() or not any(self.root.iterdir()):
            return
        bundle = self.root / BUNDLE_FILE
        if not bundle.is_file():
            raise RowbeamError(f"--out {self.root}: folder is not empty and holds no {BUNDLE_FILE}; "
                               "choose an empty or new folder")
        try:
            doc = json.loads(bundle.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise RowbeamError(f"{bundle}: not valid JSON; refusing to write into this folder") from None
        if schema_errors(doc, "rowbeam/bundle@1"):
            raise RowbeamError(f"{bundle}: not a rowbeam/bundle@1 document; refusing to write into this folder")
        if doc["dataset_id"] != self.dataset_id:
            diff = [k for k in self.identity if doc["identity"].get(k) != self.identity[k]]
            raise RowbeamError(f"--out {self.root}: holds a different dataset (differs in {', '.join(diff)}); "
                               "choose a new folder")

    def open(self) -> None:
        self.validate()
        self.root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.root / ".staging", ignore_errors=True)
        if not (self.root / BUNDLE_FILE).is_file():
            atomic_write_json(self.root / BUNDLE_FILE, {"schema": "rowbeam/bundle@1", "dataset_id": self.dataset_id,
                                                        "identity": self.identity, "layout": LAYOUT, **self.extra})

    def event_dir(self, sensor_id: str, index: int) -> Path:
        return self.root / event_location(sensor_id, index)

    def flow_dir(self, sensor_id: str, i0: int, i1: int) -> Path:
        return self.root / flow_location(sensor_id, i0, i1)

    def is_complete(self, location: str) -> bool:
        """True when the published folder's manifest is valid and every payload (and endpoint) hash verifies."""
        d = self.root / location
        try:
            manifest = json.loads((d / "manifest.json").read_text())
            if schema_errors(manifest, manifest.get("schema", "")):
                return False
            files = [(resolve_inside(d, m["uri"], self.root), m["sha256"]) for m in manifest["modalities"].values()]
            files += [(resolve_inside(self.root, e["manifest"]), e["manifest_sha256"])
                      for e in manifest.get("endpoints", {}).values()]
            return all(sha256_file(p) == digest for p, digest in files)
        except (OSError, ValueError, KeyError, RowbeamError):
            return False

    def stage(self, location: str) -> Path:
        d = self.root / ".staging" / f"{location.replace('/', '-')}-{os.getpid()}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    def publish(self, staged: Path, location: str, passed: bool) -> Path:
        """Move a fully written, fsynced folder to `location` (or quarantine/`location`) atomically."""
        fsync_path(staged)
        final = self.root / location if passed else self.root / "quarantine" / location
        final.parent.mkdir(parents=True, exist_ok=True)
        for stale in (self.root / location, self.root / "quarantine" / location):
            if stale.exists():
                trash = stale.with_name(f".{stale.name}.old-{os.getpid()}")
                os.replace(stale, trash)
                shutil.rmtree(trash)
        os.replace(staged, final)
        fsync_path(final.parent)
        return final

    def discard_staging(self) -> None:
        shutil.rmtree(self.root / ".staging", ignore_errors=True)

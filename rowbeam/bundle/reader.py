"""One loader for rowbeam bundles: open a bundle, iterate events and flows, read arrays lazily.

    from rowbeam.bundle.reader import Bundle
    bundle = Bundle.open("out/bundle")
    for event in bundle.events(sensor="camera_front"):
        z = event.array("camera_z")          # (H, W) float32, metres, sha256 verified on first read
        ids = event.array("instance_id")     # (H, W) uint32 render indices; event.objects maps them
    for flow in bundle.flows():
        f = flow.array("flow_forward")       # (H, W, 2) float32 px; flow.source / flow.destination are Events

Every array comes from `read_payload` (uri kept inside the bundle, size and sha256 checked when
`verify`, decoded with the declared dtype and shape); the checker, the flow exporter, the adapters
and the tests read through it. Arrays are cached per Event/Flow object after their first read.
Nothing here imports bpy.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rowbeam.bundle.arrays import decode_exr_planes, decode_payload
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import is_inside, load_json, regular_file, resolve_inside, sha256_file

MANIFEST = "manifest.json"
BUNDLE_JSON = "bundle.json"
_EVENT_FOLDER = re.compile(r"^[0-9]+$")
_FLOW_FOLDER = re.compile(r"^([0-9]+)-([0-9]+)$")


def payload_path(folder, entry: dict, root=None, verify: bool = True) -> Path:
    """The file of one manifest modality entry of the document in `folder`: its uri resolved inside `root` (default
    `folder`), existing, and with `verify` of the entry's `bytes` and sha256. Every failure is one RowbeamError."""
    uri = entry["uri"]
    path = resolve_inside(folder, uri, root)
    if not os.path.lexists(path):
        raise RowbeamError(f"payload file {uri!r} does not exist")
    if verify:
        size = regular_file(path).st_size
        if "bytes" in entry and size != entry["bytes"]:
            raise RowbeamError(f"{uri}: sha256 does not match the manifest: {size} bytes, manifest declares "
                               f"{entry['bytes']} (truncated?)")
        digest = sha256_file(path)
        if digest != entry["sha256"]:
            raise RowbeamError(f"{uri}: sha256 does not match the manifest ({digest[:12]}…, declared "
                               f"{entry['sha256'][:12]}…)")
    return path


def read_payload(folder, entry: dict, root=None, verify: bool = True, planes: bool = False):
    """Decode one manifest modality entry of the document in `folder` into its declared array.

    The uri must resolve inside `root` (default `folder`); with `verify`, the file's size and sha256
    must equal the entry's `bytes`/`sha256`. The decoded dtype (rowbeam.bundle.arrays) and shape must match
    the entry. Every failure is one RowbeamError naming the uri.
    planes: a multi-channel OpenEXR image is returned as its list of (H, W) channel planes (declared order, shape
    checked as the stacked (H, W, C)); np.stack(planes, axis=-1) is the array read_payload returns without it.
    """
    uri = entry["uri"]
    path = payload_path(folder, entry, root, verify)
    if planes and entry["format"] == "openexr" and len(entry["channels"]) > 1:
        value = decode_exr_planes(path, entry["channels"], entry["dtype"], entry.get("shape"), entry.get("storage"))
        if any(p.shape != value[0].shape for p in value):
            raise RowbeamError(f"{uri}: channels of different sizes {[list(p.shape) for p in value]}")
        shape = [*value[0].shape, len(value)]
    else:
        value = decode_payload(path, entry)
        shape = list(value.shape)
    if "shape" in entry and shape != list(entry["shape"]):
        raise RowbeamError(f"{uri}: decoded shape {shape}, manifest declares {entry['shape']}")
    return value


class _Document:
    """A folder holding manifest.json and payloads: lazy manifest, cached arrays."""

    def __init__(self, path, root=None, manifest: dict | None = None, preloaded: dict | None = None):
        self.path = Path(path)
        self.root = Path(root) if root is not None else self.path
        self._manifest = manifest
        self._arrays: dict[tuple[str, bool], np.ndarray] = {}
        self._preloaded = preloaded       # {resolved folder: {name: array}} already read with sha256 verified

    def _adopt(self, name: str) -> bool:
        """Take `name` from the preloaded arrays (shared with the Bundle, e.g. the checker's), as sha256 verified."""
        if not self._preloaded:
            return False
        arrays = self._preloaded.get(self.path.resolve())
        if arrays is None or name not in arrays:
            return False
        self._arrays[(name, True)] = arrays[name]
        return True

    @property
    def manifest(self) -> dict:
        """The parsed manifest.json (bounded JSON reader; read once)."""
        if self._manifest is None:
            doc = load_json(self.path / MANIFEST, "manifest")
            if not isinstance(doc, dict) or not isinstance(doc.get("modalities"), dict):
                raise RowbeamError(f"{self.path / MANIFEST}: not a rowbeam manifest (no modalities)")
            self._manifest = doc
        return self._manifest

    @property
    def names(self) -> list[str]:
        """Modality names declared by the manifest."""
        return list(self.manifest["modalities"])

    def entry(self, name: str) -> dict:
        try:
            return self.manifest["modalities"][name]
        except KeyError:
            raise RowbeamError(f"{self.path / MANIFEST}: no modality {name!r} (has {', '.join(self.names)})") from None

    def array(self, name: str, verify: bool = True) -> np.ndarray:
        """The decoded array of modality `name` (declared dtype and shape; sha256 checked when `verify`)."""
        key = (name, verify)
        if key not in self._arrays and ((name, True) in self._arrays or self._adopt(name)):
            return self._arrays[(name, True)]
        if key not in self._arrays:
            self._arrays[key] = read_payload(self.path, self.entry(name), self.root, verify)
        return self._arrays[key]

    def arrays(self, names=None, verify: bool = True) -> dict[str, np.ndarray]:
        """{name: array} for `names` (default: every declared modality)."""
        return {n: self.array(n, verify) for n in (self.names if names is None else names)}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"


class Event(_Document):
    """One published event folder events/<sensor>/<index:06d>/ (camera or LiDAR)."""

    @property
    def sample_id(self) -> str:
        return self.manifest["sample_id"]

    @property
    def sensor(self) -> str:
        return self.manifest["sensor"]["id"]

    @property
    def sensor_type(self) -> str:
        """'rolling_shutter_camera' or 'spinning_lidar'."""
        return self.manifest["sensor"]["type"]

    @property
    def index(self) -> int:
        return int(self.manifest["event"]["index"]) if "index" in self.manifest.get("event", {}) else int(self.path.name)

    @property
    def reference_time_ns(self) -> int:
        return int(self.manifest["event"]["reference_time_ns"])

    @property
    def objects(self) -> list[dict]:
        """The object table: render index (instance_id) -> stable 64-bit id, class, semantic id."""
        return list(self.manifest.get("objects", []))

    @property
    def object_labels(self) -> list[dict]:
        """Per-object labels (amodal counts, boxes, poses) when the camera exported them, else []."""
        return list((self.manifest.get("object_labels") or {}).get("objects", []))

    def amodal_mask(self, label: dict, verify: bool = True) -> np.ndarray | None:
        """(H, W) bool amodal mask inside the image of one object_labels entry (None when not in the image)."""
        i = label.get("mask_index")
        if i is None:
            return None
        packed = self.array("amodal_masks", verify)
        W = int(self.manifest["calibration"]["image_size_px"][0])
        return np.unpackbits(packed[i], axis=-1, count=W).astype(bool)

    def canvas_mask(self, label: dict, verify: bool = True) -> np.ndarray:
        """(3H, 3W) bool amodal silhouette on BOP's 3x canvas (row c, column x <-> v = c - H, u = x - W)."""
        from rowbeam.check.object_checks import object_masks

        W, H = self.manifest["calibration"]["image_size_px"]
        names = [n for n in ("amodal_masks", "amodal_masks_canvas") if n in self.names]
        return object_masks(self.manifest["object_labels"], self.arrays(names, verify), W, H, label)[1]

    def modal_mask(self, label: dict, verify: bool = True) -> np.ndarray:
        """(H, W) bool visible mask of one object: instance_id == its render index."""
        return self.array("instance_id", verify) == np.uint32(label["instance_id"])


class Flow(_Document):
    """One flow folder flows/<sensor>/<i0>-<i1>/ between two camera events of the same bundle."""

    @property
    def flow_id(self) -> str:
        return self.manifest["flow_id"]

    @property
    def sensor(self) -> str:
        return self.manifest["sensor"]["id"]

    def endpoint(self, role: str, verify: bool = True) -> Event:
        """The 'source' or 'destination' Event; with `verify` its manifest must still hash as recorded."""
        ep = self.manifest["endpoints"][role]
        path = resolve_inside(self.root, ep["manifest"])
        if not os.path.lexists(path):
            raise RowbeamError(f"{role} event {ep['manifest']} does not exist")
        if verify and sha256_file(path) != ep["manifest_sha256"]:
            raise RowbeamError(f"{role} event {ep['manifest']} changed since the flow was made (sha256)")
        event = Event(path.parent, self.root, preloaded=self._preloaded)
        if event.manifest.get("sample_id") != ep["sample_id"]:
            raise RowbeamError(f"{role} event {ep['manifest']} is not sample {ep['sample_id']}")
        return event

    @property
    def source(self) -> Event:
        return self.endpoint("source")

    @property
    def destination(self) -> Event:
        return self.endpoint("destination")


class Bundle:
    """A bundle folder (bundle.json, events/, flows/). `Bundle.open(path)` also accepts a folder
    without bundle.json that holds events/ or flows/ (e.g. a copy of part of a bundle)."""

    def __init__(self, path):
        self.path = Path(path)
        self._info = None
        self.preloaded: dict = {}     # {resolved folder: {name: array}} verified elsewhere (check_bundle(keep_arrays=))

    @classmethod
    def open(cls, path) -> Bundle:
        path = Path(path)
        if not path.is_dir():
            raise RowbeamError(f"{path}: not a bundle folder (does not exist or is not a folder)")
        if not any((path / n).exists() for n in (BUNDLE_JSON, "events", "flows")):
            raise RowbeamError(f"{path}: not a bundle folder (no bundle.json, events/ or flows/)")
        return cls(path)

    @property
    def info(self) -> dict:
        """bundle.json ({} when the folder has none)."""
        if self._info is None:
            p = self.path / BUNDLE_JSON
            self._info = load_json(p, "bundle.json") if p.exists() else {}
        return self._info

    def sensors(self) -> list[str]:
        d = self.path / "events"
        return sorted(p.name for p in d.iterdir() if _listed(self.path, p)) if d.is_dir() else []

    def events(self, sensor: str | None = None) -> Iterator[Event]:
        """Published events, sorted by sensor id then index; manifests are read when first used."""
        for s in ([sensor] if sensor else self.sensors()):
            folder = self.path / "events" / s
            if not folder.is_dir():
                raise RowbeamError(f"{self.path}: no events of sensor {s!r} (has {', '.join(self.sensors()) or 'none'})")
            for p in sorted(folder.iterdir()):
                if _EVENT_FOLDER.match(p.name) and _listed(self.path, p) and (p / MANIFEST).exists():
                    yield Event(p, self.path, preloaded=self.preloaded)

    def event(self, sensor: str, index: int) -> Event:
        p = self.path / "events" / sensor / f"{int(index):06d}"
        if not (p / MANIFEST).exists():
            raise RowbeamError(f"{self.path}: no published event {sensor}/{int(index):06d}")
        return Event(p, self.path, preloaded=self.preloaded)

    def flows(self, sensor: str | None = None) -> Iterator[Flow]:
        """Published flow folders, sorted by sensor id then endpoints."""
        root = self.path / "flows"
        if not root.is_dir():
            return
        for s in sorted(p.name for p in root.iterdir() if _listed(self.path, p)):
            if sensor and s != sensor:
                continue
            for p in sorted((root / s).iterdir()):
                if _FLOW_FOLDER.match(p.name) and _listed(self.path, p) and (p / MANIFEST).exists():
                    yield Flow(p, self.path, preloaded=self.preloaded)

    def __repr__(self) -> str:
        return f"Bundle({str(self.path)!r})"


def _listed(root: Path, p: Path) -> bool:
    """A data folder readers list: not hidden (litter, staging), a folder, resolving inside the bundle."""
    return not p.name.startswith(".") and p.is_dir() and is_inside(root, p)


def open_event(path) -> Event:
    """An Event for one event folder (or its manifest.json); its bundle root is found above it when present."""
    path = Path(path)
    if path.name == MANIFEST:
        path = path.parent
    if not (path / MANIFEST).is_file():
        raise RowbeamError(f"{path}: not an event folder (no manifest.json)")
    root = _bundle_root(path)
    return Event(path, root if root is not None else path)


def open_flow(path) -> Flow:
    """A Flow for one flow folder; endpoints resolve against its bundle (flows/<sensor>/<i0>-<i1> -> bundle)."""
    path = Path(path)
    if path.name == MANIFEST:
        path = path.parent
    if not path.is_dir():
        raise RowbeamError(f"{path}: not a flow folder (flows/<sensor>/<i0>-<i1>)")
    root = _bundle_root(path)
    return Flow(path, root if root is not None else path)


def _bundle_root(folder: Path) -> Path | None:
    """events/<sensor>/<i> or flows/<sensor>/<i0>-<i1> -> the bundle folder; None for a loose folder."""
    resolved = folder.resolve()
    if len(resolved.parents) > 2 and resolved.parents[1].name in ("events", "flows"):
        return resolved.parents[2]
    return None

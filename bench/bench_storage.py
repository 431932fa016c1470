"""Bench section `storage` (`make bench ONLY=storage`): bytes per payload and per event for each lossless encoding.

The running example at 1280x720 is exported once and cached under out/bench_storage/ (delete it after changing the
scene, the renderer or the encodings): camera events 30 and 31 with object labels and their flow, LiDAR sweep 10,
radar frame 20, and camera event 30 again without object labels; rgb at RGB (samples per pixel and the rig's rgb
options; rgb noise sets the rgb size: the denoised image compresses better, a plain render's noise less well with
fewer samples). Every payload is then re-encoded here: OpenEXR images with each compression of
rowbeam.bundle.arrays.LOSSLESS_EXR, tables and packed masks as .npy and .npz, each decoded again and compared bit for
bit with the exported array; "before" is the earlier encoding (ZIP EXR, plain .npy), "default" what the exporter
wrote. An event's size is every file of its folder (payloads, manifest.json, qa_report.json) as exported.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "out" / "bench_storage"
RGB = {"rgb_samples": 8, "rgb_denoise": True}            # `make demo`'s samples; the rig's default rgb options
SIZE = (1280, 720)
MB = 1e6


def _export(bundle: Path, blend: Path, rig: Path, sensors: list, first: int, count: int, flow: bool) -> None:
    from rowbeam.blender.export.run import ExportRequest, plan_export, run_export

    run_export(plan_export(ExportRequest(out=bundle, blend=blend, rig=rig, sensors=sensors, first_event=first,
                                         count=count, device="cpu", flow=flow)))


def _bundles() -> tuple[Path, Path]:
    """(bundle with object labels, flow, LiDAR and radar; bundle of camera event 30 without object labels)."""
    from rowbeam.blender.scenes import common, running_example

    tag = f"{SIZE[0]}x{SIZE[1]}_{RGB['rgb_samples']}spp{'_denoised' if RGB['rgb_denoise'] else ''}"
    labels, plain = CACHE / f"bundle_{tag}", CACHE / f"bundle_{tag}_no_object_labels"
    if (labels / "events" / "radar_front").exists() and (plain / "events" / "camera_front").exists():
        return labels, plain
    CACHE.mkdir(parents=True, exist_ok=True)
    blend = CACHE / f"dusk_{tag}.blend"
    running_example.build(*SIZE)
    common.save(blend, running_example.rig(radar=True, state_log=True, object_labels=True, **RGB))
    rig = blend.with_suffix(".rig.json")
    for sensors, first, count, flow in ((["camera_front"], 30, 2, True), (["lidar_top"], 10, 1, False),
                                        (["radar_front"], 20, 1, False)):
        _export(labels, blend, rig, sensors, first, count, flow)
    doc = json.loads(rig.read_text())
    next(s for s in doc["sensors"] if s["id"] == "camera_front")["object_labels"] = False
    plain_rig = CACHE / f"dusk_{tag}_no_object_labels.rig.json"
    plain_rig.write_text(json.dumps(doc))
    _export(plain, blend, plain_rig, ["camera_front"], 30, 1, False)
    return labels, plain


def _encodings(name: str, entry: dict, array: np.ndarray, tmp: Path) -> dict:
    """{encoding: bytes, or None when the decode is not bit-identical} of one payload."""
    from rowbeam.bundle import arrays as codecs

    sizes = {}
    if entry["format"] == "openexr":
        for compression in codecs.LOSSLESS_EXR:
            path = tmp / f"{name}_{compression}.exr"
            storage = codecs.write_exr(path, array, entry["channels"], entry["dtype"],
                                       encoding={"compression": compression})
            back = codecs.decode_exr(path, entry["channels"], entry["dtype"], storage=storage)
            sizes[compression] = path.stat().st_size if _same(back, array) else None
        return sizes
    for fmt, write, read in (("npy", codecs.write_npy, lambda p: np.load(p)),
                             ("npz", codecs.write_npz, lambda p: np.load(p)["array"])):
        path = tmp / f"{name}.{fmt}"
        write(path, array)
        sizes[fmt] = path.stat().st_size if _same(read(path), array) else None
    return sizes


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit: dtype, shape and bytes (NaN payloads and -0 included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _folder(doc, tmp: Path, flow: bool = False) -> dict:
    """One event or flow folder: each payload's size per encoding, the exported encoding and the folder's bytes."""
    rows = {}
    for name in doc.names:
        entry, array = doc.entry(name), doc.array(name)
        sizes = _encodings(name, entry, array, tmp)
        exported = entry["storage"].get("compression", entry["format"]) if entry["format"] == "openexr" \
            else entry["format"]
        rows[name] = {"sizes": sizes, "before": sizes["ZIP" if entry["format"] == "openexr" else "npy"],
                      "default_encoding": exported, "default": (doc.path / entry["uri"]).stat().st_size,
                      "lossless": sizes.get(exported) is not None}
    files = {p.name: p.stat().st_size for p in doc.path.iterdir() if p.is_file()}
    uris = {doc.entry(n)["uri"] for n in doc.names}
    other = sum(b for f, b in files.items() if f not in uris)            # manifest.json, qa_report.json
    kind = "flow" if flow else doc.manifest["sensor"]["type"]
    return {"kind": kind, "payloads": rows, "other_bytes": other,
            "event_bytes": sum(files.values())}


def storage_benchmark(work: Path, repeat: int = 1) -> dict:
    """{"folders": {"SENSOR/EVENT": _folder}, "no_object_labels": _folder, "rgb_half_bytes", "rgb": RGB}."""
    from rowbeam.bundle.arrays import write_exr
    from rowbeam.bundle.reader import Bundle

    labels, plain = _bundles()
    bundle = Bundle.open(labels)
    out = {"folders": {}, "rgb": dict(RGB), "size": list(SIZE)}
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        for doc, flow in [*((d, False) for d in bundle.events()), *((d, True) for d in bundle.flows())]:
            out["folders"][f"{doc.path.parent.name}/{doc.path.name}"] = _folder(doc, Path(tmp), flow)
        cam = next(Bundle.open(plain).events(sensor="camera_front"))
        out["no_object_labels"] = _folder(cam, Path(tmp))
        half = Path(tmp) / "rgb_half.exr"
        write_exr(half, cam.array("rgb"), ["R", "G", "B"], "float32",
                  encoding={"compression": "HTJ2K256", "pixel_type": "HALF"})
        out["rgb_half_bytes"] = half.stat().st_size
    return out


def _total(folder: dict, which: str) -> float:
    """MB of an event folder with every payload in encoding `which` ("before", "default", "best")."""
    def size(row):
        return min(b for b in row["sizes"].values() if b is not None) if which == "best" else row[which]
    return (sum(size(r) for r in folder["payloads"].values()) + folder["other_bytes"]) / MB


def _smallest(row: dict) -> str:
    """'NAME x.xx MB' of a payload's three smallest bit-identical encodings."""
    sizes = sorted((b, enc) for enc, b in row["sizes"].items() if b is not None)[:3]
    return ", ".join(f"{enc} {b / MB:.2f} MB" for b, enc in sizes)


def print_storage(r: dict, figure) -> None:
    """Print the table and record each payload's figure and the per-event totals (figure: bench.figure)."""
    rgb = f"rgb {r['rgb']['rgb_samples']} spp{' denoised' if r['rgb']['rgb_denoise'] else ''}"
    print(f"storage, running example {r['size'][0]}x{r['size'][1]} ({rgb}): bytes per payload, each lossless "
          "encoding (kB; '!' = not bit-identical, never chosen)")
    folders = {**r["folders"], "camera_front/000030 without object labels": r["no_object_labels"]}
    recorded = set()                      # one folder of each kind in the figures; all of them in the printout
    for key, folder in folders.items():
        print(f"  {key} ({folder['kind']}): {folder['event_bytes'] / MB:.2f} MB")
        record = folder["kind"] not in recorded
        recorded.add(folder["kind"])
        if record:
            figure(f"bytes {key} ({folder['kind']}), every file", folder["event_bytes"] / MB, "MB", None,
                   f"before {_total(folder, 'before'):.2f} MB")
        for name, row in folder["payloads"].items():
            cells = ", ".join(f"{enc} {'!' if b is None else f'{b / 1e3:.0f}'}" for enc, b in row["sizes"].items())
            print(f"    {name:28s} before {row['before'] / 1e3:9.1f} kB  default {row['default_encoding']:9s} "
                  f"{row['default'] / 1e3:9.1f} kB   [{cells}]")
            if record:
                figure(f"bytes {folder['kind']}:{name}", row["default"] / MB, "MB", None,
                       f"before {row['before'] / MB:.3f} MB; default {row['default_encoding']}; {cells} (kB)")
    lossless = all(row["lossless"] for f in folders.values() for row in f["payloads"].values())
    figure("storage: every payload of every modality decodes bit-identical in its default encoding",
           float(lossless), "", ">= 1", f"{sum(len(f['payloads']) for f in folders.values())} payloads, "
           f"{len(folders)} folders")
    cam = r["folders"]["camera_front/000030"]
    for folder, what, bound in ((cam, "with", 8), (r["no_object_labels"], "without", 7)):
        rgb_mb = folder["payloads"]["rgb"]["default"] / MB
        half = folder["event_bytes"] / MB - rgb_mb + r["rgb_half_bytes"] / MB
        figure(f"{r['size'][0]}x{r['size'][1]} camera event {what} object labels ({rgb}), every file",
               folder["event_bytes"] / MB, "MB", f"<= {bound}",
               f"before {_total(folder, 'before'):.2f} MB; smallest lossless per payload {_total(folder, 'best'):.2f} "
               f"MB; of which rgb float32 {rgb_mb:.2f} MB, manifest+qa {folder['other_bytes'] / MB:.2f} MB; "
               f"rgb as declared lossy half instead: {half:.2f} MB" + (
                   "" if folder["event_bytes"] / MB <= bound else "; why not met: the rgb's float32 mantissa carries "
                   "render noise no lossless coder removes (its smallest lossless encodings: "
                   f"{_smallest(folder['payloads']['rgb'])})"))
    figure(f"rgb as declared lossy half (HTJ2K256), {rgb}", r["rgb_half_bytes"] / MB, "MB", None,
           f"float32 lossless {r['no_object_labels']['payloads']['rgb']['default'] / MB:.2f} MB")

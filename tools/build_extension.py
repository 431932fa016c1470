"""Build the rowbeam Blender extension: dist/rowbeam-<version>.zip, validated by Blender's own CLI.

    python tools/build_extension.py [--platforms linux-x64,...] [--out dist]

Stages build/extension/ with the add-on (addon/*.py at the zip root), the manifest (wheels list
filled in) and wheels/: rowbeam's contracts + exporter packaged as a pure wheel (with the git
revision it was built from), plus OpenEXR, jsonschema and their dependencies downloaded from PyPI
for each platform and each Python Blender embeds (PYTHONS: 3.11 in Blender 4.2-5.0, 3.13 from 5.1).
Blender derives the extension's Python versions from the wheel tags and installs only the wheels
matching its own platform and Python. numpy comes with Blender.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import io
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
CACHE = BUILD / "wheel-cache"
PYTHONS = ("3.11", "3.13")                  # every Python a supported Blender embeds (rowbeam/blender/compat/blender_compat.py)
PURE = ["jsonschema==4.26.0", "jsonschema-specifications==2025.9.1", "referencing==0.37.0", "attrs==26.1.0",
        "typing-extensions==4.16.0"]
BINARY = ["OpenEXR==3.5.3", "rpds-py==2026.9.1"]
PLATFORM_TAGS = {
    "linux-x64": ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"],
    "linux-arm64": ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"],
    "windows-x64": ["win_amd64"],
    "windows-arm64": ["win_arm64"],
    "macos-arm64": ["macosx_11_0_arm64", "macosx_12_0_arm64", "macosx_13_0_arm64", "macosx_14_0_arm64"],
    "macos-x64": [f"macosx_10_{m}_x86_64" for m in (9, 12, 13, 14, 15)] + ["macosx_11_0_x86_64"],
}


def blender_ext() -> Path:
    """blender_ext.py of the bpy wheel this Python has (bpy/<major.minor>/scripts/addons_core/bl_pkg/cli/)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec("bpy")
    found = sorted(Path(spec.origin).parent.glob("*/scripts/addons_core/bl_pkg/cli/blender_ext.py")) if spec else []
    if not found:
        sys.exit("build_extension: error: this Python has no bpy wheel (blender_ext.py validates the extension)")
    return found[-1]


def version() -> str:
    return re.search(r'^version = "([^"]+)"', (REPO / "blender_manifest.toml").read_text(), re.M).group(1)


def git_revision() -> str:
    sys.path.insert(0, str(REPO))
    from rowbeam.blender.compat.blend_io import git_revision as rev  # noqa: PLC0415  (same code the exporter runs)
    return rev()


def core_dependencies() -> list[str]:
    """What the checker needs (pyproject.toml [project].dependencies), declared by the bundled core wheel."""
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_core_wheel(out_dir: Path) -> Path:
    """Pure wheel of the `rowbeam` package (schemas and ontologies included)."""
    name, ver = "rowbeam_core", version()
    dist = f"{name}-{ver}.dist-info"
    files = {}
    for package in ("rowbeam",):
        for path in sorted((REPO / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".json"):
                files[path.relative_to(REPO).as_posix()] = path.read_bytes()
    files["rowbeam/_build_info.py"] = f'GIT_REVISION = "{git_revision()}"\n'.encode()
    requires = "".join(f"Requires-Dist: {d}\n" for d in core_dependencies())
    files[f"{dist}/METADATA"] = (f"Metadata-Version: 2.1\nName: rowbeam-core\nVersion: {ver}\n"
                                 "Summary: rowbeam (bundled in the Blender extension)\n"
                                 f"Requires-Python: >=3.11\n{requires}").encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: rowbeam build_extension\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in files.items()) + f"{dist}/RECORD,,\n"
    files[f"{dist}/RECORD"] = record.encode()
    target = out_dir / f"{name}-{ver}-py3-none-any.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    target.write_bytes(buf.getvalue())
    return target


def download(requirements: list[str], dest: Path, platform_tags: list[str] | None, python: str = "3.11") -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    if platform_tags:
        abi = "cp" + python.replace(".", "")
        cmd += ["--python-version", python, "--implementation", "cp", "--abi", abi]
        for tag in platform_tags:
            cmd += ["--platform", tag]
    subprocess.run(cmd + requirements, check=True)


def collect_wheels(platforms: list[str], wheel_dir: Path) -> list[str]:
    """Download (cached) and copy the wheels; returns the platforms every binary wheel exists for, for
    every Python in PYTHONS."""
    download(PURE, CACHE / "pure", None)
    supported = []
    for plat in platforms:
        dirs = [CACHE / plat / ("cp" + py.replace(".", "")) for py in PYTHONS]
        try:
            for py, d in zip(PYTHONS, dirs, strict=True):
                download(BINARY, d, PLATFORM_TAGS[plat], py)
        except subprocess.CalledProcessError:
            print(f"build_extension: no wheels of {BINARY} for {plat} (Python {', '.join(PYTHONS)}); "
                  "platform left out", file=sys.stderr)
            continue
        supported.append(plat)
        for whl in (w for d in dirs for w in d.glob("*.whl")):
            shutil.copy2(whl, wheel_dir)
    for whl in (CACHE / "pure").glob("*.whl"):
        shutil.copy2(whl, wheel_dir)
    return supported


def stage(platforms: list[str]) -> Path:
    src = BUILD / "extension"
    shutil.rmtree(src, ignore_errors=True)
    (src / "wheels").mkdir(parents=True)
    for path in (REPO / "addon").glob("*.py"):
        shutil.copy2(path, src / path.name)
    build_core_wheel(src / "wheels")
    supported = collect_wheels(platforms, src / "wheels")
    wheels = ", ".join(f'"./wheels/{w.name}"' for w in sorted((src / "wheels").glob("*.whl")))
    manifest = (REPO / "blender_manifest.toml").read_text()
    manifest = re.sub(r"^wheels = \[\]", f"wheels = [{wheels}]", manifest, flags=re.M)
    manifest = re.sub(r"^platforms = \[.*\]", "platforms = [" + ", ".join(f'"{p}"' for p in supported) + "]",
                      manifest, flags=re.M)
    (src / "blender_manifest.toml").write_text(manifest)
    return src


def build(platforms: list[str], out_dir: Path) -> Path:
    src = stage(platforms)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"rowbeam-{version()}.zip"
    subprocess.run([sys.executable, str(blender_ext()), "build", "--source-dir", str(src),
                    "--output-filepath", str(target)], check=True)
    subprocess.run([sys.executable, str(blender_ext()), "validate", str(target)], check=True)
    return target


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--platforms", default=",".join(PLATFORM_TAGS))
    p.add_argument("--out", default=str(REPO / "dist"))
    args = p.parse_args()
    target = build([x for x in args.platforms.split(",") if x], Path(args.out))
    print(f"extension: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

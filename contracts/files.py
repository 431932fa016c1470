"""Bundle file primitives: content hashes, atomic writes, and paths that cannot escape."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath

from .errors import RowbeamError

CHUNK = 1 << 20


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fsync_path(path) -> None:
    """Flush a file's (or a directory's) contents to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path, data: bytes) -> None:
    """Write to a temporary sibling, fsync, then rename over `path` (never half-written)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)


def canonical_json(document) -> bytes:
    """Deterministic JSON text: sorted keys, no NaN, newline-terminated."""
    return (json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def atomic_write_json(path, document) -> None:
    atomic_write_bytes(path, canonical_json(document))


def resolve_inside(base, uri: str, root=None) -> Path:
    """Resolve a manifest uri against `base`; refuse absolute paths, '..' and escapes of `root`.

    Symbolic links are followed before the containment test, so a link cannot smuggle a path out.
    """
    p = PurePosixPath(uri)
    if not uri or p.is_absolute() or ".." in p.parts or "\\" in uri or ":" in uri:
        raise RowbeamError(f"uri {uri!r} is not a relative path inside the bundle")
    root = Path(root if root is not None else base).resolve()
    target = (Path(base) / p).resolve()
    if target != root and root not in target.parents:
        raise RowbeamError(f"uri {uri!r} resolves outside the bundle ({target})")
    return target

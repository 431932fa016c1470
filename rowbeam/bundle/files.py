"""Bundle file primitives: content hashes, atomic writes, and paths that cannot escape."""
from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from pathlib import Path, PurePosixPath

from rowbeam.util.errors import RowbeamError

CHUNK = 1 << 20
MAX_JSON_BYTES = 64 << 20      # largest manifest / bundle.json read (bytes); nesting: schema.MAX_JSON_DEPTH

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_file(path) -> os.stat_result:
    """os.stat of `path` (links followed) if it is a regular file; else RowbeamError saying what it is.
    Never opens the path, so a FIFO or a device cannot block or be triggered."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise RowbeamError(f"{path}: does not exist") from None
    except OSError as exc:
        raise RowbeamError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise RowbeamError(f"{path}: is {_kind(st.st_mode)}, not a regular file; refusing to open it")
    return st


def open_regular(path):
    """Open a regular file for binary reading; anything else is refused before it is opened
    (and again on the open descriptor, in case the path was swapped in between)."""
    regular_file(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise RowbeamError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise RowbeamError(f"{path}: is not a regular file; refusing to read it")
    return f


def sha256_file(path) -> str:
    """sha256 (hex) of a regular file's bytes; RowbeamError for a missing or special file."""
    h = hashlib.sha256()
    with open_regular(path) as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def load_json(path, what: str = "JSON document", max_bytes: int = MAX_JSON_BYTES):
    """Parse a JSON file with bounds: a regular file (a FIFO or a device is never opened), at most
    `max_bytes`, then rowbeam.bundle.schema.loads_user_json (nesting at most MAX_JSON_DEPTH, finite numbers
    only). Every failure is one RowbeamError line naming the file."""
    from rowbeam.bundle.schema import loads_user_json

    st = regular_file(path)
    limit = f"{max_bytes / (1 << 20):g} MiB"
    if st.st_size > max_bytes:
        raise RowbeamError(f"{path}: {st.st_size} bytes; a {what} may hold at most {limit}")
    with open_regular(path) as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise RowbeamError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise RowbeamError(f"{path}: more than {limit}; a {what} may hold at most {limit}")
    return loads_user_json(data, str(path), what)


def fsync_path(path) -> None:
    """Flush a file's (or a directory's) contents to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


STAGING_DIR = ".staging"    # folders being written by exporters (never data; see rowbeam/blender/export/bundle.py)


def temp_sibling(path) -> Path:
    """The temporary name atomic writes use beside `path`: `.NAME.tmp-PID` (a reader skips hidden names)."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def atomic_write_bytes(path, data: bytes) -> None:
    """Write to a temporary sibling, fsync, then rename over `path` (never half-written).
    On any failure the temporary file is removed and the error (OSError) propagates."""
    path = Path(path)
    tmp = temp_sibling(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_path(path.parent)


def canonical_json(document) -> bytes:
    """Deterministic JSON text: sorted keys, no NaN, newline-terminated."""
    return (json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def canonical_sha256(document) -> str:
    """sha256 (hex) of canonical_json(document): a bundle's dataset_id (of its identity) and rig_sha256."""
    return hashlib.sha256(canonical_json(document)).hexdigest()


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


def is_inside(root, path) -> bool:
    """True when `path` (a path under `root`, links followed) resolves inside `root` (resolve_inside's rule)."""
    try:
        rel = Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(root))).as_posix()
        resolve_inside(root, rel)
    except (ValueError, RowbeamError):
        return False
    return True


def finite_json(doc):
    """`doc` with every NaN / inf float (numpy's included) replaced by None, so it serialises as valid JSON."""
    if isinstance(doc, dict):
        return {k: finite_json(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [finite_json(v) for v in doc]
    if isinstance(doc, float) and not math.isfinite(doc):
        return None
    return doc

"""Output folder management: dataset identity, staging, atomic publish, quarantine, resume, concurrent writers.

Layout:  OUT/bundle.json                               dataset identity (rowbeam/bundle@1)
         OUT/events/<sensor>/<index:06d>/              manifest.json, payloads, qa_report.json
         OUT/flows/<sensor>/<index0:06d>-<index1:06d>/ flow between two camera events (rowbeam/flow@1)
         OUT/quarantine/events|flows/...               what failed a hard QA check, with its evidence
         OUT/.staging/w-<pid>-<random>/                one writer's folders being written (never referenced);
                                                       `.owner` (host, pid) stays flock-ed while it lives
         OUT/.staging/locks/<location>.lock            held while a writer checks, renders and publishes it
An event folder appears by one directory rename after every payload and its manifest are
fsynced, so an interrupted run never leaves a manifest pointing at a partial payload.

Several processes (on this host or sharing the folder) may write one bundle at once: each stages in
its own folder, a location is produced under its lock by whoever gets it first (the others find it
complete and skip it), a complete published folder is never replaced, and what a killed writer left
(its staging, `.NAME.old-PID` publish trash, `.bundle.json.tmp-PID`) is removed by the next writer --
only when an owner marker proves rowbeam made it (rowbeam/bundle/ownership.py); a user's `.staging`
folder without one is never taken for a dead writer's.
"""
from __future__ import annotations

import atexit
import errno
import fcntl
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

from rowbeam.util.errors import RowbeamError
from rowbeam.bundle import ownership
from rowbeam.bundle.files import STAGING_DIR, canonical_json, fsync_path, resolve_inside, sha256_file, temp_sibling
from rowbeam.bundle.schema import schema_errors

from rowbeam.blender.export.run_temp import lock_is_free, pid_alive

BUNDLE_FILE = "bundle.json"
LAYOUT = "events/<sensor>/<index:06d>/manifest.json; flows/<sensor>/<index0:06d>-<index1:06d>/manifest.json"
STAGING = STAGING_DIR
LOCKS = "locks"
OWNER = ".owner"
BUNDLE_TMP = re.compile(r"^\.bundle\.json\.tmp-(\d+)$")      # rowbeam.bundle.files.atomic_write_bytes' temp name
TRASH = re.compile(r"^\..+\.old-(\d+)$")                       # publish() moves a replaced folder here first
PROBE = re.compile(r"^\.rowbeam-probe-")          # run._probe_writable's empty folder (created, removed at once)
PROBE_STALE_S = 60.0
FOREIGN_STALE_S = 6 * 3600      # another host's staging with a free lock is reclaimed after this long untouched
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EFBIG}


def event_location(sensor_id: str, index: int) -> str:
    return f"events/{sensor_id}/{index:06d}"


def flow_location(sensor_id: str, i0: int, i1: int) -> str:
    return f"flows/{sensor_id}/{i0:06d}-{i1:06d}"


def dataset_id(identity: dict) -> str:
    return hashlib.sha256(canonical_json(identity)).hexdigest()


def write_error(exc: BaseException, path, context: str) -> RowbeamError | None:
    """One-line RowbeamError for an output-side failure (disk full, quota, permission, read-only) naming
    the file (or `path` when the error names none) and `context`; None when `exc` is something else
    (a bug that should keep its traceback). OpenEXR reports a full disk as RuntimeError naming the file."""
    if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
        where = exc.filename if exc.filename is not None else path
        return RowbeamError(f"{where}: cannot write ({exc.strerror or os.strerror(exc.errno)}); {context}")
    if isinstance(exc, RuntimeError) and "No space left on device" in str(exc):
        return RowbeamError(f"{str(exc).rstrip('.')}; {context}")
    return None


def _is_litter(p: Path) -> bool:
    """What an interrupted rowbeam writer can leave in an output folder before/besides bundle.json."""
    if p.is_symlink():
        return False
    return (p.name == STAGING and _staging_is_ours(p)) or (BUNDLE_TMP.match(p.name) is not None and _is_bundle_tmp(p)) or (
        PROBE.match(p.name) is not None and p.is_dir() and not any(p.iterdir()))


def _staging_is_ours(staging: Path) -> bool:
    """True when `staging` is a folder holding only writers' owned folders and empty lock files."""
    if not staging.is_dir():
        return False
    for d in staging.iterdir():
        if d.name == LOCKS and d.is_dir() and not d.is_symlink():
            if not all(f.suffix == ".lock" and f.is_file() and not f.is_symlink() and f.stat().st_size == 0
                       for f in d.iterdir()):
                return False
        elif not ownership.owned(d):
            return False
    return True


def _is_bundle_tmp(p: Path) -> bool:
    """A `.bundle.json.tmp-PID` file holding a rowbeam/bundle@1 document (what _create_bundle_file writes)."""
    try:
        if not p.is_file() or p.is_symlink() or p.stat().st_size > (64 << 20):
            return False
        with open(p, "rb") as f:
            return b'"schema": "rowbeam/bundle@1"' in f.read(1 << 16) or p.stat().st_size == 0
    except OSError:
        return False


def _lock_file(path: Path, blocking: bool = True) -> int | None:
    """An fd holding an exclusive flock on `path` (created if missing), or None if not `blocking` and busy.
    Lock files are unlinked by their holder, so after locking, the fd must still be the file at `path`."""
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:        # a parent was removed by another writer's clean-up: again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _unlink_lock(path: Path, fd: int) -> None:
    """Remove a lock file while holding it, then release it."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.close(fd)


class BundleWriter:
    def __init__(self, out_dir, identity: dict, extra: dict | None = None):
        self.root = Path(out_dir)
        self.identity = identity
        self.dataset_id = dataset_id(identity)
        self.extra = extra or {}
        self.host = platform.node()
        self.private: Path | None = None      # this writer's folder under .staging
        self._owner_fd: int | None = None
        self._claims: dict[str, int] = {}     # location -> depth of this writer's claim
        self._fds: dict[str, int] = {}        # location -> fd holding its lock file
        self.reclaimed: list[str] = []        # what open() removed that killed writers left

    # -- identity ------------------------------------------------------------------------------

    def validate(self) -> None:
        """Refuse a folder that holds something else; creates nothing. A folder holding only what an
        interrupted rowbeam run leaves (.staging, .bundle.json.tmp-PID, an empty .rowbeam-probe-*) counts as empty."""
        if self.root.exists() and not self.root.is_dir():
            raise RowbeamError(f"--out {self.root}: exists and is not a folder")
        if not self.root.exists():
            return
        bundle = self.root / BUNDLE_FILE
        if not bundle.exists() and all(_is_litter(p) for p in self.root.iterdir()):
            return
        if not bundle.is_file():
            raise RowbeamError(f"--out {self.root}: folder is not empty and holds no {BUNDLE_FILE}; "
                               "choose an empty or new folder")
        try:
            doc = json.loads(bundle.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise RowbeamError(f"{bundle}: not valid JSON; refusing to write into this folder") from None
        if not isinstance(doc, dict) or schema_errors(doc, "rowbeam/bundle@1"):
            raise RowbeamError(f"{bundle}: not a rowbeam/bundle@1 document; refusing to write into this folder")
        if doc["dataset_id"] != self.dataset_id:
            diff = [k for k in self.identity if doc["identity"].get(k) != self.identity[k]]
            raise RowbeamError(f"--out {self.root}: holds a different dataset (differs in {', '.join(diff)}); "
                               "choose a new folder")

    def _create_bundle_file(self) -> None:
        """Create bundle.json exactly once even when writers race: each writes its own temp file and
        hard-links it into place (fails if present); a loser validates the winner's identity."""
        bundle = self.root / BUNDLE_FILE
        data = canonical_json({"schema": "rowbeam/bundle@1", "dataset_id": self.dataset_id,
                               "identity": self.identity, "layout": LAYOUT, **self.extra})
        tmp = temp_sibling(self.root / BUNDLE_FILE)
        for _ in range(5):
            if bundle.exists():
                return self.validate()
            try:
                try:
                    with open(tmp, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                except OSError as exc:
                    exc.filename = exc.filename or str(bundle)      # a failed write() names no file
                    raise
                try:
                    os.link(tmp, bundle)
                except FileExistsError:
                    continue                         # another writer won: validate theirs
                except FileNotFoundError:
                    continue                         # our temp was reclaimed by a writer on another host
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                        raise
                    os.replace(tmp, bundle)          # no hard links here: last identical write wins
                fsync_path(self.root)
                return None
            finally:
                tmp.unlink(missing_ok=True)
        raise RowbeamError(f"{bundle}: could not be created (other writers keep replacing it)")

    # -- life cycle ----------------------------------------------------------------------------

    def open(self) -> None:
        """Validate, create the folder, bundle.json and this writer's staging; remove what killed
        writers left. On failure, a folder this call created is removed again."""
        self.validate()
        created = not self.root.exists()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._create_bundle_file()
            self._private_dir()
            self.reclaim()
        except BaseException:
            self.close()
            if created:
                try:
                    self.root.rmdir()
                except OSError:
                    pass
            raise

    def _private_dir(self) -> Path:
        """This writer's staging folder with its owner file locked for the writer's life."""
        if self.private is not None:
            return self.private
        staging = self.root / STAGING
        while True:
            d = staging / f"w-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                d.mkdir(parents=True)
            except FileNotFoundError:     # .staging removed by another writer's close meanwhile: again
                continue
            except FileExistsError:
                continue
            ownership.mark(d, "export-staging")
            owner = d / OWNER
            fd = os.open(owner, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, json.dumps({"host": self.host, "pid": os.getpid()}).encode())
            self.private, self._owner_fd = d, fd
            atexit.register(self.close)         # callers that never close (bench) leave no staging either
            return d

    def _writer_is_dead(self, d: Path) -> bool:
        """A staging folder whose writer is gone: its owner lock is free, and its pid is not alive on this
        host -- or, for a writer on another host (a shared folder), its owner file has not been touched
        (every stage() touches it) for FOREIGN_STALE_S, in case the shared file system's locks are local."""
        if not lock_is_free(d / OWNER):
            return False
        try:
            owner = json.loads((d / OWNER).read_text())
            host, pid = owner["host"], int(owner["pid"])
        except (OSError, ValueError, KeyError, TypeError):     # no/partial owner file, or an older layout
            m = re.search(r"-(\d+)(?:-[0-9a-f]+)?$", d.name)
            host, pid = self.host, int(m.group(1)) if m else -1
        if host == self.host:
            return not pid_alive(pid)
        try:
            return time.time() - (d / OWNER).stat().st_mtime > FOREIGN_STALE_S
        except OSError:
            return False

    def reclaim(self) -> list[str]:
        """Remove what killed writers left: their staging folders, free lock files, stale
        .bundle.json.tmp-PID files, .NAME.old-PID publish trash and write probes older than a minute.
        Live writers' files are kept."""
        removed = []
        staging = self.root / STAGING
        for d in _listdir(staging):
            if d == self.private or d.name == LOCKS or d.is_symlink() or not ownership.owned(d):
                continue                    # no owner marker: a user's folder, never removed
            if d.is_dir() and self._writer_is_dead(d):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
        for lock in _listdir(staging / LOCKS):
            ours = lock.suffix == ".lock" and lock.is_file() and not lock.is_symlink() and lock.stat().st_size == 0
            fd = _lock_file(lock, blocking=False) if ours else None
            if fd is not None:
                _unlink_lock(lock, fd)
        for p in _listdir(self.root):
            if PROBE.match(p.name) and p.is_dir() and not p.is_symlink() and _age_s(p) > PROBE_STALE_S:
                try:
                    p.rmdir()                                 # only if empty: a probe holds nothing
                    removed.append(p)
                except OSError:
                    pass
            m = BUNDLE_TMP.match(p.name)
            if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))) and _is_bundle_tmp(p):
                p.unlink(missing_ok=True)
                removed.append(p)
        for parent in self._published_parents():
            for p in _listdir(parent):
                m = TRASH.match(p.name)
                if m and not (pid_alive(int(m.group(1))) and int(m.group(1)) != os.getpid()) and ownership.owned(p):
                    shutil.rmtree(p, ignore_errors=True)
                    removed.append(p)
        self.reclaimed += [str(p.relative_to(self.root)) for p in removed]
        return removed

    def _published_parents(self):
        for top in (self.root, self.root / "quarantine"):
            for kind in ("events", "flows"):
                yield from (d for d in _listdir(top / kind) if d.is_dir() and not d.is_symlink())

    def close(self) -> None:
        """Remove this writer's staging and release its locks; remove .staging when no writer is left."""
        for location in list(self._claims):
            self._claims[location] = 1
            self._release(location)
        if self.private is not None:
            shutil.rmtree(self.private, ignore_errors=True)
            self.private = None
        if self._owner_fd is not None:
            os.close(self._owner_fd)
            self._owner_fd = None
            atexit.unregister(self.close)
        for d in (self.root / STAGING / LOCKS, self.root / STAGING):
            try:
                d.rmdir()
            except OSError:
                pass

    discard_staging = close

    # -- locations -----------------------------------------------------------------------------

    def event_dir(self, sensor_id: str, index: int) -> Path:
        return self.root / event_location(sensor_id, index)

    def flow_dir(self, sensor_id: str, i0: int, i1: int) -> Path:
        return self.root / flow_location(sensor_id, i0, i1)

    def _lock_path(self, location: str) -> Path:
        return self.root / STAGING / LOCKS / (location.replace("/", "+") + ".lock")   # '+' is not in sensor ids

    @contextmanager
    def claim(self, location: str):
        """Hold `location` exclusively among writers (blocking until free); re-entrant in this writer.
        Check completeness, render and publish inside it, so a location is produced once."""
        if location in self._claims:
            self._claims[location] += 1
        else:
            fd = _lock_file(self._lock_path(location))
            self._claims[location] = 1
            self._fds[location] = fd
        try:
            yield
        finally:
            self._release(location)

    def _release(self, location: str) -> None:
        self._claims[location] -= 1
        if self._claims[location] == 0:
            del self._claims[location]
            _unlink_lock(self._lock_path(location), self._fds.pop(location))

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
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, RowbeamError):
            return False

    def stage(self, location: str) -> Path:
        """An empty folder in this writer's staging for `location`."""
        d = self._private_dir() / location.replace("/", "+")
        os.utime(self.private / OWNER)          # heartbeat for writers on other hosts (see _writer_is_dead)
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        return d

    def publish(self, staged: Path, location: str, passed: bool) -> Path:
        """Move a fully written, fsynced folder to `location` (or quarantine/`location`) atomically, under
        the location's claim. A complete folder already published there (a concurrent writer's identical
        work) is kept and ours discarded; an incomplete or quarantined one is replaced."""
        fsync_path(staged)
        with self.claim(location):
            if passed and self.is_complete(location):
                shutil.rmtree(staged, ignore_errors=True)
                return self.root / location
            final = self.root / location if passed else self.root / "quarantine" / location
            final.parent.mkdir(parents=True, exist_ok=True)
            for stale in (self.root / location, self.root / "quarantine" / location):
                for old in _listdir(stale.parent):
                    if old.name.startswith(f".{stale.name}.old-") and TRASH.match(old.name):
                        ownership.remove_owned(old)                # trash a killed publish left here
                if stale.exists():
                    trash = stale.with_name(f".{stale.name}.old-{os.getpid()}")
                    os.replace(stale, trash)
                    ownership.mark(trash, "export-trash")
                    shutil.rmtree(trash, ignore_errors=True)
            os.replace(staged, final)
            fsync_path(final.parent)
        return final


def _age_s(p: Path) -> float:
    try:
        return time.time() - p.stat().st_mtime
    except OSError:
        return 0.0


def _listdir(d: Path) -> list[Path]:
    try:
        return sorted(d.iterdir())
    except OSError:
        return []

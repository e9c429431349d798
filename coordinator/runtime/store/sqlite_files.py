"""The files of a SQLite record store: where it may live, its writer lock, flushing, and
whether the files open are still the ones on disk. Failures to open are classified here into
the :mod:`.api` errors that say what is wrong (:func:`open_error`)."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from pathlib import Path
from typing import BinaryIO

from .api import StoreAccessError, StoreCorruptError, StoreError, StoreLockedError

try:  # POSIX only; elsewhere the single-writer rule is documented but not enforced.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("coordinator.runtime.store.sqlite")

DATA_FILE_NAME = "coordinator.db"


def resolve_path(path_or_dir: str | os.PathLike[str]) -> Path:
    """The data file for ``path_or_dir``: an existing directory or a path without a ``.db``
    suffix is a data directory (``<dir>/coordinator.db``); anything else is the file itself."""
    p = Path(path_or_dir)
    if p.is_dir() or (not p.exists() and p.suffix != ".db"):
        return p / DATA_FILE_NAME
    return p


def set_clean_shutdown(conn: sqlite3.Connection, path: Path, clean: bool) -> None:
    """Record in the database file itself whether the store is open (0) or was closed cleanly
    (1). The checkpoint puts the flag into the main file at once, so that file alone tells a
    later start whether a write-ahead log must exist (``_check_complete``)."""
    if conn.in_transaction:  # a failed statement left one open; never commit half of it
        conn.execute("ROLLBACK")
    conn.execute(
        "INSERT OR REPLACE INTO meta (name, value) VALUES ('clean_shutdown', ?)", (int(clean),)
    )
    busy, frames, done = conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
    if busy or done != frames:
        log.warning(
            "could not fully checkpoint %s (a reader is active): if its write-ahead log were "
            "deleted after a crash now, the next start might not notice",
            path,
        )


def wal_keeper(path: Path) -> sqlite3.Connection | None:
    try:
        keeper = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, isolation_level=None)
        keeper.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the WAL
        return keeper
    except sqlite3.Error:  # pragma: no cover - best effort
        return None


Identity = tuple[tuple[int, int] | None, tuple[int, int] | None, tuple[int, int] | None, bool]
"""(database file, write-ahead log, directory) as (st_dev, st_ino), None when missing; and
whether the database file is empty."""


def file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def identity_of(path: Path) -> Identity:
    try:
        empty = os.stat(path).st_size == 0
    except OSError:
        empty = False
    return file_id(path), file_id(sidecar(path, "-wal")), file_id(path.parent), empty


def describe_loss(path: Path, expected: Identity, now: Identity) -> str:
    db, wal, directory, empty = now
    if directory is None:
        what = f"its data directory {path.parent} was deleted"
    elif directory != expected[2]:
        what = f"its data directory {path.parent} was replaced or unmounted"
    elif db is None:
        what = f"{path.name} was deleted"
    elif db != expected[0]:
        what = f"{path.name} was replaced by another file"
    elif empty:
        what = f"{path.name} was truncated to 0 bytes"
    elif wal is None:
        what = f"its write-ahead log {path.name}-wal was deleted"
    else:
        what = f"its write-ahead log {path.name}-wal was replaced by another file"
    return (
        f"the record store at {path} is no longer the one on disk: {what} while the store was "
        "open. Writes to it would be lost at the next start, so none are acknowledged any more"
    )


def sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


# SQLite primary result codes used to classify failures to open.
SQLITE_PERM = 3
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_NOTADB = 26


def primary(e: BaseException) -> int | None:
    code = getattr(e, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def unwritable(path: Path) -> str | None:
    """Why the store at ``path`` (or the nearest directory that exists) cannot be written, if
    the operating system can tell: a read-only mount, or permissions."""
    target = nearest_existing(path)
    try:
        if os.statvfs(target).f_flag & os.ST_RDONLY:
            return f"the file system holding {target} is mounted read-only"
    except OSError:  # pragma: no cover
        pass
    for candidate in (path, sidecar(path, "-wal"), sidecar(path, "-shm"), path.parent):
        if candidate.exists() and not os.access(candidate, os.W_OK, effective_ids=True):
            return f"permission denied: {candidate} is not writable by uid {os.geteuid()}"
    return None


def unreadable(path: Path) -> str | None:
    for candidate in (path.parent, path):
        if candidate.exists() and not os.access(candidate, os.R_OK, effective_ids=True):
            return f"permission denied: {candidate} is not readable by uid {os.geteuid()}"
    return None


def check_location(path: Path, *, creating: bool) -> bool:
    """Check where the store lives; True when the store file exists. Creates the data directory
    when ``creating``. Raises a clear :class:`StoreError` for what cannot be a store's place."""
    directory = path.parent
    if directory.exists() and not directory.is_dir():
        raise StoreAccessError(f"data directory {directory} is not a directory")
    if creating:
        for parent in reversed((directory, *directory.parents)):
            if parent.exists() and not parent.is_dir():
                raise StoreAccessError(
                    f"cannot create data directory {directory}: {parent} is not a directory"
                )
        directory.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() and not path.exists():
        raise StoreCorruptError(
            f"{path} is a symbolic link to {os.readlink(path)}, which does not exist (an "
            "unmounted volume?); refusing to create a new store in its place"
        )
    if not path.exists():
        return False
    if not path.is_file():
        raise StoreCorruptError(f"{path} exists but is not a regular file; refusing to use it")
    size = path.stat().st_size
    if size == 0:
        raise StoreCorruptError(
            f"{path} is empty (0 bytes): not a kip848 record store (truncated, or never "
            "completed). A new store is created only where no file exists; refusing to start "
            "empty in its place. Restore the file, or move it away to start a new store"
        )
    if size < SQLITE_HEADER_BYTES:
        raise StoreCorruptError(
            f"{path} is {size} bytes long, shorter than any SQLite database: truncated or not a "
            "kip848 record store; refusing to use it"
        )
    return True


SQLITE_HEADER_BYTES = 100
WAL_HEADER_BYTES = 32


def open_error(path: Path, e: BaseException) -> StoreError:
    """A failure to open, as the :class:`StoreError` subclass that says what is wrong."""
    where = f"cannot open record store at {path}"
    if isinstance(e, OSError):
        reason = e.strerror or str(e)
        if e.errno == errno.EROFS:
            return StoreAccessError(
                f"{where}: {unwritable(path) or 'read-only file system'} ({e}); the "
                "coordinator must write its store: mount it read-write (kip848 replay and dump "
                "read it as it is)"
            )
        if e.errno in (errno.EACCES, errno.EPERM):
            return StoreAccessError(f"{where}: permission denied ({e})")
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return StoreAccessError(f"{where}: no space left on the device ({e})")
        if e.errno in (errno.ENOTDIR, errno.EEXIST):
            return StoreAccessError(f"{where}: a path component is not a directory ({e})")
        return StoreAccessError(f"{where}: {reason} ({e})")
    code = primary(e)
    if code in (SQLITE_READONLY, SQLITE_PERM) or (
        code == SQLITE_CANTOPEN and (unwritable(path) or unreadable(path))
    ):
        why = unreadable(path) or unwritable(path) or "the file cannot be written"
        return StoreAccessError(
            f"{where}: {why} (SQLite: {e}); the store itself was not examined further and is "
            "not known to be damaged"
        )
    if code == SQLITE_FULL:
        return StoreAccessError(f"{where}: no space left on the device (SQLite: {e})")
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        return StoreLockedError(
            f"{where}: another program holds a lock on the database (SQLite: {e})"
        )
    if code == SQLITE_IOERR:
        return StoreAccessError(f"{where}: I/O error (SQLite: {e})")
    if code == SQLITE_CANTOPEN:
        return StoreAccessError(f"{where}: {e}")
    return StoreCorruptError(f"{where}: {e} (corrupt, or not a kip848 store)")


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_exclusively(lock_path: Path, db_path: Path) -> BinaryIO | None:
    """Hold an exclusive flock on ``lock_path`` for the life of the store. It is released by
    close(), by the death of the process (even SIGKILL) and, being a file object, by garbage
    collection of a store that was never closed."""
    if fcntl is None:  # pragma: no cover
        return None
    f = open(lock_path, "a+b")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read(32).decode("ascii", "replace").strip() or "?"
        f.close()
        raise StoreLockedError(
            f"record store at {db_path} is already open for writing (pid {holder} holds "
            f"{lock_path})"
        ) from None
    except BaseException:
        f.close()
        raise
    f.truncate(0)
    f.write(str(os.getpid()).encode("ascii"))
    f.flush()
    return f


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class Handles:
    """What an open store holds. ``release`` closes it all once: it is the store's finalizer,
    so it must not refer to the store itself."""

    __slots__ = ("conn", "failed", "lock_file", "mark_clean_on_close", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None
        self.lock_file: BinaryIO | None = None
        self.failed = False
        self.mark_clean_on_close = False

    def release(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            keeper = None
            if self.mark_clean_on_close:
                try:
                    set_clean_shutdown(conn, self.path, True)
                except sqlite3.Error as e:
                    # The file still says "open": the WAL must survive this close, or the next
                    # start would take its absence for a lost log. A reader still open when
                    # the writer closes keeps SQLite from checkpointing and removing it.
                    log.warning("could not mark %s cleanly shut down: %s", self.path, e)
                    keeper = wal_keeper(self.path)
            try:
                conn.close()  # the last connection checkpoints and removes the WAL
            except sqlite3.Error:  # pragma: no cover
                pass
            if keeper is not None:
                keeper.close()  # read-only: cannot checkpoint, leaves the WAL in place
        lock_file, self.lock_file = self.lock_file, None
        if lock_file is not None:
            lock_file.close()  # releases the flock

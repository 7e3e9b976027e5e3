"""Atomic file writes: a temporary file in the same directory, then ``os.replace``.

A reader sees the old file or the new one, never a half-written one, and a
failure leaves the old file untouched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    target = Path(path)
    tmp = _temporary_name(str(target))
    try:  # named before it is made: a Ctrl-C just after the file appears still finds it here
        fd = _create(tmp)
        with _filling(fd, mode, str(target)) as handle:
            yield handle
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _temporary_name(target: str) -> str:
    """``.NAME.<random>.tmp`` beside ``target``, not made yet; its folder absolute and normalized, as mkstemp
    gives it (``sub/../x`` stays removable once ``sub``, made for it, is removed again)."""
    folder, name = os.path.split(target)
    return os.path.join(os.path.abspath(folder or "."), f".{name}.{secrets.token_hex(6)}.tmp")


def _create(tmp: str) -> int:
    """Make the temporary ``tmp``, private until it is filled (as mkstemp makes it: 0600, never an existing file)."""
    return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)


@contextmanager
def _filling(fd: int, mode: str, target: str) -> Iterator[IO[Any]]:
    """The open temporary ``fd``, on disk when the block ends; an ``OSError`` says why, naming ``target``."""
    handle = os.fdopen(fd, mode)
    try:
        # mkstemp makes 0600 files; give the result the mode a plain open() would
        os.fchmod(fd, 0o666 & ~_UMASK)
        yield handle
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
    except OSError as exc:  # a full disk says so at a write, the flush or the close
        raise _naming(_reason(handle, exc), target) from None
    finally:
        if not handle.closed:
            with contextlib.suppress(OSError):  # its buffer cannot be written either: the file is removed
                handle.close()


def _reason(handle: IO[Any], exc: OSError) -> OSError:
    """Why a write fell short: NumPy says only "N requested and M written", so write a byte to learn the
    system's reason (a full disk, a quota, the file size limit) into the temporary that is removed anyway."""
    if exc.errno is not None or handle.closed:
        return exc
    try:
        os.write(handle.fileno(), b"\0")
    except OSError as probe:
        return OSError(probe.errno, probe.strerror)
    return exc


def _read_umask() -> int:
    # os.umask can only be read by setting it: do it once, at import, before any threads write files
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w") as handle:
        handle.write(text)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(path, "wb") as handle:
        handle.write(data)


class FileSet:
    """Files that take their places together: each written to a temporary beside its target, then all renamed.

    Policy. Nothing is renamed until every file is written, so a write that
    fails (a full disk, a folder that cannot be made) leaves every target as
    it was: :meth:`discard` removes the temporaries and the folders made for
    them. :meth:`commit` keeps each old file until :meth:`settle` (a hard link
    beside it, or, where the file system refuses links, the file itself moved
    aside), so a rename that fails midway puts every old file back and
    removes the new ones; :meth:`undo` does the same after a commit, when
    another part of one commit failed (a run's outputs and its saves on the
    workers). An ``OSError`` from any of them names the file (``filename``).

    State: the temporaries written and their targets, the folders made for
    them, and, between a commit and its settling, each target's old file.
    """

    def __init__(self) -> None:
        self.pending: list[tuple[str, str]] = []  # (temporary, target), in the order written
        self.placed: list[tuple[str, str | None]] = []  # (target, its old file kept aside, or None: there was none)
        self.folders: list[str] = []  # folders made for the temporaries, outermost first

    def add(self, temporary: str, target: str) -> None:
        """A temporary written elsewhere (a save op's staging file) that takes ``target``'s place with the rest."""
        self.pending.append((temporary, target))

    @contextmanager
    def open(self, target: str, mode: str = "wb") -> Iterator[IO[Any]]:
        """A handle on ``target``'s new content: a temporary beside it, on disk when the block ends."""
        folder = os.path.dirname(target) or "."
        tmp = _temporary_name(target)
        # pending before the file exists: a failed write, or a Ctrl-C the moment it appears, removes it too
        self.pending.append((tmp, target))
        try:
            self._make(folder)
            fd = _create(tmp)
        except OSError as exc:
            raise _naming(exc, target) from None
        with _filling(fd, mode, target) as handle:
            yield handle

    def commit(self) -> list[str]:
        """Rename every temporary onto its target (the old files kept until :meth:`settle`); the targets.

        On a failure every target is put back as it was and every temporary removed before the error is raised.
        """
        try:
            for temporary, target in self.pending:
                old = _keep_old(target)
                try:
                    os.replace(temporary, target)
                except OSError:
                    if old is not None:
                        os.replace(old, target)
                    raise
                self.placed.append((target, old))
        except OSError as exc:
            left = self.undo()
            self.discard()
            why = exc.strerror or str(exc)
            raise OSError(exc.errno, f"{why}; could not put back {left}" if left else why, target) from None
        self.pending = []
        return [target for target, _ in self.placed]

    def settle(self) -> None:
        """The commit stands: drop the old files kept aside."""
        for _, old in self.placed:
            if old is not None:
                with contextlib.suppress(OSError):
                    os.unlink(old)
        self.placed = []

    def undo(self) -> str:
        """Put back every old file of a commit and remove the new files that had none; what could not be."""
        left = []
        for target, old in reversed(self.placed):
            try:
                if old is None:
                    os.unlink(target)
                else:
                    os.replace(old, target)
            except OSError as exc:
                left.append(f"{target} ({exc.strerror}{f'; its old file is {old}' if old else ''})")
        self.placed = []
        self._remove_folders()
        return ", ".join(left)

    def discard(self) -> None:
        """Remove every temporary not yet renamed, and the folders made for them if nothing else is there."""
        for temporary, _ in self.pending:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        self.pending = []
        self._remove_folders()

    def _make(self, folder: str) -> None:
        missing = []
        while folder and not os.path.isdir(folder):
            missing.append(folder)
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        if missing:
            self.folders.extend(reversed(missing))  # before: a makedirs that fails midway made some
            os.makedirs(missing[0], exist_ok=True)

    def _remove_folders(self) -> None:
        for folder in reversed(self.folders):
            with contextlib.suppress(OSError):  # another file is there now: it stays, and so does its folder
                os.rmdir(folder)
        self.folders = []


def _keep_old(target: str) -> str | None:
    """Keep ``target``'s file beside it until the commit settles; None when there is none to keep."""
    if not os.path.lexists(target):
        return None
    if os.path.isdir(target) and not os.path.islink(target):
        raise IsADirectoryError(errno.EISDIR, "a folder is there", target)
    folder, name = os.path.split(target)
    old = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.old")
    try:
        os.link(target, old, follow_symlinks=False)  # the target stays in place: a reader never misses it
    except OSError:  # links refused (some network and FAT file systems): the file itself moves aside
        os.rename(target, old)
    return old


def _naming(exc: OSError, target: str) -> OSError:
    """The error of a write, with the file it was for (a full disk's ENOSPC names none)."""
    return OSError(exc.errno, exc.strerror or str(exc), exc.filename if exc.filename else target)

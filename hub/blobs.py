"""Content-addressed blob storage: a file is stored, found and checked by its sha256.

Addressing by digest makes a write idempotent (the same bytes land at the same path, so
a retried or concurrent upload of one wheel is harmless) and lets every read prove it got
what the database promised. The database never points at a blob that is not fully on
disk: publishing writes the blob *first*, durably, and only then commits the row
(:mod:`gymhub.hub.store`). A crash in between leaves an unreferenced blob, which costs
disk space and nothing else; :mod:`gymhub.hub.audit` finds such blobs and sweeps them,
sparing young ones (a publish may be about to commit them: ``put`` of bytes already
stored refreshes the file's time for exactly that reason).

:class:`BlobStore` is the interface the hub uses, so an object store can replace
:class:`FileBlobStore` without touching the publish logic.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from gymhub.errors import BlobCorrupted, DigestMismatch, InvalidHubInput

__all__ = ["BlobEntry", "BlobStore", "FileBlobStore", "check_sha256"]

_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class BlobEntry:
    """One stored blob as the store sees it, for audits (``mtime``: last put, epoch s)."""

    sha256: str
    size: int
    mtime: float


def check_sha256(digest: str) -> str:
    """Return ``digest`` if it is 64 lowercase hex characters, else raise.

    Only such strings become paths, so no caller-supplied digest can name a file
    outside the store.

    Raises:
        InvalidHubInput: anything else.
    """
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise InvalidHubInput(f"sha256 must be 64 lowercase hex characters, not {digest!r}")
    return digest


@runtime_checkable
class BlobStore(Protocol):
    """Where the hub keeps file bytes, addressed by their sha256."""

    def put(self, sha256: str, data: bytes) -> None:
        """Store ``data`` under ``sha256`` durably; a no-op if it is already there intact.

        Raises:
            DigestMismatch: ``data`` does not hash to ``sha256``.
        """
        ...

    def read(self, sha256: str, size: int, *, verify: bool = True) -> bytes:
        """The bytes under ``sha256``, checked against ``size`` (and the digest if ``verify``).

        Raises:
            BlobCorrupted: missing, of another size, or (``verify``) of another digest.
        """
        ...

    def open(self, sha256: str, size: int) -> BinaryIO:
        """A binary file to stream from, after checking its size (for serving downloads)."""
        ...

    def exists(self, sha256: str) -> bool:
        """Whether a blob is stored under ``sha256`` (intact or not)."""
        ...

    def delete(self, sha256: str, *, modified_before: float | None = None) -> bool:
        """Remove the blob; ``False`` if there was none. For garbage collection only.

        With ``modified_before`` (epoch seconds) a blob put again since then is kept: a
        publish of those bytes may be about to reference it.
        """
        ...

    def entries(self) -> Iterator[BlobEntry]:
        """Every stored blob (for audits and sweeps; order unspecified)."""
        ...

    def remove_stale_temporaries(self, older_than_s: float) -> int:
        """Delete partial writes older than ``older_than_s`` (a crash mid-put); their count."""
        ...


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (POSIX only; a no-op where directories can't open)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class FileBlobStore:
    """Blobs as files ``ROOT/ab/cd/<sha256>`` on a local filesystem.

    The two-level fan-out keeps directories small. Writes go to a temporary file in the
    blob's own directory (same filesystem, so the rename is atomic), are fsynced, read
    back and hashed, then renamed into place and the directory fsynced: a reader sees
    either no file or the whole, verified file, even across a power cut.

    Args:
        root: the directory; created if missing.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        """Where the blob for ``sha256`` lives (whether or not it exists)."""
        check_sha256(sha256)
        return self.root / sha256[:2] / sha256[2:4] / sha256

    def put(self, sha256: str, data: bytes) -> None:  # noqa: D102 (documented on BlobStore)
        target = self.path(sha256)
        if hashlib.sha256(data).hexdigest() != sha256:
            raise DigestMismatch(f"the data does not hash to {sha256}")
        if target.is_file() and self._intact(target, sha256, len(data)):
            os.utime(target)  # young again: a sweep must not take it before the row commits
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o444)  # immutable by intent; replacing it still works
            if not self._intact(tmp, sha256, len(data)):  # what reached the disk
                raise BlobCorrupted(f"blob {sha256} did not read back intact after writing")
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)

    def read(self, sha256: str, size: int, *, verify: bool = True) -> bytes:  # noqa: D102
        with self.open(sha256, size) as f:
            data = f.read()
        if len(data) != size:
            raise BlobCorrupted(f"blob {sha256} changed size while being read")
        if verify and hashlib.sha256(data).hexdigest() != sha256:
            raise BlobCorrupted(f"blob {sha256} does not hash to its name")
        return data

    def open(self, sha256: str, size: int) -> BinaryIO:  # noqa: D102
        path = self.path(sha256)
        try:
            f = path.open("rb")
        except FileNotFoundError:
            raise BlobCorrupted(f"blob {sha256} is missing from {self.root}") from None
        actual = os.fstat(f.fileno()).st_size
        if actual != size:
            f.close()
            raise BlobCorrupted(f"blob {sha256} is {actual} bytes, the database says {size}")
        return f

    def exists(self, sha256: str) -> bool:  # noqa: D102
        return self.path(sha256).is_file()

    def delete(self, sha256: str, *, modified_before: float | None = None) -> bool:  # noqa: D102
        path = self.path(sha256)
        try:
            if modified_before is not None and path.stat().st_mtime > modified_before:
                return False
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    def entries(self) -> Iterator[BlobEntry]:  # noqa: D102
        for path in self.root.glob("[0-9a-f][0-9a-f]/[0-9a-f][0-9a-f]/*"):
            if _SHA256.fullmatch(path.name) and path.name[:4] == path.parent.parent.name + \
                    path.parent.name:
                st = path.stat()
                yield BlobEntry(path.name, st.st_size, st.st_mtime)

    def remove_stale_temporaries(self, older_than_s: float) -> int:  # noqa: D102
        cutoff, removed = time.time() - older_than_s, 0
        for path in self.root.glob("*/*/.tmp-*"):
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime <= cutoff:
                    path.unlink()
                    removed += 1
        return removed

    @staticmethod
    def _intact(path: Path, sha256: str, size: int) -> bool:
        if path.stat().st_size != size:
            return False
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest() == sha256

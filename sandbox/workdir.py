"""Host-side session workdirs and the files in/out API that cannot be tricked into escaping.

A workdir is a host directory bound read-write into the sandbox as ``/work``. The
sandboxed command controls its contents, so every host-side access treats it as hostile:

* names are checked before use (no absolute paths, no ``..``, no NUL);
* paths are walked one component at a time with ``O_NOFOLLOW`` relative to a directory
  descriptor, so a symlink planted by the command (``out.txt -> /etc/shadow``) is never
  followed, not even in a parent component;
* reads open with ``O_NONBLOCK`` and require a regular file, so a FIFO cannot hang the
  host, and stop at a byte cap.

When the host runs as root the workdir is its own size-capped tmpfs (``Limits.workdir_mb``)
mounted with ``nosuid,nodev``: filling it fills neither the host disk nor anything else.
Otherwise it is a plain directory and only ``RLIMIT_FSIZE`` bounds single files.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

from gymhub.errors import BackendError
from gymhub.sandbox.base import WORKDIR, SandboxPathError

__all__ = ["HostWorkdir", "base_dir", "split_name"]

_MS_NOSUID = 2
_MS_NODEV = 4
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def base_dir() -> Path:
    """The host directory holding all workdirs (``$GYMHUB_SANDBOX_DIR`` or /tmp).

    Created ``0711`` so that the sandbox user can reach its own workdir but list none.

    Raises:
        BackendError: the directory exists but belongs to someone else or is a symlink
            (another user could otherwise swap workdirs under us).
    """
    default = Path(tempfile.gettempdir()) / f"gymhub-sandbox-{os.geteuid()}"
    path = Path(os.environ.get("GYMHUB_SANDBOX_DIR", str(default)))
    try:
        path.mkdir(mode=0o711, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise BackendError(f"cannot create sandbox directory {path}: {exc}") from exc
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise BackendError(f"sandbox directory {path} is not a directory owned by us")
    os.chmod(path, 0o711)
    return path


def split_name(name: str) -> list[str]:
    """Validate a workdir file name and split it into components.

    ``a/b.txt``, ``./a`` and ``/work/a`` are accepted; ``/etc/x``, ``../x``, ``a/../b``,
    empty names and NUL bytes raise :class:`SandboxPathError`.
    """
    if not isinstance(name, str) or not name or "\x00" in name:
        raise SandboxPathError(f"invalid file name {name!r}")
    rel = name
    if rel.startswith(WORKDIR + "/"):
        rel = rel[len(WORKDIR) + 1 :]
    if rel.startswith("/"):
        raise SandboxPathError(f"absolute path outside {WORKDIR}: {name!r}")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise SandboxPathError(f"file name escapes the workdir: {name!r}")
    return parts


class HostWorkdir:
    """A workdir on the host, owned by the sandbox user, deleted by :meth:`remove`.

    Args:
        size_mb: tmpfs size when mounting is possible (root).
        uid: owner of the directory and of files written through this API.
        gid: group of the same.
    """

    def __init__(self, size_mb: int, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self.path = Path(tempfile.mkdtemp(prefix="w-", dir=base_dir()))
        self.mounted = False
        if os.geteuid() == 0:
            opts = f"size={int(size_mb)}m,mode=0700,uid={uid},gid={gid}".encode()
            rc = _libc.mount(b"gymhub", str(self.path).encode(), b"tmpfs",
                             _MS_NOSUID | _MS_NODEV, opts)
            self.mounted = rc == 0
        if not self.mounted:
            os.chmod(self.path, 0o700)
            if os.geteuid() == 0:
                os.chown(self.path, uid, gid)

    # -- lifecycle -------------------------------------------------------------------
    def clear(self) -> None:
        """Delete the workdir's contents but keep it (for recycled pool members)."""
        for entry in os.scandir(self.path):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    def remove(self) -> None:
        """Unmount and delete the workdir (idempotent, never raises for a missing dir)."""
        if self.mounted:
            _libc.umount2(str(self.path).encode(), _MNT_DETACH)
            self.mounted = False
        shutil.rmtree(self.path, ignore_errors=True)

    # -- files in/out ------------------------------------------------------------------
    def _open_parent(self, parts: list[str], create: bool) -> int:
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts[:-1]:
                try:
                    nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                    self._chown(nfd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise SandboxPathError(f"path goes through a symlink: {part!r}") from exc
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _chown(self, fd: int) -> None:
        if os.geteuid() == 0:
            os.fchown(fd, self.uid, self.gid)

    def write_file(self, name: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write ``data`` to ``name`` inside the workdir (parents created, symlinks refused)."""
        parts = split_name(name)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        dfd = self._open_parent(parts, create=True)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
            try:
                fd = os.open(parts[-1], flags, mode, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise SandboxPathError(f"refusing to follow a symlink: {name!r}") from exc
                raise
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise SandboxPathError(f"not a regular file: {name!r}")
                os.fchmod(fd, mode)
                self._chown(fd)
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        finally:
            os.close(dfd)

    def read_file(self, name: str, max_bytes: int | None = None) -> bytes:
        """Read a regular file from the workdir (see module docstring for the rules)."""
        parts = split_name(name)
        try:
            dfd = self._open_parent(parts, create=False)
        except (FileNotFoundError, SandboxPathError) as exc:
            raise FileNotFoundError(errno.ENOENT, "no such regular file", name) from exc
        try:
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
            except OSError as exc:
                raise FileNotFoundError(errno.ENOENT, "no such regular file", name) from exc
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise FileNotFoundError(errno.ENOENT, "not a regular file", name)
                chunks: list[bytes] = []
                left = max_bytes if max_bytes is not None else -1
                while left != 0:
                    chunk = os.read(fd, 1 << 20 if left < 0 else min(left, 1 << 20))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    if left > 0:
                        left -= len(chunk)
                return b"".join(chunks)
            finally:
                os.close(fd)
        finally:
            os.close(dfd)

    def collect(self, names: list[str] | tuple[str, ...], max_bytes: int) -> dict[str, bytes]:
        """Read several files; missing or non-regular ones are left out, not raised."""
        out: dict[str, bytes] = {}
        for name in names:
            try:
                out[name] = self.read_file(name, max_bytes)
            except FileNotFoundError:
                continue
        return out

    def list_files(self) -> list[str]:
        """Relative names of regular files (symlinks are neither followed nor listed)."""
        found: list[str] = []
        for dirpath, _dirs, filenames in os.walk(self.path, followlinks=False):
            for fname in filenames:
                full = os.path.join(dirpath, fname)
                with contextlib.suppress(FileNotFoundError):
                    if stat.S_ISREG(os.lstat(full).st_mode):
                        found.append(os.path.relpath(full, self.path))
        return sorted(found)


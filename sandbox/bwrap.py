"""The ``bwrap`` backend: bubblewrap namespaces + per-call cgroups + rlimits.

Every call is a fresh ``bwrap`` with:

* all namespaces unshared (user, mount, pid, net, ipc, uts, cgroup): the command is pid
  1 of its own pid namespace (``--as-pid-1``: bwrap's extra init would otherwise be left
  as a zombie for the host's init to reap), with only a loopback interface and no route;
* uid/gid 65534 inside, ``--cap-drop ALL``, ``--disable-userns`` (no nested user
  namespace, so no way back to capabilities), ``--new-session`` (no TIOCSTI into the
  caller's terminal), ``--die-with-parent``, ``--clearenv``;
* as host root, bwrap itself runs as host uid 65534 (``setpriv``), so even a kernel-level
  namespace escape lands as ``nobody`` with no capabilities, never as root;
* a read-only ``/usr`` (and the ``/bin``, ``/lib`` links), a synthetic read-only ``/etc``
  holding only passwd/group/hosts and the loader cache, fresh ``/proc`` and minimal
  ``/dev``, a size-capped ``/tmp`` tmpfs, the session workdir as the only writable host
  path, and ``/`` remounted read-only. The host's home, ``/etc/shadow``, ``/root``,
  ``/var`` and every other path simply do not exist inside.

When the command ends (normally, by deadline, or by a limit) its pid namespace dies and
the kernel kills everything left in it (daemons, zombies, fork bombs); the call's cgroup
is then emptied and removed as a second check.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from gymhub.errors import BackendError
from gymhub.sandbox.base import WORKDIR, Limits, Sandbox, Session
from gymhub.sandbox.cgroups import detect
from gymhub.sandbox.hostsession import HostSession
from gymhub.sandbox.workdir import base_dir
from gymhub.sandbox.workdir_pool import WorkdirPool

__all__ = ["BwrapSandbox", "BwrapSession", "others_can_reach"]

SANDBOX_UID = 65534
SANDBOX_GID = 65534
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC_FILES = {
    "passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n"
              "nobody:x:65534:65534:nobody:/tmp:/usr/sbin/nologin\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    "resolv.conf": "",
}


def _runtime_etc() -> Path:
    """Build (once per content) the read-only /etc shown inside the sandbox."""
    files = dict(_ETC_FILES)
    for name in ("ld.so.cache", "ld.so.conf", "localtime"):
        src = Path("/etc") / name
        if src.is_file():
            files[name] = src.read_bytes().decode("latin-1")
    conf_d = Path("/etc/ld.so.conf.d")
    if conf_d.is_dir():
        for item in sorted(conf_d.glob("*.conf")):
            files[f"ld.so.conf.d/{item.name}"] = item.read_text(errors="replace")
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    target = base_dir() / f"etc-{digest}"
    if target.is_dir():
        return target
    tmp = base_dir() / f"etc-{digest}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for name, text in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("latin-1"))
        path.chmod(0o644)
    for d in [tmp, *[p for p in tmp.rglob("*") if p.is_dir()]]:
        d.chmod(0o755)
    try:
        tmp.rename(target)
    except OSError:  # another process won the race: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def others_can_reach(path: str | os.PathLike[str]) -> bool:
    """Whether an unprivileged user (host ``nobody``) can open ``path``.

    Every directory on the way must be searchable by others, and ``path`` itself
    readable (and, for a directory, searchable) by them.
    """
    current = Path(path)
    try:
        for part in [current, *current.parents]:
            mode = part.stat().st_mode
            if not mode & 0o001 and (part != current or part.is_dir()):
                return False
            if part == current and not mode & 0o004:
                return False
    except OSError:
        return False
    return True


class BwrapSandbox(Sandbox):
    """Sandbox backend on bubblewrap (the default on Linux).

    Args:
        limits: default limits.
        bwrap: path of the bwrap binary (found on PATH when omitted).
        ro_binds: extra host paths shown read-only inside, ``{host_path: sandbox_path}``
            (e.g. a virtualenv's site-packages).
        cgroups: use cgroups when writable (turning them off leaves only rlimits and is
            meant for testing that fallback).

    Raises:
        BackendError: bubblewrap is missing or cannot create namespaces here.
    """

    name = "bwrap"

    def __init__(self, limits: Limits | None = None, *, bwrap: str | None = None,
                 ro_binds: Mapping[str, str] | None = None, cgroups: bool = True) -> None:
        super().__init__(limits)
        found = bwrap or shutil.which("bwrap")
        if not found or not os.access(found, os.X_OK):
            raise BackendError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        self.bwrap = found
        self.ro_binds = dict(ro_binds or {})
        self.cgroups, self.cgroup_reason = detect() if cgroups else (None, "disabled")
        setpriv = shutil.which("setpriv")
        # As root, bwrap runs as host nobody: the sandbox user is unprivileged on the host
        # too, not merely inside its namespace.
        self.drop_to: tuple[int, int] | None = None
        if os.geteuid() == 0 and setpriv:
            self.drop_to = (SANDBOX_UID, SANDBOX_GID)
        self.setpriv = setpriv or "setpriv"
        if self.drop_to is not None:
            hidden = [h for h in self.ro_binds if not others_can_reach(h)]
            if hidden:  # bwrap would fail every run with a bare "Permission denied"
                raise BackendError(
                    f"the sandbox runs as host nobody, which cannot reach {hidden[0]} (a "
                    "directory on its path is not readable and searchable by others, e.g. "
                    "a checkout in a mktemp -d folder); put it where others can read it")
        self.etc = _runtime_etc()
        self._static = self._static_args()
        uid, gid = self.drop_to or (os.geteuid(), os.getegid())
        self.workdirs = WorkdirPool(self.limits.workdir_mb, uid, gid)

    @classmethod
    def available(cls) -> bool:
        """Whether bwrap is installed (namespaces are checked by the first run)."""
        return shutil.which("bwrap") is not None

    def _static_args(self) -> list[str]:
        args = [
            self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--cap-drop", "ALL",
            "--die-with-parent", "--new-session", "--as-pid-1", "--clearenv",
            "--hostname", "sandbox",
            "--ro-bind", "/usr", "/usr",
        ]
        for name in _TOP_LEVEL:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{name}"]
        args += ["--ro-bind", str(self.etc), "/etc", "--proc", "/proc", "--dev", "/dev"]
        for host_path, inside in self.ro_binds.items():
            args += ["--ro-bind", host_path, inside]
        return args

    def wrap(self, argv: Sequence[str], env: Mapping[str, str], limits: Limits,
             workdir: Path, *, repl: bool = False) -> list[str]:
        """The host command that runs ``argv`` inside a fresh bwrap.

        ``repl``: keep bwrap's own init as pid 1 of the sandbox. A long-lived interpreter
        must not be pid 1: orphans of the code it runs would pile up as its zombies, and
        pid 1 ignores signals it has no handler for (``os.abort()`` would not end it).
        """
        args: list[str] = []
        if self.drop_to is not None:
            uid, gid = self.drop_to
            args += [self.setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--"]
        args += self._static if not repl else [a for a in self._static if a != "--as-pid-1"]
        if limits.network:
            args += ["--share-net", "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
        args += ["--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp",
                 "--bind", str(workdir), WORKDIR, "--chdir", WORKDIR, "--remount-ro", "/"]
        for key, value in env.items():
            args += ["--setenv", key, value]
        return [*args, "--", *argv]

    def session(self, limits: Limits | None = None) -> Session:
        """Open a session (see :meth:`Sandbox.session`)."""
        uid, gid = self.drop_to or (os.geteuid(), os.getegid())
        return BwrapSession(self, limits or self.limits, uid, gid)

    def close(self) -> None:
        """Remove the ready workdirs and those still waiting for removal."""
        self.workdirs.close()


class BwrapSession(HostSession):
    """A bwrap session: one workdir, a fresh bwrap per call."""

    def __init__(self, sandbox: BwrapSandbox, limits: Limits, uid: int, gid: int) -> None:
        self._sandbox = sandbox
        super().__init__(sandbox.name, limits, sandbox.cgroups, uid, gid, sandbox.workdirs)

    def _wrap(self, argv: Sequence[str], env: Mapping[str, str], limits: Limits, *,
              repl: bool = False) -> list[str]:
        return self._sandbox.wrap(argv, env, limits, self.workdir.path, repl=repl)

    def _soft_kill(self, pid: int) -> bool:
        # bwrap's child is the sandbox's pid 1; killing it tears down the whole pid
        # namespace, and bwrap reaps it and exits (killing bwrap first would orphan it).
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return False
        killed = False
        for child in children:
            with contextlib.suppress(OSError):
                os.kill(int(child), signal.SIGKILL)
                killed = True
        return killed

    def _nproc(self) -> int | None:
        # Without a pids cgroup, RLIMIT_NPROC is the only fork-bomb brake; it counts every
        # process of host nobody, so it is generous (it only works when we drop to nobody).
        if self._sandbox.cgroups is None and self._sandbox.drop_to is not None:
            return self.limits.pids * 8
        return None

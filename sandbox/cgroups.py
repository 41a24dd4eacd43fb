"""One cgroup per sandboxed call: memory and process caps, CPU accounting, and a clean kill.

Why cgroups and not only rlimits: rlimits are per process, so a program that forks
escapes them (``RLIMIT_AS`` per child, ``RLIMIT_CPU`` per child), and ``RLIMIT_NPROC``
counts every process of the *user*, across all concurrent sandboxes. A cgroup caps the
whole process tree, counts its CPU, records OOM kills, and lists every member so that
nothing survives the call.

Both hierarchies are supported:

* **v1** (and the "hybrid" layout of many VMs, where v2 exists without controllers):
  groups ``gymhub/<call>`` under our own group in the ``memory``, ``pids``, ``cpuacct``
  and (for an atomic kill) ``freezer`` hierarchies;
* **v2**: ``gymhub/<call>`` under the unified root with ``memory``, ``pids`` and ``cpu``
  delegated; ``cgroup.kill`` for the kill.

``GYMHUB_SANDBOX_CGROUPS`` = ``auto`` (default), ``v1``, ``v2`` or ``none`` overrides the
detection. Without write access (not root, no delegation) the sandbox runs without
cgroups and says so in :func:`detect`'s reason; rlimits then remain the only caps.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CallCgroup", "Cgroups", "detect", "pid_alive"]

_ROOT = Path("/sys/fs/cgroup")
_V1_CONTROLLERS = ("memory", "pids", "cpuacct", "freezer")
_REQUIRED_V1 = ("memory", "pids")
_counter = itertools.count()


def _own_paths() -> dict[str, str]:
    """Map controller name (``""`` for v2) to our own cgroup path from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for ctrl in ctrls.split(",") if ctrls else [""]:
                paths[ctrl] = path
    return paths


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _read_kv(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
    return 0


@dataclass
class CallCgroup:
    """The cgroup(s) of one call. Join by writing a pid to every file in :attr:`procs_files`.

    Attributes:
        version: 1 or 2.
        dirs: controller name → directory (v2: the single key ``""``).
    """

    version: int
    dirs: dict[str, Path]

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a launcher must write its pid into before exec."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def _dir(self, ctrl: str) -> Path | None:
        return self.dirs.get("" if self.version == 2 else ctrl)

    def pids(self) -> list[int]:
        """Processes currently in the group."""
        d = self._dir("pids")
        if d is None:
            return []
        try:
            return [int(x) for x in (d / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def cpu_ms(self) -> float | None:
        """CPU time of every process that was ever in the group, or None if not counted."""
        try:
            if self.version == 2:
                return _read_kv(self.dirs[""] / "cpu.stat", "usage_usec") / 1000.0
            d = self._dir("cpuacct")
            return None if d is None else int((d / "cpuacct.usage").read_text()) / 1e6
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a member (or refused memory at the limit)."""
        if self.version == 2:
            return _read_kv(self.dirs[""] / "memory.events", "oom_kill") > 0
        d = self._dir("memory")
        return d is not None and _read_kv(d / "memory.oom_control", "oom_kill") > 0

    def pids_exhausted(self) -> bool:
        """Whether a fork or clone hit ``pids.max``."""
        d = self._dir("pids")
        return d is not None and _read_kv(d / "pids.events", "max") > 0

    def kill(self) -> None:
        """SIGKILL every member, fork bombs included, and wait until the group is empty."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(self.dirs[""] / "cgroup.kill", "1")
        freezer = self._dir("freezer") if self.version == 1 else None
        deadline = time.monotonic() + 2.0
        while True:
            members = self.pids()
            if not members or time.monotonic() > deadline:
                return
            if freezer is not None:  # frozen tasks cannot fork while we kill them
                with contextlib.suppress(OSError):
                    _write(freezer / "freezer.state", "FROZEN")
            for pid in members:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if freezer is not None:
                with contextlib.suppress(OSError):
                    _write(freezer / "freezer.state", "THAWED")
            time.sleep(0.002)

    def remove(self) -> None:
        """Kill what is left, then delete the group(s); retries while members exit."""
        self.kill()
        for d in self.dirs.values():
            for _ in range(200):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)


class Cgroups:
    """A writable cgroup hierarchy and the parent group under which calls get theirs.

    Use :func:`detect` to build one.
    """

    def __init__(self, version: int, parents: dict[str, Path]) -> None:
        self.version = version
        self.parents = parents

    def create(self, memory_bytes: int, pids_max: int) -> CallCgroup:
        """Make a fresh group for one call with the given caps.

        Raises:
            OSError: the group could not be made (the caller treats it as a backend error).
        """
        name = f"{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}"
        dirs: dict[str, Path] = {}
        group = CallCgroup(self.version, dirs)
        try:
            for ctrl, parent in self.parents.items():
                d = parent / name
                d.mkdir()
                dirs[ctrl] = d
            if self.version == 2:
                d = dirs[""]
                _write(d / "memory.max", str(memory_bytes))
                with contextlib.suppress(OSError):
                    _write(d / "memory.swap.max", "0")
                _write(d / "pids.max", str(pids_max))
            else:
                _write(dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
                with contextlib.suppress(OSError):  # absent without swap accounting
                    _write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory_bytes))
                _write(dirs["pids"] / "pids.max", str(pids_max))
        except OSError:
            group.remove()
            raise
        return group

    def reap_stale(self) -> int:
        """Kill and remove groups left by gymhub processes that died; returns how many."""
        removed = 0
        first = next(iter(self.parents.values()))
        with contextlib.suppress(OSError):
            for child in first.iterdir():
                if not child.is_dir():
                    continue
                owner = child.name.split("-", 1)[0]
                if owner.isdigit() and (int(owner) == os.getpid() or pid_alive(int(owner))):
                    continue
                CallCgroup(self.version, {c: p / child.name for c, p in self.parents.items()
                                          if (p / child.name).is_dir()}).remove()
                removed += 1
        return removed


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one we may not signal counts as alive).

    Used to tell stale per-process leftovers (cgroups, workdirs, containers named after
    their owner's pid) from those of a live process; shared by every backend.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _try_parent(path: Path) -> bool:
    """Make ``path`` (our parent group) and check a child can be made and removed in it."""
    try:
        path.mkdir(exist_ok=True)
        probe = path / f"{os.getpid()}-probe-{secrets.token_hex(2)}"
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def _detect_v2() -> Cgroups | None:
    if not (_ROOT / "cgroup.controllers").exists():
        return None
    parent = _ROOT / "gymhub"
    try:
        available = set((_ROOT / "cgroup.controllers").read_text().split())
        if not {"memory", "pids"} <= available or not _try_parent(parent):
            return None
        wanted = [c for c in ("memory", "pids", "cpu") if c in available]
        enable = " ".join(f"+{c}" for c in wanted)
        _write(_ROOT / "cgroup.subtree_control", enable)
        _write(parent / "cgroup.subtree_control", enable)
    except OSError:
        return None
    return Cgroups(2, {"": parent})


def _detect_v1() -> Cgroups | None:
    own = _own_paths()
    parents: dict[str, Path] = {}
    for ctrl in _V1_CONTROLLERS:
        mount = _ROOT / ctrl
        if not (mount / "cgroup.procs").exists():
            if ctrl in _REQUIRED_V1:
                return None
            continue
        base = mount / own.get(ctrl, "/").lstrip("/")
        for candidate in (base / "gymhub", mount / "gymhub"):
            if _try_parent(candidate):
                parents[ctrl] = candidate
                break
        else:
            if ctrl in _REQUIRED_V1:
                return None
    return Cgroups(1, parents)


_cache: dict[str, tuple[Cgroups | None, str]] = {}


def detect() -> tuple[Cgroups | None, str]:
    """Find a writable hierarchy once per process: ``(cgroups or None, reason)``."""
    mode = os.environ.get("GYMHUB_SANDBOX_CGROUPS", "auto").lower()
    if mode in _cache:
        return _cache[mode]
    found: Cgroups | None = None
    if mode == "none":
        reason = "disabled by GYMHUB_SANDBOX_CGROUPS=none"
    elif os.geteuid() != 0:
        reason = "not root: cgroups are not writable"
    else:
        if mode in ("auto", "v2"):
            found = _detect_v2()
        if found is None and mode in ("auto", "v1"):
            found = _detect_v1()
        reason = f"cgroup v{found.version}" if found else "no writable memory+pids cgroup"
    if found is not None:
        found.reap_stale()
    _cache[mode] = (found, reason)
    return found, reason

"""Workdirs made ahead of time and removed afterwards, off the caller's critical path.

Creating a session's workdir costs a ``mkdtemp`` and a tmpfs ``mount``; removing it an
``umount`` and an ``rmtree``. For a one-shot :meth:`Sandbox.run` of a short command
that was about half of the whole call. A :class:`WorkdirPool` keeps a few empty,
mounted workdirs ready and hands used ones to a background thread for removal.

Why this is safe: a used workdir is never handed out again (it is removed, not
recycled), and by the time it is given back no process of its session is alive (each
call's cgroup and pid namespace are gone, and the REPL has been killed), so nothing can
write to it between the session's end and its removal. A workdir that cannot be made in
the background is simply made by the caller, with the error the caller would have got.
"""

from __future__ import annotations

import atexit
import contextlib
import threading

from gymhub.sandbox.workdir import HostWorkdir

__all__ = ["WorkdirPool"]


class WorkdirPool:
    """Ready workdirs of one size and owner; used ones are removed in the background.

    Args:
        size_mb: tmpfs size of every workdir (``Limits.workdir_mb``).
        uid: owner (the sandbox user).
        gid: group of the same.
        keep: empty workdirs kept ready.
    """

    def __init__(self, size_mb: int, uid: int, gid: int, keep: int = 2) -> None:
        self.size_mb, self.uid, self.gid, self.keep = size_mb, uid, gid, keep
        self._ready: list[HostWorkdir] = []
        self._trash: list[HostWorkdir] = []
        self._cond = threading.Condition()
        self._closed = False
        self._failed = False
        self._thread: threading.Thread | None = None
        atexit.register(self.close)

    def take(self) -> HostWorkdir:
        """An empty workdir: a ready one, else one made now (raises OSError like HostWorkdir)."""
        with self._cond:
            workdir = self._ready.pop() if self._ready else None
            self._kick()
        return workdir or HostWorkdir(self.size_mb, self.uid, self.gid)

    def give_back(self, workdir: HostWorkdir) -> None:
        """Remove a used workdir soon (now, once the pool is closed)."""
        with self._cond:
            if not self._closed:
                self._trash.append(workdir)
                self._kick()
                return
        workdir.remove()

    def _kick(self) -> None:
        # Called with the lock held.
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._work, name="gymhub-workdirs",
                                            daemon=True)
            self._thread.start()
        self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._trash
                           or (len(self._ready) < self.keep and not self._failed)):
                    self._cond.wait()
                if self._closed:
                    return
                trash, self._trash = self._trash, []
                make = not trash and len(self._ready) < self.keep and not self._failed
            for workdir in trash:
                workdir.remove()
            if make:
                try:
                    fresh = HostWorkdir(self.size_mb, self.uid, self.gid)
                except OSError:
                    with self._cond:
                        self._failed = True  # the caller will make (and report) its own
                    continue
                with self._cond:
                    if self._closed:
                        fresh.remove()
                        return
                    self._ready.append(fresh)

    def close(self) -> None:
        """Stop the thread and remove every workdir still held (idempotent)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        with self._cond:
            held, self._ready, self._trash = self._ready + self._trash, [], []
        for workdir in held:
            with contextlib.suppress(OSError):
                workdir.remove()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)

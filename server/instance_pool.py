"""Idle environment instances kept for the next episode, and trimmed when load falls.

Building an environment can cost ten times a step, so an instance whose episode
ended normally is kept and reset for the next episode of the same id. How many to
keep is a trade: a closed loop at N concurrent episodes has about N x (two round
trips) / (episode length) instances between "finished" and "reopened" at any time,
far more than a fixed small cap at high N (building echo-v0 anew was a sixth of the
server's CPU at 512 episodes). So :class:`InstancePool` always keeps up to ``recycle``
per id and more while live plus idle instances fit in ``max_episodes``, which the
server must be able to hold anyway; then, so that memory follows the load back down
after a peak, :meth:`InstancePool.trim` closes instances beyond ``recycle`` that nobody
reused for ``idle_ttl_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from gymhub.envs import TextEnv

__all__ = ["InstancePool"]


class InstancePool:
    """Per environment id, a LIFO stack of idle instances with the time each went idle.

    LIFO keeps the hot instances on top: under steady load the bottom of a stack is
    never reached, so it holds exactly what a past peak left behind, oldest first.

    Args:
        env_ids: the ids served.
        recycle: instances always kept per id (0 disables reuse).
        idle_ttl_s: idle seconds after which an instance beyond ``recycle`` is closed
            by :meth:`trim` (``None``: never).
        dispose: closes an instance that is not kept (off the event loop).
    """

    def __init__(self, env_ids: Iterable[str], recycle: int, idle_ttl_s: float | None,
                 dispose: Callable[[TextEnv], None]) -> None:
        self.recycle = recycle
        self.idle_ttl_s = idle_ttl_s
        self._dispose = dispose
        self._free: dict[str, list[tuple[TextEnv, float]]] = {i: [] for i in env_ids}

    def __len__(self) -> int:
        return sum(len(f) for f in self._free.values())

    def count(self, env_id: str) -> int:
        """Idle instances of one id."""
        return len(self._free[env_id])

    def take(self, env_id: str) -> TextEnv | None:
        """The most recently idle instance of ``env_id``, if any."""
        free = self._free[env_id]
        return free.pop()[0] if free else None

    def give_back(self, env_id: str, env: TextEnv, *, live: int, max_episodes: int) -> None:
        """Keep ``env`` for reuse if the bound allows, else close it.

        Args:
            env_id: its environment id.
            env: an instance whose episode ended normally.
            live: environments in use now.
            max_episodes: what the server holds at most, live and idle together.
        """
        free = self._free[env_id]
        idle = len(self) if len(self._free) > 1 else len(free)
        if self.recycle > 0 and (len(free) < self.recycle or live + idle < max_episodes):
            free.append((env, time.monotonic()))
        else:
            self._dispose(env)

    def trim(self, now: float | None = None) -> int:
        """Close instances beyond ``recycle`` per id that sat idle past ``idle_ttl_s``.

        Returns:
            How many instances were closed.
        """
        if self.idle_ttl_s is None:
            return 0
        now = time.monotonic() if now is None else now
        trimmed = 0
        for free in self._free.values():
            stale = 0
            while stale < len(free) - self.recycle and now - free[stale][1] >= self.idle_ttl_s:
                stale += 1
            for env, _ in free[:stale]:
                self._dispose(env)
            del free[:stale]
            trimmed += stale
        return trimmed

    def drain(self) -> Iterator[TextEnv]:
        """Hand over every idle instance (to close at shutdown), keeping none."""
        for free in self._free.values():
            envs = [env for env, _ in free]
            free.clear()
            yield from envs

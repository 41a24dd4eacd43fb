"""The episode manager: every open episode of one server, and the rules that keep them sane.

Why a manager rather than a dict in the route handlers: the faults that kill
multi-turn runs live here. Episodes leak when a client dies (so idle ones are
reaped after a TTL, on by default); a retried step must not be applied twice (so
each episode remembers its last ``seq`` and the reply it produced); a hung
environment must not hang the server (so each step has a deadline, and the episode
is closed when it passes); blocking environment code must not stall the event loop
(so it runs in a bounded thread pool); and shutdown must not drop work (so
:meth:`EpisodeManager.drain` waits for in-flight steps, then closes every episode).

Every manager draws a random *incarnation* (:mod:`.episode_ids`) carried in each
episode id it issues, so a step for an episode of an earlier start of the server (or of
another server) is answered ``episode_lost``, not ``episode_not_found``: a restart is an
infrastructure failure the learner masks, not a caller's mistake. The last applied
``seq`` replays its cached reply only for the same action; another action under that
``seq`` is refused (``seq_reused``), as an idempotency key reused with other content is.

Steps of one episode are serialised by a per-episode :class:`asyncio.Lock`; steps of
different episodes run concurrently, up to the pool's size.

Replies are built and serialised to JSON bytes in the worker thread that ran the
environment, so the event loop only moves bytes; the same bytes are the idempotency
cache.

Environment instances whose episode ended normally are *recycled* (kept and reset
for the next episode, see :mod:`.instance_pool`), because building an environment can
cost ten times a step; the reaper also closes those a past load peak left idle. An
episode that was closed early, reaped or timed out is closed and never recycled, so
resources of an abandoned episode are released at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from gymhub.envs import Registry, TextEnv
from gymhub.errors import (
    AtCapacity,
    ConfigError,
    DeadlineExceeded,
    EnvCrashed,
    EnvNotFound,
    EpisodeError,
    EpisodeFinished,
    EpisodeLost,
    EpisodeNotFound,
    GymhubError,
    InvalidRequest,
    SeqConflict,
    SeqReused,
    ServerDraining,
    ServerError,
    TaskNotFound,
)
from gymhub.types import Message

from .catalog import Catalog
from .episode_ids import IdSource, incarnation_of, new_incarnation
from .episode_record import Episode, Holder, action_digest, creation_reply, step_reply
from .instance_pool import InstancePool
from .metrics import Metrics
from .workers import Closable, Workers

__all__ = ["Episode", "EpisodeManager"]

log = logging.getLogger("gymhub.server")
T = TypeVar("T")

#: How many closed episode ids are remembered to explain a later 404.
_TOMBSTONES = 10_000

#: Errors from a call into an episode that answer the request without saying the
#: episode is broken: an ended episode, a stale ``seq``, a server going down.
_PROTOCOL_ERRORS = (EpisodeError, SeqConflict, ServerDraining)


class EpisodeManager:
    """Holds and drives the episodes of one server process.

    Args:
        registry: where environment ids are looked up.
        env_ids: the environments this server serves (validated now: unknown ids raise
            :class:`~gymhub.errors.EnvNotFound` with suggestions).
        max_episodes: cap on live episodes; creations beyond it get :class:`AtCapacity`.
        ttl_s: idle seconds after which a live episode is reaped (``None`` disables;
            records of finished episodes are still dropped after ``min(ttl_s, 60)`` s).
        step_timeout_s: deadline for one reset or step, queueing in the pool included.
        workers: threads running environment code.
        retry_after_s: what a capacity refusal tells the client to wait.
        recycle: finished environments always kept per id for reuse; more are kept
            while live plus idle ones fit in ``max_episodes`` (0 disables reuse).
        idle_env_ttl_s: idle seconds after which a kept environment beyond ``recycle``
            is closed (``None`` keeps them until shutdown).
        env_kwargs: constructor arguments per environment id.
        metrics: where to count; a private set is made if omitted.
    """

    def __init__(
        self,
        registry: Registry,
        env_ids: Sequence[str],
        *,
        max_episodes: int = 1024,
        ttl_s: float | None = 600.0,
        step_timeout_s: float = 60.0,
        workers: int = 8,
        retry_after_s: float = 1.0,
        recycle: int = 64,
        idle_env_ttl_s: float | None = 60.0,
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        if not env_ids:
            raise ConfigError("serve at least one environment id")
        if max_episodes < 1 or workers < 1 or step_timeout_s <= 0:
            raise ConfigError("max_episodes and workers must be >= 1, step_timeout_s > 0")
        if ttl_s is not None and ttl_s <= 0:
            raise ConfigError("ttl_s must be positive (or None to disable reaping)")
        if idle_env_ttl_s is not None and idle_env_ttl_s <= 0:
            raise ConfigError("idle_env_ttl_s must be positive (or None to keep idle envs)")
        self.registry = registry
        self.specs = {i: registry.spec(i) for i in dict.fromkeys(env_ids)}
        self.max_episodes = max_episodes
        self.ttl_s = ttl_s
        self.finished_ttl_s = min(ttl_s, 60.0) if ttl_s is not None else 60.0
        self.step_timeout_s = step_timeout_s
        self.workers = workers
        self.retry_after_s = retry_after_s
        self.idle_env_ttl_s = idle_env_ttl_s
        self.env_kwargs = {k: dict(v) for k, v in (env_kwargs or {}).items()}
        self.metrics = metrics or Metrics(lambda: self.live)
        self.episodes: dict[str, Episode] = {}
        self.live = 0  # live environments, including creations in progress
        self.draining = False
        self.catalog = Catalog(registry)
        self.instance_pool = InstancePool(self.specs, recycle, idle_env_ttl_s, self._dispose)
        # closed id -> (why, lost): explains a later request for it
        self._tombstones: OrderedDict[str, tuple[str, bool]] = OrderedDict()
        self._creating: dict[str, asyncio.Future[bytes]] = {}
        self._requests: dict[str, Episode] = {}  # request_id -> episode, for idempotent create
        self.pool = Workers(workers, step_timeout_s)
        self._ids = IdSource(new_incarnation())
        self._reaper: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the worker pool and the reaper, and build one probe per environment.

        Called by the app's lifespan. Hosts that skip the lifespan (some test clients)
        still work: the first request starts the manager (see :meth:`_ensure_started`).
        """
        if self.pool.running:
            return
        if self.draining:  # started again after a drain: an in-process restart, clean state
            self.draining = False
            self._ids = IdSource(new_incarnation())  # a new start: the old episodes are lost
            self.catalog.clear()
            self._reaper = None
        self.pool.start()
        for env_id in self.specs:
            if env_id not in self.catalog:
                probe = await self.pool.run(functools.partial(self._build, env_id))
                self.catalog.add(self.specs[env_id], probe, self.env_kwargs.get(env_id))
        if self._reaper is None:  # also drops finished episodes' records
            self._reaper = asyncio.create_task(self._reap_loop())

    def _ensure_started(self) -> None:
        if not self.pool.running:
            if self.draining:
                raise ServerDraining("the server is shutting down",
                                     retry_after=self.retry_after_s)
            for env_id in self.specs:
                if env_id not in self.catalog:
                    self.catalog.add(self.specs[env_id], self._build(env_id),
                                     self.env_kwargs.get(env_id))
            self.pool.start()
            if self._reaper is None:
                self._reaper = asyncio.get_running_loop().create_task(self._reap_loop())

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Stop accepting work, let in-flight calls finish, then close every episode.

        Safe to call twice (an embedding application and the lifespan may both call it).
        """
        if self.draining and not self.pool.running:
            return
        self.draining = True
        await self.pool.wait_idle(timeout_s)
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        envs: list[tuple[str, TextEnv]] = []
        for ep in list(self.episodes.values()):
            if ep.env is not None:
                envs.append((ep.env_id, ep.env))
                self._count_finish(ep.env_id, "shutdown")
            self._forget(ep, "the server shut down with it open", lost=True)
        envs.extend(("", e) for e in self.instance_pool.drain())
        closed_episodes = len(envs)
        envs.extend(("", e) for e in self.catalog.envs())
        await self.pool.close_all([e for _, e in envs], timeout_s)
        self.pool.shutdown()
        self.live = 0
        log.info("drained: closed %d open episode(s) and every idle environment", closed_episodes)

    # ------------------------------------------------------------------- queries
    @property
    def incarnation(self) -> str:
        """This start's random id, carried in every episode id it issues (``/healthz``)."""
        return self._ids.incarnation

    def env_infos(self) -> list[dict[str, Any]]:
        """What ``GET /v1/envs`` lists."""
        self._ensure_started()
        return self.catalog.infos()

    async def tasks(self, env_id: str, offset: int, limit: int) -> dict[str, Any]:
        """Task ids and tags of an environment (never gold answers)."""
        self._ensure_started()
        return self.catalog.tasks(env_id, offset, limit)

    async def verifier_cases(self, env_id: str, task_id: str) -> list[dict[str, Any]]:
        """The environment's golden verifier cases for one task."""
        self._ensure_started()
        return await self.pool.run(functools.partial(self.catalog.cases, env_id, task_id))

    async def verify(self, env_id: str, task_id: str, submission: Any) -> dict[str, Any]:
        """Score a submission for a task outside any episode."""
        self._ensure_started()
        return await self.pool.run(
            functools.partial(self.catalog.verify, env_id, task_id, submission))

    def get(self, episode_id: str) -> Episode:
        """The open episode, or the error saying why it is gone (see :meth:`_gone`)."""
        ep = self.episodes.get(episode_id)
        if ep is None or ep.closed:
            raise self._gone(episode_id)
        return ep

    def _gone(self, episode_id: str) -> ServerError:
        """Why no open episode has this id: lost with a server start, or not found.

        :class:`EpisodeLost` when the server lost it (it shut down with the episode
        open, or the id names another incarnation: a restart); otherwise
        :class:`EpisodeNotFound` (closed, reaped, or never issued here; a malformed id
        too, as before incarnations).
        """
        tomb = self._tombstones.get(episode_id)
        if tomb is not None:
            why, lost = tomb
            return (EpisodeLost if lost else EpisodeNotFound)(
                f"no open episode {episode_id!r}: {why}")
        issuer = incarnation_of(episode_id)
        if issuer is not None and issuer != self.incarnation:
            return EpisodeLost(  # the server cannot tell a restart from a misrouted id
                f"episode {episode_id!r} was opened by server incarnation {issuer}, and this "
                f"server is incarnation {self.incarnation}: the server that held it restarted "
                "(or the id was sent to another server), so the episode is lost; open a new one")
        return EpisodeNotFound(f"no open episode {episode_id!r} (never opened here)")

    # ------------------------------------------------------------------- actions
    async def create(
        self,
        env_id: str,
        *,
        seed: int | None = None,
        task_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        request_id: str | None = None,
    ) -> bytes:
        """Open an episode and return its serialised creation reply.

        Raises:
            EnvNotFound, AtCapacity, ServerDraining, TaskNotFound, DeadlineExceeded,
            EnvCrashed: see the error codes.
        """
        if self.draining:
            raise ServerDraining("the server is shutting down; open the episode elsewhere",
                                 retry_after=self.retry_after_s)
        if env_id not in self.specs:
            self.registry.spec(env_id)  # raises EnvNotFound with suggestions
            served = ", ".join(self.specs)
            raise EnvNotFound(f"environment {env_id!r} is not served here; served: {served}")
        if request_id is not None:
            known = self._by_request(request_id)
            if known is not None:
                return known
            pending = self._creating.get(request_id)
            if pending is not None:
                return await asyncio.shield(pending)
        if self.live >= self.max_episodes:
            self.metrics.capacity_rejections.inc()
            raise AtCapacity(f"the server holds its maximum of {self.max_episodes} episodes; "
                             "retry later or close finished episodes",
                             retry_after=self.retry_after_s)
        self.live += 1
        waiter: asyncio.Future[bytes] | None = None
        if request_id is not None:
            waiter = asyncio.get_running_loop().create_future()
            self._creating[request_id] = waiter
        try:
            reply = await self._create(env_id, seed, task_id, options, request_id)
        except BaseException as exc:
            self.live -= 1
            if waiter is not None:
                if isinstance(exc, Exception):
                    waiter.set_exception(exc)
                    waiter.exception()  # mark retrieved: nobody may be waiting
                else:
                    waiter.cancel()
            raise
        finally:
            if request_id is not None:
                self._creating.pop(request_id, None)
        if waiter is not None:
            waiter.set_result(reply)
        return reply

    async def step(self, episode_id: str, action: Any, seq: int) -> bytes:
        """Apply step ``seq`` of an episode; a repeat of the last ``seq`` replays its reply.

        The repeat must carry the same action (compared by :func:`action_digest`): a
        retry is answered from the cache, another action under a used ``seq`` is not.

        Raises:
            EpisodeNotFound, EpisodeLost, SeqConflict, SeqReused, EpisodeFinished,
            DeadlineExceeded, EnvCrashed.
        """
        ep = self.get(episode_id)
        async with ep.lock:
            if ep.closed:
                self.get(episode_id)  # raises, with the reason
            ep.last_used = time.monotonic()
            if seq == ep.seq and ep.last_reply is not None:
                if action_digest(action) != ep.last_action:
                    raise SeqReused(
                        f"step seq {seq} of episode {episode_id} was already applied with a "
                        f"different action; send seq {seq + 1} for a new step, or the same "
                        f"action to replay step {seq}")
                self.metrics.step_retries.inc()
                return ep.last_reply
            if ep.env is None:
                raise EpisodeFinished(f"episode {episode_id} has ended (last step {ep.seq}); "
                                      "open a new episode")
            if seq != ep.seq + 1:
                raise SeqConflict(f"step seq {seq} is out of order: the last applied step is "
                                  f"{ep.seq}, so send {ep.seq + 1} (or {ep.seq} to replay it)",
                                  expected=ep.seq + 1)
            env = ep.env

            def work() -> tuple[bytes, str | None, bytes]:
                digest = action_digest(action)  # in the worker, before the env sees it
                return (*step_reply(env, action, seq), digest)

            t0 = time.perf_counter()
            reply, ended, digest = await self._drive(ep, work, f"step {seq}")
            seconds, count = self.metrics.for_env(ep.env_id)
            seconds.observe(time.perf_counter() - t0)
            count.inc()
            ep.seq, ep.last_reply, ep.last_action = seq, reply, digest
            if ended is not None:
                self._count_finish(ep.env_id, ended)
                self._release(ep, recycle=True)
            return reply

    async def close(self, episode_id: str) -> None:
        """Close an episode (waiting for an in-flight step) and release its environment.

        Raises:
            EpisodeNotFound, EpisodeLost: no open episode has this id (see :meth:`_gone`).
        """
        ep = self.get(episode_id)
        async with ep.lock:
            if ep.closed:
                self.get(episode_id)
            if ep.env is not None:
                self._count_finish(ep.env_id, "closed")
            self._abandon(ep, None, "closed by the client", reusable=True)

    async def gold(self, episode_id: str) -> dict[str, Any]:
        """The reference action for the episode's current state (``reference(..., "gold")``)."""
        return await self.reference(episode_id, "gold")

    async def reference(self, episode_id: str, policy: str, seed: int = 0) -> dict[str, Any]:
        """A reference policy's next action in the episode: gold, noop, refuse or random.

        ``random`` draws from a generator seeded by ``seed``, so a client replays it.

        Raises:
            EpisodeNotFound, EpisodeLost, EpisodeFinished, DeadlineExceeded, EnvCrashed: as for
            :meth:`step`; an action that overruns or raises closes the episode.
            InvalidRequest: an unknown policy.
        """
        actions: dict[str, Callable[[TextEnv], Message]] = {
            "gold": lambda env: env.gold_action(),
            "noop": lambda env: env.noop_action(),
            "refuse": lambda env: env.refuse_action(),
            "random": lambda env: env.random_action(random.Random(seed)),
        }
        if policy not in actions:
            raise InvalidRequest(f"unknown reference policy {policy!r}; available: "
                                f"{', '.join(actions)}")
        ep = self.get(episode_id)
        async with ep.lock:
            env = ep.env
            if env is None:
                raise EpisodeFinished(f"episode {episode_id} has ended")
            ep.last_used = time.monotonic()
            act = actions[policy]
            message: Message = await self._drive(ep, lambda: act(env),
                                                 f"the {policy} action")
            return message.to_dict()

    def reap(self, now: float | None = None) -> int:
        """Close episodes idle past their TTL; returns how many were reaped."""
        now = time.monotonic() if now is None else now
        reaped = 0
        for ep in list(self.episodes.values()):
            if ep.lock.locked():
                continue
            limit = self.ttl_s if ep.env is not None else self.finished_ttl_s
            if limit is None or now - ep.last_used < limit:
                continue
            if ep.env is not None:
                self._count_finish(ep.env_id, "reaped")
                reaped += 1
            self._abandon(ep, None, f"reaped after {limit:g} s without a request",
                          reusable=True)
        return reaped

    # ------------------------------------------------------------------ internals
    def _build(self, env_id: str) -> TextEnv:
        return self.specs[env_id].make(**self.env_kwargs.get(env_id, {}))

    async def _create(self, env_id: str, seed: int | None, task_id: str | None,
                      options: Mapping[str, Any] | None, request_id: str | None) -> bytes:
        recycled = self.instance_pool.take(env_id)
        if recycled is not None and seed is None:
            seed = self._ids.seed()  # a recycled env must not replay its old RNG
        opts = dict(options or {})
        if task_id is not None:
            opts["task_id"] = task_id
        episode_id = self._ids.episode_id()
        # What the call took or built, so that whoever gives up on it can close it.
        holder: list[TextEnv] = [] if recycled is None else [recycled]

        def work() -> bytes:
            if not holder:
                holder.append(self._build(env_id))
            return creation_reply(holder[0], episode_id, env_id, seed, opts or None)

        # A timeout or a cancelled caller (the request task, a shutdown) both close the
        # held environment once the call returns: it may still be running reset.
        unclaimed = Holder(holder)
        try:
            reply = await self._run(unclaimed, work, on_cancel=unclaimed)
        except (TaskNotFound, ConfigError):
            if holder:
                self._give_back(env_id, holder[0])
            raise
        except DeadlineExceeded:
            raise
        except GymhubError:
            if holder:
                self._dispose(holder[0])
            raise
        except Exception as exc:
            log.exception("environment %s crashed in reset", env_id)
            if holder:
                self._dispose(holder[0])
            raise EnvCrashed(
                f"the environment raised {type(exc).__name__} in reset: {exc}") from exc
        ep = Episode(episode_id, env_id, holder[0], created_reply=reply, request_id=request_id)
        self.episodes[episode_id] = ep
        if request_id is not None:
            self._requests[request_id] = ep
        self.metrics.episodes_created.labels(env_id).inc()
        return reply

    async def _drive(self, ep: Episode, fn: Callable[[], T], what: str) -> T:
        """Run environment code of an open episode; close the episode if that code fails.

        Every call into a live episode's environment (a step, the gold action) goes
        through here so that no failure leaves a broken episode holding a capacity
        slot until the TTL reaper finds it: the client is told the episode is gone,
        so the server must not keep it.

        Args:
            ep: the episode, whose lock the caller holds and whose ``env`` is set.
            fn: the blocking call, run in the pool under the deadline.
            what: names the call in the reason a later request for the episode gets.

        Raises:
            DeadlineExceeded: ``fn`` ran past the deadline; the episode was closed (its
                environment is closed when the stuck call returns).
            EnvCrashed: ``fn`` raised; the episode was closed. A :class:`GymhubError`
                from the environment (a lost database connection's ``BackendError``)
                is wrapped too, so the client gets the stable ``env_error`` code that
                says the episode is gone, rather than a 500 for an episode kept open.
            EpisodeError, SeqConflict, ServerDraining: protocol answers, passed on
                as they are; the episode stays as it was.
        """
        try:
            return await self._run(ep.env, fn)
        except DeadlineExceeded:
            self._abandon(ep, "deadline", f"closed after {what} ran past the "
                          f"{self.step_timeout_s:g} s deadline")
            raise
        except _PROTOCOL_ERRORS:
            raise
        except Exception as exc:
            log.exception("environment %s crashed in %s", ep.env_id, what)
            self._abandon(ep, "env_error", f"closed after the environment crashed in {what}: "
                          f"{exc!r}")
            code = f" ({exc.code})" if isinstance(exc, GymhubError) else ""
            raise EnvCrashed(f"the environment raised {type(exc).__name__}{code} in {what}: "
                             f"{exc}; the episode was closed") from exc

    async def _run(self, env: Closable | None, fn: Callable[[], T], *,
                   on_cancel: Closable | None = None) -> T:
        """Run blocking ``fn`` in the pool; on a timeout ``env`` is closed when it returns.

        ``on_cancel`` is closed when the call returns if the caller is cancelled while
        waiting (see :meth:`Workers.run`).
        """
        self._ensure_started()
        return await self.pool.run(fn, on_timeout=env, on_cancel=on_cancel)

    def _release(self, ep: Episode, *, recycle: bool, reusable: bool = False) -> None:
        """Detach the environment of an ended episode; the record stays for replays.

        Args:
            ep: the episode.
            recycle: the episode ended normally: keep its environment as it is.
            reusable: the episode was cut short but its environment is sound (the
                client closed it, the reaper did): end its episode in the pool
                (:meth:`TextEnv.end_episode` frees the episode's resources; ``close``
                is final and is not used), then keep it. Building a new instance costs
                several resets.
        """
        env, ep.env = ep.env, None
        self.live -= 1
        if env is None:
            return
        if recycle:
            self._give_back(ep.env_id, env)
        elif reusable and not self.draining:
            env_id = ep.env_id
            self.pool.detach(env.end_episode, then=lambda: self._give_back(env_id, env),
                             otherwise=lambda: self._dispose(env))
        else:
            self._dispose(env)

    def _give_back(self, env_id: str, env: TextEnv) -> None:
        """Keep a finished environment for the next episode, within the memory bound."""
        if self.draining:
            self._dispose(env)
        else:
            self.instance_pool.give_back(env_id, env, live=self.live,
                                    max_episodes=self.max_episodes)

    def _dispose(self, env: TextEnv) -> None:
        self.pool.close_later(env)

    def _abandon(self, ep: Episode, reason: str | None, why: str, *,
                 reusable: bool = False) -> None:
        """Close an episode that did not end normally and forget it.

        ``reusable``: see :meth:`_release`; never for a crashed or stuck environment.
        """
        if ep.env is not None:
            if reason is not None:
                self._count_finish(ep.env_id, reason)
            if reason == "deadline":  # the stuck call's own callback closes the env
                ep.env = None
                self.live -= 1
            else:
                self._release(ep, recycle=False, reusable=reusable)
        self._forget(ep, why)

    def _forget(self, ep: Episode, why: str, *, lost: bool = False) -> None:
        """Drop a closed episode, remembering ``why`` (and whether it was ``lost``)."""
        ep.closed = True
        self.episodes.pop(ep.id, None)
        if ep.request_id is not None:
            self._requests.pop(ep.request_id, None)
        self._tombstones[ep.id] = (why, lost)
        if len(self._tombstones) > _TOMBSTONES:
            self._tombstones.popitem(last=False)

    def _by_request(self, request_id: str) -> bytes | None:
        ep = self._requests.get(request_id)
        return ep.created_reply if ep is not None and not ep.closed else None

    def _count_finish(self, env_id: str, reason: str) -> None:
        self.metrics.episodes_finished.labels(env_id, reason).inc()

    async def _reap_loop(self) -> None:
        shortest = min(self.ttl_s or self.finished_ttl_s, self.idle_env_ttl_s or math.inf)
        interval = max(0.05, min(shortest / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            try:
                n = self.reap()
                trimmed = self.instance_pool.trim()
            except Exception:  # the reaper must outlive any one bad episode
                log.exception("reaper failed")
                continue
            if n:
                log.info("reaped %d idle episode(s)", n)
            if trimmed:
                log.info("closed %d environment(s) left idle after a load peak", trimmed)


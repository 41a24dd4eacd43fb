"""``gymhub.launch.ray``: N ``gymhub serve`` processes as Ray actors, and their URLs.

Why actors and not Ray Serve: Serve routes every request to any replica, so an episode's
steps land on replicas that do not hold it (measured: 245 of 300 steps saw another
replica's state). An actor is one process on one node; it runs ``gymhub serve`` as a
child (:class:`~gymhub.launch.server_process.ServerProcess`) and reports the URL, and
:class:`~gymhub.client.EnvPool` then talks HTTP to that URL directly. Ray does what it is
good at, placement and restarts:

* a placement group of N one-CPU bundles with strategy ``SPREAD`` puts the servers on as
  many nodes as it can (and fails loudly when the cluster cannot hold N CPUs);
* ``max_restarts=-1``: a dead actor is started again in its bundle; its server comes
  back with an empty memory (a new incarnation), on its predecessor's port when that is
  free, so a step of an old episode reaches it and is answered ``episode_lost``;
* :meth:`RayServers.refresh` (run in a loop by :meth:`RayServers.supervise`) notices the
  new URL and rewrites the URLs file atomically (a reader sees the old list or the new,
  never half of one).

Ray is imported only inside the functions here (``import gymhub.launch`` stays light);
without the ``gymhub[ray]`` extra they raise a :class:`~gymhub.errors.ConfigError` naming it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from gymhub.errors import ConfigError

__all__ = ["RayServers", "ray", "write_urls"]

log = logging.getLogger("gymhub.launch")


def _import_ray() -> ModuleType:
    try:
        import ray as ray_module
    except ModuleNotFoundError as exc:
        raise ConfigError(f"launching servers on Ray needs {exc.name!r}: "
                          "pip install 'gymhub[ray]'") from exc
    return ray_module


def write_urls(path: str | os.PathLike[str], urls: Sequence[str]) -> None:
    """Write the URLs file atomically, in the format ``EnvPool.from_file`` reads.

    The client's own writer (:func:`gymhub.client.url_file.write_urls_file`), imported
    here so that ``import gymhub.launch`` does not load the client (and httpx).
    """
    from gymhub.client.url_file import write_urls_file

    write_urls_file(path, urls)


@dataclass
class RayServers:
    """Servers launched by :func:`ray`: their URLs, and the handles to supervise and stop them.

    Attributes:
        urls: the current URL of each server, in a fixed order (server ``i`` keeps index
            ``i`` across restarts).
        incarnations: each server's current incarnation (changes when Ray restarts it).
        restarts: how many times each server was seen restarted.
        urls_file: where the URLs are kept current, if anywhere.
    """

    actors: list[Any]
    urls: list[str]
    incarnations: list[str]
    placement_group: Any
    urls_file: Path | None = None
    owns_ray: bool = False
    restarts: list[int] = field(default_factory=list)
    drain_timeout_s: float = 30.0
    _pending: dict[int, Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.restarts = self.restarts or [0] * len(self.actors)

    def __enter__(self) -> RayServers:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def refresh(self, timeout: float = 1.0) -> list[int]:
        """Ask every actor for its URL; return the indices whose server was restarted.

        A restarted server usually keeps its URL (it takes its predecessor's port back);
        on another node, or with the port taken, it has a new one, and ``urls_file`` is
        rewritten. An actor that Ray is restarting does not answer yet: its question
        stays pending (one at a time) and is collected by a later call. Until then the
        dead URL stays listed, and ``EnvPool`` skips an unreachable server for its
        cool-down.
        """
        ray = _import_ray()
        with self._lock:
            for i, actor in enumerate(self.actors):
                if i not in self._pending:
                    self._pending[i] = actor.info.remote()
            refs = list(self._pending.values())
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
            finished = set(done)
            changed: list[int] = []
            for i, ref in list(self._pending.items()):
                if ref not in finished:
                    continue
                del self._pending[i]
                try:
                    info = ray.get(ref)
                except Exception as exc:  # died while answering; asked again next time
                    log.info("server %d did not answer: %s", i, type(exc).__name__)
                    continue
                if info["error"]:  # a restart that could not start its server: try again
                    log.warning("server %d: %s; restarting it", i, info["error"])
                    ray.kill(self.actors[i], no_restart=False)
                    continue
                if info["incarnation"] != self.incarnations[i]:
                    moved = info["url"] != self.urls[i]
                    self.incarnations[i], self.urls[i] = info["incarnation"], info["url"]
                    self.restarts[i] += 1
                    changed.append(i)
                    if moved and self.urls_file is not None:
                        write_urls(self.urls_file, self.urls)
            return changed

    def supervise(self, interval_s: float = 1.0, *,
                  on_change: Callable[[int, str], None] | None = None,
                  stop: threading.Event | None = None) -> None:
        """Call :meth:`refresh` every ``interval_s`` until ``stop`` (or :meth:`stop`) is set.

        ``on_change(i, url)`` is told of each restarted server's new URL.
        """
        halt = stop or self._stop
        while not halt.is_set() and not self._stop.is_set():
            for i in self.refresh(timeout=min(interval_s, 1.0)):
                if on_change is not None:
                    on_change(i, self.urls[i])
            halt.wait(interval_s)

    def supervise_in_background(self, interval_s: float = 1.0, *,
                                on_change: Callable[[int, str], None] | None = None) -> None:
        """Run :meth:`supervise` in a daemon thread (ended by :meth:`stop`)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self.supervise, args=(interval_s,), kwargs={"on_change": on_change},
                name="gymhub-launch-supervisor", daemon=True)
            self._thread.start()

    def stop(self, drain_timeout_s: float | None = None) -> list[int | None]:
        """Drain every server (``SIGTERM``: in-flight steps finish), then end the actors.

        Idempotent. A Ray cluster that :func:`ray` started itself is shut down too.

        Returns:
            Each server's exit status: ``-SIGTERM`` (uvicorn re-raises the signal once
            it has drained) or 0 when it drained in time, ``-SIGKILL`` when the drain ran
            past the timeout, ``None`` when unknown (its actor was down); empty when
            already stopped.
        """
        if self._stop.is_set():
            return []
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        ray = _import_ray()
        if not ray.is_initialized():
            return [None] * len(self.actors)
        timeout = self.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        refs = [a.stop.remote(timeout) for a in self.actors]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout + 10)
        statuses: list[int | None] = []
        for ref in refs:
            try:
                statuses.append(ray.get(ref) if ref in set(done) else None)
            except Exception:  # the actor was down (restarting, or its node lost)
                statuses.append(None)
        for actor in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        from ray.util.placement_group import remove_placement_group

        with contextlib.suppress(Exception):
            remove_placement_group(self.placement_group)
        if self.owns_ray:
            ray.shutdown()
        return statuses


def _drain_timeout(serve_args: Sequence[str]) -> float:
    """The ``--drain-timeout`` among ``gymhub serve``'s options (its default: 30 s)."""
    args = list(serve_args)
    for k, arg in enumerate(args):
        if arg == "--drain-timeout" and k + 1 < len(args):
            return float(args[k + 1])
        if arg.startswith("--drain-timeout="):
            return float(arg.split("=", 1)[1])
    return 30.0


def ray(env_ids: Sequence[str], *, servers: int, address: str | None = None,
        urls_file: str | os.PathLike[str] | None = None, serve_args: Sequence[str] = (),
        token: str | None = None, ready_timeout_s: float = 120.0,
        on_ready: Callable[[int, str], None] | None = None,
        init_kwargs: dict[str, Any] | None = None) -> RayServers:
    """Start ``servers`` ``gymhub serve ENV_IDS`` processes as Ray actors; return their URLs.

    Args:
        env_ids: environments every server serves.
        servers: how many servers (one CPU each).
        address: ``None`` starts a local Ray cluster for this process; ``"auto"`` joins
            the cluster ``ray start`` runs here; ``"HOST:PORT"`` (or ``ray://...``) joins
            that one. Ignored when Ray is already initialized in this process.
        urls_file: keep the URLs here, one per line, rewritten atomically on every change.
        serve_args: more ``gymhub serve`` options, e.g. ``("--max-episodes", "2048")``.
        token: the servers' bearer token (given to them in ``GYMHUB_SERVER_TOKEN``).
        ready_timeout_s: how long placement and each server's startup may take.
        on_ready: called with ``(index, url)`` as each server starts answering.
        init_kwargs: more ``ray.init`` arguments when this call starts or joins a cluster.

    Returns:
        A :class:`RayServers` (a context manager: leaving it drains and ends the servers).

    Raises:
        ConfigError: Ray is not installed, ``servers`` < 1, the cluster cannot place
            ``servers`` one-CPU servers within ``ready_timeout_s``, or a server could not
            start (its own error is in the message).
    """
    if servers < 1:
        raise ConfigError(f"servers must be at least 1, got {servers}")
    if not env_ids:
        raise ConfigError("name at least one environment to serve")
    rt = _import_ray()
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from .server_process import ServerProcess

    owns = not rt.is_initialized()
    if owns:
        kwargs: dict[str, Any] = {"include_dashboard": False} if address is None else {}
        rt.init(address=address or "local", **{**kwargs, **(init_kwargs or {})})
    pg = placement_group([{"CPU": 1}] * servers, strategy="SPREAD")
    done, _ = rt.wait([pg.ready()], timeout=ready_timeout_s)
    if not done:
        remove_placement_group(pg)
        cpus = rt.cluster_resources().get("CPU", 0)
        if owns:
            rt.shutdown()
        raise ConfigError(f"the Ray cluster cannot place {servers} one-CPU servers within "
                          f"{ready_timeout_s:g} s (it has {cpus:g} CPUs in all)")
    actor_cls = rt.remote(ServerProcess)
    actors = [
        actor_cls.options(
            num_cpus=1, max_restarts=-1, max_task_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=i),
        ).remote(list(env_ids), list(serve_args), token=token, ready_timeout_s=ready_timeout_s)
        for i in range(servers)
    ]
    handle = RayServers(actors=actors, urls=[""] * servers, incarnations=[""] * servers,
                        placement_group=pg, owns_ray=owns,
                        urls_file=Path(urls_file) if urls_file is not None else None,
                        drain_timeout_s=_drain_timeout(serve_args))
    try:
        _wait_ready(rt, handle, ready_timeout_s + 30, on_ready)
    except BaseException:
        handle.stop(drain_timeout_s=5)
        raise
    return handle


def _wait_ready(rt: ModuleType, handle: RayServers, timeout: float,
                on_ready: Callable[[int, str], None] | None) -> None:
    """Collect each actor's URL as it comes; write the URLs file once all are in."""
    pending = {a.info.remote(): i for i, a in enumerate(handle.actors)}
    deadline = time.monotonic() + timeout
    while pending:
        done, _ = rt.wait(list(pending), num_returns=1,
                          timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            raise ConfigError(f"{len(pending)} of {len(handle.actors)} servers were not "
                              f"ready within {timeout:g} s")
        i = pending.pop(done[0])
        info = rt.get(done[0])
        if info["error"]:
            raise ConfigError(f"server {i} did not start: {info['error']}")
        handle.urls[i], handle.incarnations[i] = info["url"], info["incarnation"]
        if on_ready is not None:
            on_ready(i, info["url"])
    if handle.urls_file is not None:
        write_urls(handle.urls_file, handle.urls)

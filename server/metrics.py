"""Prometheus metrics of one server, on a registry of its own.

Each app gets its own :class:`prometheus_client.CollectorRegistry` so that several
apps in one process (tests, an embedding application) do not collide on metric
names, and ``/metrics`` shows only this server.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: Step latency buckets: from a trivial in-memory step to a slow sandboxed one.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            10.0, 30.0, 60.0)


class Metrics:
    """The server's counters, gauges and histograms.

    Args:
        open_episodes: called at scrape time for the number of open episodes.
    """

    def __init__(self, open_episodes: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.episodes_open = Gauge("gymhub_episodes_open", "Episodes currently open.", registry=r)
        self.episodes_open.set_function(lambda: float(open_episodes()))
        self.episodes_created = Counter(
            "gymhub_episodes_created", "Episodes opened.", ["env"], registry=r)
        self.episodes_finished = Counter(
            "gymhub_episodes_finished",
            "Episodes finished, by how (terminated, truncated, closed, reaped, deadline, "
            "env_error, shutdown).", ["env", "reason"], registry=r)
        self.steps = Counter("gymhub_steps", "Steps applied.", ["env"], registry=r)
        self.step_seconds = Histogram(
            "gymhub_step_seconds", "Time to apply one step, in the environment and around it.",
            ["env"], buckets=_BUCKETS, registry=r)
        self.errors = Counter(
            "gymhub_errors", "Error replies, by stable error code.", ["code"], registry=r)
        self.capacity_rejections = Counter(
            "gymhub_capacity_rejections", "Episode creations refused at capacity (429).",
            registry=r)
        self.step_retries = Counter(
            "gymhub_step_replays", "Retried steps answered from the idempotency cache.",
            registry=r)
        self.batch_ops = Counter(
            "gymhub_batch_ops", "Operations received in POST /v1/batch requests.", registry=r)
        self._per_env: dict[str, tuple[Histogram, Counter]] = {}

    def for_env(self, env_id: str) -> tuple[Histogram, Counter]:
        """The step histogram and step counter of one environment, looked up once.

        ``labels()`` takes a lock and builds a key on every call; the step path asks
        for the same two children thousands of times a second, so they are cached.
        """
        children = self._per_env.get(env_id)
        if children is None:
            children = (self.step_seconds.labels(env_id), self.steps.labels(env_id))
            self._per_env[env_id] = children
        return children

    def render(self) -> bytes:
        """The text exposition format for ``GET /metrics``."""
        return generate_latest(self.registry)

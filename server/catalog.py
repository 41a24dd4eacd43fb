"""What a server knows about each environment it serves, outside any episode.

One *probe* instance per environment answers listings (tool schemas, task counts,
verifier ids), task lists, golden verifier cases and standalone verification, so
none of these cost an episode slot. A probe is shared, so calls into it hold its lock
(they run in the worker pool, where blocking is fine).
"""

from __future__ import annotations

import threading
from typing import Any

from gymhub.envs import EnvSpec, Registry, TextEnv
from gymhub.errors import ConfigError, EnvNotFound
from gymhub.types import Score

from .wire_models import jsonable

__all__ = ["Catalog"]


class Catalog:
    """Probe environments and their descriptions, by id.

    Args:
        registry: used to explain an unknown id ("did you mean ...?").
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._probes: dict[str, tuple[TextEnv, threading.Lock]] = {}
        self._infos: list[dict[str, Any]] = []

    def __contains__(self, env_id: object) -> bool:
        return env_id in self._probes

    def add(self, spec: EnvSpec, env: TextEnv, args: dict[str, Any] | None = None) -> None:
        """Keep ``env`` as the probe of ``spec.id`` and describe it for listings.

        ``args`` are the constructor arguments the server passes (``--env-arg``): listed
        so that a learner can check it trains on the environment it configured.
        """
        self._probes[spec.id] = (env, threading.Lock())
        verifier_id = getattr(getattr(env, "verifier", None), "id", "")
        self._infos.append({
            "id": spec.id, "description": spec.description, "verifier": spec.verifier,
            "verifier_id": verifier_id if isinstance(verifier_id, str) else "",
            "tags": list(spec.tags), "max_turns": getattr(env, "max_turns", spec.max_turns),
            "task_count": len(env.tasks), "tools": [t.to_dict() for t in env.tool_specs()],
            "env_args": jsonable(dict(args or {})),
            "standalone_verifier": type(env).verify is not TextEnv.verify,
        })

    def clear(self) -> None:
        """Forget every probe (after a drain closed them)."""
        self._probes.clear()
        self._infos.clear()

    def envs(self) -> list[TextEnv]:
        """The probe instances, to close at shutdown."""
        return [env for env, _ in self._probes.values()]

    def infos(self) -> list[dict[str, Any]]:
        """What ``GET /v1/envs`` lists."""
        return self._infos

    def tasks(self, env_id: str, offset: int, limit: int) -> dict[str, Any]:
        """Task ids and tags (never prompts' answers), paginated."""
        env, _ = self._probe(env_id)
        chosen = env.tasks[offset:offset + limit]
        return {"total": len(env.tasks),
                "tasks": [{"id": t.id, "meta": jsonable(dict(t.meta))} for t in chosen]}

    def cases(self, env_id: str, task_id: str) -> list[dict[str, Any]]:
        """Golden verifier cases of one task (blocking: call it in the worker pool)."""
        env, lock = self._probe(env_id)
        with lock:
            task = env.task_by_id(task_id)
            return [{"submission": jsonable(c.submission), "expect": c.expect, "note": c.note}
                    for c in env.verifier_cases(task)]

    def verify(self, env_id: str, task_id: str, submission: Any) -> dict[str, Any]:
        """Score a submission outside any episode (blocking: call it in the worker pool)."""
        env, lock = self._probe(env_id)
        with lock:
            task = env.task_by_id(task_id)
            try:
                score: Score = env.verify(submission, task)
            except NotImplementedError as exc:
                raise ConfigError(str(exc)) from exc
            return score.to_dict()

    def _probe(self, env_id: str) -> tuple[TextEnv, threading.Lock]:
        probe = self._probes.get(env_id)
        if probe is None:
            self.registry.spec(env_id)  # raises EnvNotFound with suggestions
            raise EnvNotFound(f"environment {env_id!r} is not served here")
        return probe

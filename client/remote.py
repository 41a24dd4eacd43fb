"""``RemoteEnv``: an environment on a server, used exactly like a local one.

A :class:`RemoteEnv` is a :class:`gymnasium.Env` with gymhub's chat spaces, so
Gymnasium code, :func:`gymhub.envs.check_env` and the gold policy run unchanged
against ``gymhub serve``. Each ``reset`` opens a new server episode (closing the
previous one) and each ``step`` is one idempotent, ``seq``-numbered request.

It mirrors the parts of :class:`~gymhub.envs.TextEnv` that tools rely on: ``tasks``,
``task``, ``history``, ``turn``, ``done``, ``last_score``, ``tool_specs()``,
``gold_action()``, the other reference actions (``noop_action()``, ``refuse_action()``,
``random_action(rng)``), ``verifier_cases()`` and ``verify()`` (the last three need a
server started with its reference endpoints on, the default).

The chat spaces (:mod:`gymhub.spaces`), :class:`~gymhub.types.Task` and the transcript
formatting live below :mod:`gymhub.envs`, so a remote environment never loads the
environments (DESIGN §1: the client uses only ``types``/``errors`` and its transport).
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import gymnasium

from gymhub.errors import ConfigError, EnvNotFound, EpisodeFinished, EpisodeNotStarted
from gymhub.spaces import ChatSpace, MessageSpace
from gymhub.types import Message, Score, Task, ToolSpec, VerifierCase, format_message

from .sync_client import EnvClient

__all__ = ["TOKEN_ENV", "RemoteEnv", "split_env_url"]

#: Environment variable read for the bearer token when none is passed.
TOKEN_ENV = "GYMHUB_SERVER_TOKEN"


def split_env_url(url: str) -> tuple[str, str]:
    """Split ``http://host:port[/prefix]/ENV_ID`` into ``(base_url, env_id)``.

    Forms accepted: ``http://h:p/sql-v0``; ``http://h:p/prefix/envs/ns/name-v1`` (the
    part after ``/envs/`` is the id, so namespaced ids work behind a path prefix);
    a trailing ``/v1`` on the prefix is dropped because the client adds it.

    Raises:
        ConfigError: the URL names no environment.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"not an http(s) environment URL: {url!r}")
    path = parts.path.strip("/")
    if "/envs/" in f"/{path}":
        prefix, _, env_id = f"/{path}".rpartition("/envs/")
    else:
        prefix, _, env_id = f"/{path}".rpartition("/")
    prefix = prefix.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    if not env_id:
        raise ConfigError(f"the URL {url!r} names no environment; expected http://host:port/ENV_ID")
    return urlunsplit((parts.scheme, parts.netloc, prefix, "", "")), env_id


class RemoteEnv(gymnasium.Env[list[Message], Message]):
    """A served environment behind the :class:`gymnasium.Env` API.

    Args:
        base_url: the server, ``http://host:port``.
        env_id: an environment the server serves.
        token: bearer token (default: ``$GYMHUB_SERVER_TOKEN``).
        render_mode: ``"ansi"`` or ``None``.
        client: an existing :class:`EnvClient` to share (its config wins).
        **client_kwargs: :class:`~gymhub.client.async_client.ClientConfig` fields
            (``timeout``, ``retries`` ...), or ``transport`` for tests.

    Raises:
        EnvNotFound: the server does not serve ``env_id``.
        ServerUnreachable: the server cannot be reached.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}  # type: ignore[misc]

    def __init__(self, base_url: str, env_id: str, *, token: str | None = None,
                 render_mode: str | None = None, client: EnvClient | None = None,
                 **client_kwargs: Any) -> None:
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.env_id = env_id
        self.render_mode = render_mode
        self._own_client = client is None
        self.client = client or EnvClient(base_url, token=token or os.environ.get(TOKEN_ENV),
                                          **client_kwargs)
        try:
            served = {e["id"]: e for e in self.client.list_envs()}
            if env_id not in served:
                known = ", ".join(sorted(served)) or "none"
                raise EnvNotFound(f"server {base_url} does not serve {env_id!r}; "
                                  f"it serves: {known}")
        except BaseException:
            if self._own_client:
                self.client.close()
            raise


        self.description: dict[str, Any] = served[env_id]
        self._tool_specs = [_tool_spec(t) for t in self.description.get("tools", [])]
        self.max_turns: int | None = self.description.get("max_turns")
        self.observation_space = ChatSpace()
        self.action_space = MessageSpace([s.name for s in self._tool_specs])
        self.episode_id: str | None = None
        self.seq = 0
        self.task: Task | None = None
        self.turn = 0
        self.done = True
        self.history: list[Message] = []
        self.last_score: Score | None = None
        self._tasks: list[Task] | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RemoteEnv:
        """Build from ``http://host:port/ENV_ID`` (what ``gymhub.make`` does for URLs).

        Args:
            url: see :func:`split_env_url` for the accepted forms.
            **kwargs: passed to the constructor (``token``, ``timeout`` ...).
        """
        base_url, env_id = split_env_url(url)
        return cls(base_url, env_id, **kwargs)

    # ------------------------------------------------------------- gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[list[Message], dict[str, Any]]:
        """Open a new server episode (closing the previous one).

        ``options={"task_id": ...}`` picks a task; other options go to the server's
        environment.

        Raises:
            TaskNotFound: the task id does not exist.
        """
        super().reset(seed=seed)
        opts = dict(options or {})
        task_id = opts.pop("task_id", None)
        self._drop_episode()

        episode = self.client.open(self.env_id, seed=seed,
                                   task_id=None if task_id is None else str(task_id),
                                   options=opts or None)
        self.episode_id, self.seq, self.turn, self.done = episode.id, 0, 0, False
        self.last_score = None
        observation = list(episode.observation)
        info: dict[str, Any] = dict(episode.info)
        tid = str(info.get("task_id", ""))
        self.task = Task(id=tid, prompt="", meta=dict(info.get("meta") or {}))
        self.history = list(observation)
        return observation, info

    def step(self, action: Any) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Apply one action on the server (retried safely under the same ``seq``).

        Raises:
            EpisodeNotStarted: ``reset`` was never called.
            EpisodeFinished: the episode already ended.
            EpisodeLost: the server restarted, died or stopped answering mid-episode;
                call ``reset()`` for a new episode.
        """
        if self.episode_id is None:
            raise EpisodeNotStarted("call reset() before step()")
        if self.done:
            raise EpisodeFinished("the episode has ended; call reset() to start another")
        result = self.client.step(self.episode_id, action, self.seq + 1)
        self.seq += 1
        self.turn += 1
        if isinstance(action, Message) and action.role == "assistant":
            self.history.append(action)
        self.history.extend(result.observation)
        if result.terminated or result.truncated:
            self.done = True
            score = result.info.get("score")
            self.last_score = score if isinstance(score, Score) else None
        return result.as_tuple()

    def render(self) -> str | None:
        """The transcript so far, as text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None

        return "\n".join(format_message(m) for m in self.history)

    def close(self) -> None:
        """Close the server episode and the connection pool (safe to call twice)."""
        self._drop_episode()
        if self._own_client:
            self.client.close()
        super().close()

    # -------------------------------------------------- TextEnv's extra surface
    @property
    def tasks(self) -> list[Task]:
        """The server's task ids and tags (prompts and gold answers stay on the server)."""
        if self._tasks is None:

            self._tasks = [Task(id=t["id"], prompt="", meta=dict(t.get("meta") or {}))
                           for t in self.client.tasks(self.env_id)]
        return self._tasks

    def tool_specs(self) -> list[ToolSpec]:
        """The tools the server's environment offers."""
        return list(self._tool_specs)

    def gold_action(self) -> Message:
        """The server's reference action for the current state."""
        if self.episode_id is None or self.done:
            raise EpisodeFinished("no running episode")
        return self.client.gold_action(self.episode_id)

    def noop_action(self) -> Message:
        """The server environment's "do nothing" action (see ``TextEnv.noop_action``)."""
        return self._reference("noop")

    def refuse_action(self) -> Message:
        """The server environment's refusal (see ``TextEnv.refuse_action``)."""
        return self._reference("refuse")

    def random_action(self, rng: random.Random) -> Message:
        """A random valid action drawn on the server from a seed taken from ``rng``."""
        return self._reference("random", rng.getrandbits(62))

    def _reference(self, policy: str, seed: int = 0) -> Message:
        if self.episode_id is None or self.done:
            raise EpisodeFinished("no running episode")
        return self.client.reference_action(self.episode_id, policy, seed)

    def verifier_cases(self, task: Task) -> list[VerifierCase]:
        """The server environment's golden verifier cases for ``task``."""
        return [VerifierCase(c["submission"], c["expect"], c.get("note", ""))
                for c in self.client.verifier_cases(self.env_id, task.id)]

    @property
    def standalone_verifier(self) -> bool:
        """Whether the served environment scores with a standalone verifier (see EnvInfo)."""
        return bool(self.description.get("standalone_verifier", True))

    def verify(self, submission: Any, task: Task) -> Score:
        """Score ``submission`` for ``task`` on the server."""
        return self.client.verify(self.env_id, task.id, submission)

    def _drop_episode(self) -> None:
        if self.episode_id is not None:
            episode_id, self.episode_id = self.episode_id, None
            self.done = True
            # best effort: the server's TTL reaper is the backstop
            with contextlib.suppress(Exception):
                self.client.close_episode(episode_id, missing_ok=True)

    def __repr__(self) -> str:
        return f"RemoteEnv({self.client.config.base_url!r}, {self.env_id!r})"


def _tool_spec(entry: Mapping[str, Any]) -> ToolSpec:
    fn = entry.get("function", entry)
    return ToolSpec(str(fn.get("name", "")), str(fn.get("description", "")),
                    dict(fn.get("parameters") or {}))

"""An episode's record on the server, and the replies built for it in worker threads.

Replies are built and serialised to JSON bytes in the worker thread that ran the
environment, so the event loop only moves bytes, and the same bytes are the
idempotency cache (a retried step gets exactly the bytes of the first answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gymhub.envs import TextEnv
from gymhub.types import Score

from .wire_models import dumps, jsonable

__all__ = ["Episode", "Holder", "action_digest", "creation_reply", "step_reply"]

#: orjson with sorted keys, when installed (several times faster than :mod:`json`).
_canonical: Callable[[Any], bytes] | None
try:
    import orjson

    _canonical = functools.partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)
except ImportError:  # pragma: no cover - exercised where orjson is absent
    _canonical = None


@dataclass(eq=False)
class Episode:
    """One episode held by the server.

    Attributes:
        id: the unguessable id handed to the client.
        env_id: which environment it runs.
        env: the live environment; ``None`` once the episode has ended.
        seq: the last applied step (0 before the first).
        last_reply: the serialised reply of step ``seq``, replayed on a retry.
        last_action: :func:`action_digest` of step ``seq``'s action: a retry must carry
            the same action to be replayed (else ``seq_reused``).
        created_reply: the serialised creation reply, replayed for a repeated ``request_id``.
        last_used: monotonic time of the last request, for the TTL reaper.
    """

    id: str
    env_id: str
    env: TextEnv | None
    created_reply: bytes = b""
    request_id: str | None = None
    seq: int = 0
    last_reply: bytes | None = None
    last_action: bytes = b""
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def creation_reply(env: TextEnv, episode_id: str, env_id: str, seed: int | None,
                   options: Mapping[str, Any] | None) -> bytes:
    """Reset in the worker thread and serialise the creation reply there."""
    obs, info = env.reset(seed=seed, options=dict(options) if options else None)
    tools = info.pop("tools", None)
    wire = jsonable(info)
    if tools is not None:
        wire["tools"] = _wire_tools(env, tools)
    return dumps({"episode_id": episode_id, "env": env_id,
                  "observation": [m.to_dict() for m in obs], "info": wire})


def _wire_tools(env: TextEnv, tools: Any) -> Any:
    """``jsonable(tools)``, remembered per instance while the schemas stay equal.

    Tool schemas are the bulk of a creation reply and almost never change between an
    instance's episodes; comparing them (in C) is several times cheaper than walking
    them again in Python.
    """
    cached = env.__dict__.get("_gymhub_wire_tools")
    if cached is not None and cached[0] == tools:
        return cached[1]
    wire = jsonable(tools)
    # A deep copy: an environment that edits its schema list in place must not find
    # the cache still equal to it.
    env.__dict__["_gymhub_wire_tools"] = (copy.deepcopy(tools), wire)
    return wire


def step_reply(env: TextEnv, action: Any, seq: int) -> tuple[bytes, str | None]:
    """Step in the worker thread and serialise the reply there, off the event loop."""
    obs, reward, terminated, truncated, info = env.step(action)
    score = info.get("score")
    reward = float(reward)
    if not math.isfinite(reward):
        raise ValueError(f"the environment returned a non-finite reward {reward!r}")
    body = {
        "seq": seq, "observation": [m.to_dict() for m in obs], "reward": reward,
        "terminated": bool(terminated), "truncated": bool(truncated),
        "info": jsonable({k: v for k, v in info.items()
                          if k != "score" or not isinstance(v, Score)}),
        "score": score.to_dict() if isinstance(score, Score) else None,
    }
    ended = "terminated" if terminated else "truncated" if truncated else None
    return dumps(body), ended


def action_digest(action: Any) -> bytes:
    """What identifies a step's action when its ``seq`` comes again: a hash of its JSON.

    ``seq`` is the step's idempotency key, and a key reused with other content is a
    client bug that must be refused, not answered with the first reply. The JSON is
    canonical (keys sorted) because a client that re-encodes the same action on a
    retry may order its keys differently. A 32-byte hash is kept per episode rather
    than the action, which may be as large as the body limit.
    """
    data: bytes | None = None
    if _canonical is not None:
        with contextlib.suppress(TypeError):  # orjson refuses a lone surrogate; json escapes it
            data = _canonical(action)
    if data is None:
        data = json.dumps(action, sort_keys=True, ensure_ascii=True, separators=(",", ":"),
                          default=repr).encode()
    return hashlib.sha256(data).digest()


class Holder:
    """Closes whatever environment a timed-out creation had built by the time it returns."""

    def __init__(self, envs: list[TextEnv]) -> None:
        self.envs = envs

    def close(self) -> None:
        """Close every environment built so far."""
        for env in self.envs:
            env.close()

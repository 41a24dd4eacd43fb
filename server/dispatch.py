"""The one place an episode operation (create, step, close) is applied and answered.

Two request paths carry episode operations: the FastAPI routes (which also define the
OpenAPI schema) and each operation inside ``POST /v1/batch``. Mapping an operation onto
the :class:`~gymhub.server.episodes.EpisodeManager` separately on each path is how a
status (201 for a creation), a close reply or an error's ``Retry-After`` drifts between
them, so each path only parses its request; :class:`Dispatcher` applies the
operation and shapes the success, and :func:`~gymhub.server.error_replies.error_reply`
shapes every failure.

Why ``POST /v1/batch`` exists: with one HTTP request per step, a trivial step spends
nearly all of its server CPU on the request (parsing, routing, the response) and the
client as much again. A learner steps hundreds of episodes at once, so its client
coalesces the operations that are ready in the same instant into one request, and the
request cost is paid once per batch. What must not change is the contract of each
operation: it is answered exactly as its own request would be (status, body,
``Retry-After``), with the same deadline and idempotency (``seq`` for steps,
``request_id`` for creations), and one operation's failure never touches another's.
A batch is therefore as safe to resend as each of its operations is. The answers are
joined from the manager's reply bytes without parsing them again.
"""

from __future__ import annotations

import asyncio
import logging

from gymhub.errors import GymhubError
from gymhub.json_codec import dumps

from .episodes import EpisodeManager
from .error_replies import error_reply, internal_error
from .wire_models import (
    BatchClose,
    BatchCreate,
    BatchRequest,
    BatchStep,
    CreateEpisode,
    StepRequest,
)

__all__ = ["Dispatcher", "Reply"]

log = logging.getLogger("gymhub.server")

#: A success: the HTTP status and the JSON body bytes.
Reply = tuple[int, bytes]
Op = BatchCreate | BatchStep | BatchClose


class Dispatcher:
    """Applies episode operations to a manager; every request path calls these methods.

    Each method returns the success (status, body) or raises the
    :class:`~gymhub.errors.GymhubError` its request answers with.

    Args:
        manager: the server's episodes.
    """

    def __init__(self, manager: EpisodeManager) -> None:
        self.manager = manager

    async def create(self, req: CreateEpisode) -> Reply:
        """Open an episode: 201 and the creation reply."""
        body = await self.manager.create(req.env, seed=req.seed, task_id=req.task_id,
                                         options=req.options, request_id=req.request_id)
        return 201, body

    async def step(self, episode_id: str, req: StepRequest) -> Reply:
        """Apply step ``req.seq`` (a repeat of the last one replays its reply)."""
        return 200, await self.manager.step(episode_id, req.action, req.seq)

    async def close(self, episode_id: str) -> Reply:
        """Close an episode and release its environment."""
        await self.manager.close(episode_id)
        return 200, dumps({"episode_id": episode_id, "closed": True})

    async def batch(self, req: BatchRequest) -> Reply:
        """Run every operation concurrently; 200 and the answers in order."""
        self.manager.metrics.batch_ops.inc(len(req.ops))
        if len(req.ops) == 1:
            parts = [await self._answer(req.ops[0])]
        else:
            parts = await asyncio.gather(*(self._answer(op) for op in req.ops))
        return 200, b'{"results":[' + b",".join(parts) + b"]}"

    async def _apply(self, op: Op) -> Reply:
        if isinstance(op, BatchStep):
            return await self.step(op.episode_id, op)
        if isinstance(op, BatchCreate):
            return await self.create(op)
        return await self.close(op.episode_id)

    async def _answer(self, op: Op) -> bytes:
        """One operation's ``{"status", "retry_after"?, "body"}``, whatever happened."""
        try:
            status, body = await self._apply(op)
        except GymhubError as exc:
            status, body, headers = error_reply(self.manager.metrics, exc)
            after = next((v for k, v in headers if k == b"retry-after"), None)
            if after is not None:
                return b'{"status":%d,"retry_after":%s,"body":%s}' % (status, after, body)
        except Exception as exc:
            log.exception("unhandled error in a batched %s", op.op, exc_info=exc)
            status, body, _ = error_reply(self.manager.metrics, internal_error(exc))
        return b'{"status":%d,"body":%s}' % (status, body)

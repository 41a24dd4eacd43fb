"""``POST /v1/batch``: many episode operations in one request.

Why: with one HTTP request per step, a trivial step spends nearly all of its server
CPU on the request (parsing, routing, the response) and the client as much again.
A learner steps hundreds of episodes at once, so its client coalesces the operations
that are ready in the same instant into one request; the request cost is then paid
once per batch instead of once per step.

What must not change is the contract of each operation: every operation is answered
exactly as its own request would be (status, body, ``Retry-After``), runs through the
same :class:`~gymhub.server.episodes.EpisodeManager` call with the same deadline and
idempotency (``seq`` for steps, ``request_id`` for creations), and one operation's
failure never touches another's. A batch is therefore as safe to resend as each of
its operations is. The answers are joined from the manager's reply bytes without
parsing them again.
"""

from __future__ import annotations

import asyncio
import logging

from gymhub.errors import GymhubError

from .episodes import EpisodeManager
from .error_replies import error_reply, internal_error
from .wire_models import BatchClose, BatchCreate, BatchRequest, BatchStep, dumps

__all__ = ["run_batch"]

log = logging.getLogger("gymhub.server")

Op = BatchCreate | BatchStep | BatchClose


async def run_batch(manager: EpisodeManager, req: BatchRequest) -> bytes:
    """Run every operation of ``req`` concurrently; the reply body, answers in order."""
    manager.metrics.batch_ops.inc(len(req.ops))
    if len(req.ops) == 1:
        parts = [await _answer(manager, req.ops[0])]
    else:
        parts = await asyncio.gather(*(_answer(manager, op) for op in req.ops))
    return b'{"results":[' + b",".join(parts) + b"]}"


async def _answer(manager: EpisodeManager, op: Op) -> bytes:
    try:
        status, body = await _apply(manager, op)
    except GymhubError as exc:
        status, body, headers = error_reply(manager.metrics, exc)
        after = next((v for k, v in headers if k == b"retry-after"), None)
        if after is not None:
            return b'{"status":%d,"retry_after":%s,"body":%s}' % (status, after, body)
    except Exception as exc:
        log.exception("unhandled error in a batched %s", op.op, exc_info=exc)
        status, body, _ = error_reply(manager.metrics, internal_error(exc))
    return b'{"status":%d,"body":%s}' % (status, body)


async def _apply(manager: EpisodeManager, op: Op) -> tuple[int, bytes]:
    if isinstance(op, BatchStep):
        return 200, await manager.step(op.episode_id, op.action, op.seq)
    if isinstance(op, BatchCreate):
        return 201, await manager.create(op.env, seed=op.seed, task_id=op.task_id,
                                         options=op.options, request_id=op.request_id)
    await manager.close(op.episode_id)
    return 200, dumps({"episode_id": op.episode_id, "closed": True})

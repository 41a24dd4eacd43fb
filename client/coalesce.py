"""The client side of ``POST /v1/batch``: operations ready together travel together.

A learner drives hundreds of episodes from one event loop. Their steps become ready
in bursts (a generation round finishes, a batch of replies arrives and every waiting
episode answers at once), so the operations submitted during one turn of the event
loop are sent as one request at the start of the next turn. Nothing waits for a
batch to fill: a lone episode's step leaves on the very next turn, so batching costs
a single episode nothing measurable and saves a crowd nearly all of its per-request
cost (see ``benchmarks/bench_server.py``).

Every operation keeps its own contract: the caller's retry loop
(:class:`~gymhub.client.retries.RetryLoop`) sees an :class:`OpAnswer` with the
operation's own status and ``Retry-After``, so a 429 on one creation is retried
without resending the others, and a failed request (transport error, 413, 503) is
the answer of each of its operations, each of which decides for itself whether to
resend (steps keep ``seq``, creations their ``request_id``, so a resent one is never
applied twice).

A request refused as a whole before anything ran (413, 422) is resent operation by
operation, so each gets its own answer.

Known trade-off: a batch's reply arrives when its slowest operation finishes, so a
fast step that shares a batch with a slow sandbox step waits for it. A learner
steps its episodes in rounds anyway; ``ClientConfig(batch=False)`` turns this off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from gymhub.json_codec import dumps, dumps_lenient, loads

from .retries import Answer

__all__ = ["Coalescer", "OpAnswer"]

#: An operation larger than this goes in a batch of its own, so that a 413 for an
#: oversized action is its own answer and not that of every operation beside it.
ALONE_BYTES = 64 * 1024
#: Largest batch body the client builds (a server accepts 1 MiB by default).
MAX_BATCH_BYTES = 512 * 1024

Sender = Callable[[bytes, float], Awaitable[Answer]]
#: Sends one operation on its own route: (method, path, body, timeout) -> answer; the
#: body is the operation's own (not yet encoded) request body, or ``None``.
OneSender = Callable[[str, str, Any, float], Awaitable[Answer]]


@dataclass
class OpAnswer:
    """One operation's answer, shaped like a response for the retry loop.

    ``value`` is the parsed body; ``content`` is built only when asked (errors).
    """

    status_code: int
    value: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def content(self) -> bytes:
        """The body as bytes, for error decoding."""
        return dumps(self.value)


@dataclass
class _Pending:
    op: bytes
    timeout: float
    future: asyncio.Future[Answer | None]  # None: the server has no batch endpoint
    route: tuple[str, str, Any]  # method, path, body of its own request


class Coalescer:
    """Collects operations during one loop turn and sends them as one batch.

    A turn with a single operation sends it on its own route instead: it saves the
    batch's wrapping on both sides when an episode runs alone.

    Args:
        send: sends one batch body with a timeout and returns the HTTP answer.
        send_one: sends one operation on its own route.
        max_ops: most operations in one batch (the server accepts up to 1024).
    """

    def __init__(self, send: Sender, send_one: OneSender, *, max_ops: int = 256) -> None:
        self._send = send
        self._send_one = send_one
        self.max_ops = max_ops
        self.supported = True
        self._pending: list[_Pending] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, op: Mapping[str, Any], route: tuple[str, str, Any],
                     timeout: float) -> Answer | None:
        """Send ``op`` with the next batch (or alone on ``route``); its own answer.

        Returns:
            The operation's answer, or ``None`` when the server has no batch endpoint
            (an older gymhub): nothing was applied, and the caller sends it alone.

        Raises:
            httpx.TransportError: the batch request failed in transport.
            TimeoutError: ``timeout`` passed first (the batch may be waiting on
                operations with longer deadlines).
        """
        if not self.supported:
            return None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer | None] = loop.create_future()
        self._pending.append(_Pending(dumps_lenient(op), timeout, future, route))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        timer = loop.call_later(timeout, _time_out, future)
        try:
            return await future
        finally:
            timer.cancel()

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        if len(pending) == 1:
            self._start_one(pending[0])
            return
        batch: list[_Pending] = []
        size = 0
        for item in pending:
            if item.future.done():  # its caller was cancelled meanwhile
                continue
            if len(item.op) > ALONE_BYTES:
                self._start([item])
                continue
            if batch and (len(batch) >= self.max_ops or size + len(item.op) > MAX_BATCH_BYTES):
                self._start(batch)
                batch, size = [], 0
            batch.append(item)
            size += len(item.op) + 1
        if batch:
            self._start(batch)

    def _start(self, batch: list[_Pending]) -> None:
        self._spawn(self._exchange(batch))

    def _start_one(self, item: _Pending) -> None:
        self._spawn(self._exchange_one(item))

    def _spawn(self, exchange: Coroutine[Any, Any, None]) -> None:
        """Run one exchange in the background, kept referenced until it ends."""
        task = asyncio.get_running_loop().create_task(exchange)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _exchange_one(self, item: _Pending) -> None:
        if item.future.done():
            return
        method, path, content = item.route
        try:
            answer = await self._send_one(method, path, content, item.timeout)
        except Exception as exc:
            _settle_all([item], exc)
            return
        except BaseException:
            item.future.cancel()
            raise
        if not item.future.done():
            item.future.set_result(answer)

    async def _exchange(self, batch: list[_Pending]) -> None:
        body = b'{"ops":[' + b",".join(p.op for p in batch) + b"]}"
        try:  # each caller bounds its own wait (see submit's caller): the longest one here
            answer = await self._send(body, max(p.timeout for p in batch))
        except Exception as exc:  # each caller decides what a failure means for it
            _settle_all(batch, exc)
            return
        except BaseException:
            for p in batch:
                p.future.cancel()
            raise
        if answer.status_code in (404, 405):
            self.supported = False
            for p in batch:
                if not p.future.done():
                    p.future.set_result(None)
            return
        if answer.status_code in (413, 422) and len(batch) > 1:
            # The request as a whole was refused before any operation ran (one malformed
            # or oversized operation, or a server body limit below ours): each goes alone
            # and gets its own answer, so one bad operation cannot fail its neighbours.
            for p in batch:
                self._start_one(p)
            return
        if answer.status_code != 200:
            for p in batch:  # the request's answer is each operation's answer
                if not p.future.done():
                    p.future.set_result(answer)
            return
        try:
            results = loads(answer.content)["results"]
            if len(results) != len(batch):
                raise ValueError(f"{len(results)} answers for {len(batch)} operations")
            answers = []
            for r in results:
                after = r.get("retry_after")
                headers = {"retry-after": str(after)} if after is not None else {}
                answers.append(OpAnswer(int(r["status"]), r["body"], headers))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Resending is safe (seq, request_id), so this is a retryable transport fault.
            _settle_all(batch, httpx.RemoteProtocolError(f"malformed batch reply: {exc}"))
            return
        for p, a in zip(batch, answers, strict=True):
            if not p.future.done():
                p.future.set_result(a)

    async def aclose(self) -> None:
        """Wait for batches in flight (their callers are waiting for them anyway)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _time_out(future: asyncio.Future[Answer | None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


def _settle_all(batch: list[_Pending], exc: Exception) -> None:
    for p in batch:
        if not p.future.done():
            p.future.set_exception(exc)

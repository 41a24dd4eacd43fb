"""How a client talks to one server: its settings, and the retry contract of every call.

Both clients (:class:`~gymhub.client.async_client.AsyncEnvClient` and the blocking
:class:`~gymhub.client.async_client.EnvClient`) promise the same things, so the arithmetic
behind those promises lives here, once:

* **Bounded.** At most ``retries`` extra attempts, and never past the call's one
  deadline (``timeout``): a call never retries forever or hangs.
* **Only what is safe to resend.** Transport failures (the request may not have
  arrived) and 429/502/503 (the server refused before doing anything). Steps carry
  ``seq`` and creations a ``request_id``, so a resent one is never applied twice.
* **Jittered, honouring ``Retry-After``.** Full jitter on an exponential backoff, so a
  fleet of learners does not retry in lockstep, but never sooner than the server asked.
* **Typed.** A server error comes back as its own exception
  (:func:`~gymhub.errors.error_from_code`); running out of attempts is a
  :class:`~gymhub.errors.ServerUnreachable`, running out of time a
  :class:`~gymhub.errors.RequestTimeout`. For an operation on an open episode the
  async client turns either into :class:`~gymhub.errors.EpisodeLost` (the episode
  lived in that server's memory); ``episode_lost`` (410) and ``seq_reused`` (409)
  answers are never retried: resending cannot change them.

Like :mod:`gymhub.client.async_client`, this imports only httpx and light gymhub modules.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

from gymhub.client.http11 import MAX_RESPONSE_BYTES
from gymhub.errors import GymhubError, RequestTimeout, ServerUnreachable, error_from_code
from gymhub.json_codec import loads

__all__ = ["RETRY_EXC", "RETRY_STATUS", "Answer", "ClientConfig", "RetryLoop", "RetryPolicy",
           "decode_error", "retry_after"]

#: Statuses retried even without a Retry-After (a proxy's transient failures included).
RETRY_STATUS = frozenset({429, 502, 503})
#: Transport failures after which the same request may safely be sent again.
RETRY_EXC = (httpx.TransportError,)


@dataclass(frozen=True)
class ClientConfig:
    """How a client talks to one server.

    Attributes:
        base_url: ``http://host:port`` (a path prefix is kept, ``/v1`` is added).
        token: bearer token, if the server requires one.
        timeout: deadline in seconds for one call, all retries included. Keep it above
            the server's step deadline so that a slow step is reported as the server's
            504, not as a client timeout.
        connect_timeout: deadline for opening one connection.
        retries: extra attempts after the first (bounded; 0 disables retries).
        backoff_s: first backoff; it doubles per attempt, with full jitter.
        max_backoff_s: cap on one backoff sleep (and on an honoured Retry-After).
        max_connections: connections (and so concurrent requests) to this server.
        keepalive_s: idle seconds after which a connection is not reused (keep it
            below the server's keep-alive timeout; ``gymhub serve`` uses 30 s).
        batch: send the opens, steps and closes that are ready in the same event-loop
            turn as one ``POST /v1/batch`` (see :mod:`gymhub.client.coalesce`); the
            async client only.
        batch_max_ops: most operations in one batch.
        uds: reach the server through this Unix domain socket (``base_url`` then only
            names the ``Host`` header): a server in a sandbox without a network.
        max_response_bytes: largest reply body read (a bigger one is a transport
            error): a client of a server it does not trust keeps this small.
    """

    base_url: str
    token: str | None = None
    timeout: float = 120.0
    connect_timeout: float = 5.0
    retries: int = 4
    backoff_s: float = 0.05
    max_backoff_s: float = 2.0
    max_connections: int = 256
    keepalive_s: float = 4.0
    batch: bool = True
    batch_max_ops: int = 256
    uds: str | None = None
    max_response_bytes: int = MAX_RESPONSE_BYTES

    def headers(self) -> dict[str, str]:
        """Headers sent on every request."""
        out = {"content-type": "application/json", "accept": "application/json"}
        if self.token:
            out["authorization"] = f"Bearer {self.token}"
        return out

    def limits(self, connections: int | None = None) -> httpx.Limits:
        """Explicit pool limits: one keep-alive connection per admitted request."""
        n = connections or self.max_connections
        return httpx.Limits(max_connections=n, max_keepalive_connections=n, keepalive_expiry=30)

    def root(self) -> str:
        """The ``/v1`` root of the API."""
        return self.base_url.rstrip("/") + "/v1"


class Answer(Protocol):
    """What a client reads of a response.

    A :class:`~gymhub.client.http11.Reply` from the built-in transport, or an
    :class:`httpx.Response` from any other: both have these three.
    """

    @property
    def status_code(self) -> int:
        """The HTTP status."""

    @property
    def headers(self) -> Mapping[str, str]:
        """The headers, looked up by lower-case name."""

    @property
    def content(self) -> bytes:
        """The whole body."""


def decode_error(resp: Answer) -> GymhubError:
    """The exception a failed response stands for (a non-JSON body keeps its status)."""
    after = retry_after(resp)
    try:
        detail = loads(resp.content)["error"]
        code, message = str(detail["code"]), str(detail["message"])
        expected = detail.get("expected_seq")
    except (ValueError, KeyError, TypeError):
        code, message = f"http_{resp.status_code}", resp.content[:500].decode(errors="replace")
        expected = None
    return error_from_code(resp.status_code, code, message, retry_after=after,
                           expected=expected if isinstance(expected, int) else None)


def retry_after(resp: Answer) -> float | None:
    """Seconds the server asked the client to wait (``Retry-After``), if it said."""
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class RetryPolicy:
    """Shared retry arithmetic of the sync and async clients.

    Args:
        config: the retry budget (``retries``), backoff and deadline settings.
    """

    def __init__(self, config: ClientConfig) -> None:
        self.config = config

    def attempt_timeout(self, deadline: float) -> httpx.Timeout:
        """The httpx timeouts of one attempt: what is left of the deadline, connect capped."""
        left = max(0.001, deadline - time.monotonic())
        return httpx.Timeout(left, connect=min(self.config.connect_timeout, left))

    def sleep_for(self, attempt: int, deadline: float, retry_after: float | None) -> float | None:
        """Seconds to sleep before attempt ``attempt + 1``, or ``None`` to give up."""
        if attempt >= self.config.retries:
            return None
        cap = min(self.config.max_backoff_s, self.config.backoff_s * 2**attempt)
        delay = random.uniform(0, cap)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.config.max_backoff_s))
        if time.monotonic() + delay >= deadline:
            return None
        return delay

    def give_up(self, exc: BaseException | None, last: GymhubError | None, what: str,
                started: float, attempts: int) -> GymhubError:
        """The error to raise when retrying stops.

        The server's last answer if there was one (it says more than any transport
        error); otherwise a timeout if the deadline ran out while waiting for an answer,
        else a transport error naming the attempts made.
        """
        if last is not None:
            return last
        waited = time.monotonic() - started
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            return RequestTimeout(f"{what}: no answer from {self.config.base_url} within "
                                  f"{waited:.1f} s ({type(exc).__name__})")
        return ServerUnreachable(f"{what}: cannot reach {self.config.base_url} "
                              f"({attempts} attempt(s) in {waited:.1f} s): "
                              f"{type(exc).__name__}: {exc}")


class RetryLoop:
    """The retry decisions of one call, for a client that does its own I/O and sleeping.

    Both clients run the same loop (send, judge the outcome, sleep, send again); only
    the sending and the sleeping differ (blocking or awaited). The judging lives here
    so the two cannot drift apart::

        loop = RetryLoop(policy, "step 3 of ab12")
        while True:
            try:
                resp = send(timeout=loop.time_left())
            except RETRY_EXC as exc:
                sleep(loop.next(exc))
                continue
            if resp.status_code < 400:
                return resp
            sleep(loop.next(resp))

    Args:
        policy: the client's retry arithmetic (budget, backoff, deadline).
        what: names the call in a give-up error (``"open echo-v0"``).
        busy_retry: retry 429/503 answers; off, they are raised at once (a pool
            fails over to another server instead of waiting).
    """

    def __init__(self, policy: RetryPolicy, what: str, *, busy_retry: bool = True) -> None:
        self.policy = policy
        self.what = what
        self.busy_retry = busy_retry
        self.started = time.monotonic()
        self.deadline = self.started + policy.config.timeout
        self.attempt = 0

    def time_left(self) -> float:
        """Seconds left of the call's deadline (at least 1 ms, so an attempt can fail)."""
        return max(0.001, self.deadline - time.monotonic())

    def attempt_timeout(self) -> httpx.Timeout:
        """The httpx timeouts of the next attempt (see :meth:`RetryPolicy.attempt_timeout`)."""
        return self.policy.attempt_timeout(self.deadline)

    def next(self, outcome: Answer | Exception) -> float:
        """Judge a failed attempt: the seconds to sleep before the next one.

        Args:
            outcome: an error answer (status >= 400), or the transport exception
                (one of :data:`RETRY_EXC`) the attempt raised.

        Raises:
            GymhubError: the answer's own error when it is not worth retrying (or is
                a busy answer with ``busy_retry`` off); otherwise, once the retries or
                the deadline run out, the last answer's error, else a
                :class:`RequestTimeout` or :class:`ServerUnreachable`.
        """
        exc: Exception | None = None
        last: GymhubError | None = None
        wait: float | None = None
        if isinstance(outcome, Exception):
            exc = outcome
        else:
            last = decode_error(outcome)
            if outcome.status_code not in RETRY_STATUS or not self.busy_retry:
                raise last
            wait = retry_after(outcome)
        delay = self.policy.sleep_for(self.attempt, self.deadline, wait)
        if delay is None:
            raise self.policy.give_up(exc, last, self.what, self.started, self.attempt + 1)
        self.attempt += 1
        return delay

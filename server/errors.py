"""The server's error codes and the exceptions that carry them on both sides of the wire.

Every error the server answers is ``{"error": {"code", "message"}}`` with a stable
``code``; the HTTP status is derived from the code, never chosen ad hoc. The client
turns each code back into the same exception class, so code that catches
:class:`~gymhub.errors.EnvNotFound` or :class:`~gymhub.errors.EpisodeFinished` works
unchanged whether the environment is local or remote.

This module imports only :mod:`gymhub.errors`: the client depends on it and must stay
free of FastAPI and of the environments.

::

    GymhubError
    └── ServerError                   base of the errors below; ``status`` is the HTTP status
        ├── EpisodeNotFound           404 no open episode with that id (closed, reaped, restarted)
        ├── SeqConflict               409 a stale or skipped ``seq`` (``expected`` says which)
        ├── AtCapacity                429 the server holds ``max_episodes``; see ``retry_after``
        ├── DeadlineExceeded          504 a step ran past the server's deadline; episode closed
        ├── Unauthorized              401 missing or wrong bearer token
        ├── PayloadTooLarge           413 the request body is over the server's limit
        ├── InvalidRequest            422 the request does not match the wire schema
        ├── ReferenceDisabled         403 gold/verifier endpoints are switched off on this server
        ├── ServerDraining            503 the server is shutting down
        ├── EnvCrashed                500 the environment raised; the episode was closed
        ├── InternalServerError       500 anything else (a bug)
        └── TransportError            no HTTP answer at all after bounded retries
            └── RequestTimeout        the answer did not arrive within the client's timeout
"""

from __future__ import annotations

from gymhub.errors import (
    ConfigError,
    EnvNotFound,
    EpisodeFinished,
    EpisodeNotStarted,
    GymhubError,
    TaskNotFound,
)

__all__ = [
    "STATUS",
    "AtCapacity",
    "DeadlineExceeded",
    "EnvCrashed",
    "EpisodeNotFound",
    "InternalServerError",
    "InvalidRequest",
    "PayloadTooLarge",
    "ReferenceDisabled",
    "RequestTimeout",
    "SeqConflict",
    "ServerDraining",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "error_from_wire",
    "internal_error",
    "status_of",
]


class ServerError(GymhubError):
    """An error answered by (or about) an environment server.

    Attributes:
        status: the HTTP status that carries this error (0 when no answer came).
        retry_after: seconds the server asked the client to wait, if it said so.
    """

    code = "server_error"
    status = 500

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EpisodeNotFound(ServerError):
    """No open episode has that id: it was closed, reaped, or the server restarted."""

    code = "episode_not_found"
    status = 404


class SeqConflict(ServerError):
    """A step's ``seq`` is neither the next one nor the last one applied.

    Attributes:
        expected: the ``seq`` the server expects next, when known.
    """

    code = "seq_conflict"
    status = 409

    def __init__(
        self, message: str = "", *, expected: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.expected = expected


class AtCapacity(ServerError):
    """The server already holds its maximum of open episodes; retry after ``retry_after``."""

    code = "at_capacity"
    status = 429


class DeadlineExceeded(ServerError):
    """The environment did not answer within the server's per-step deadline.

    The server closes the episode (its resources are released when the stuck call
    returns), so the client must start a new one.
    """

    code = "deadline_exceeded"
    status = 504


class Unauthorized(ServerError):
    """The request lacks the server's bearer token, or carries a wrong one."""

    code = "unauthorized"
    status = 401


class PayloadTooLarge(ServerError):
    """The request body is larger than the server accepts."""

    code = "payload_too_large"
    status = 413


class InvalidRequest(ServerError, ValueError):
    """The request does not match the wire schema (the message names the field)."""

    code = "invalid_request"
    status = 422


class ReferenceDisabled(ServerError):
    """Gold actions and verifier endpoints are switched off on this server."""

    code = "reference_disabled"
    status = 403


class ServerDraining(ServerError):
    """The server is shutting down and accepts no new work."""

    code = "server_draining"
    status = 503


class EnvCrashed(ServerError):
    """The environment raised an unexpected exception; the server closed the episode."""

    code = "env_error"
    status = 500


class InternalServerError(ServerError):
    """The server failed in a way it did not anticipate (a bug worth reporting)."""

    code = "internal_error"
    status = 500


def internal_error(exc: BaseException) -> InternalServerError:
    """The answer to an exception no handler anticipated (a bug).

    Both request paths (the fast front and the FastAPI app) answer such a crash the
    same way, with this one class, so the code and status cannot drift apart. Only
    the exception's type is named: its message may hold data the client must not see.
    """
    return InternalServerError(f"internal error: {type(exc).__name__}")


class TransportError(ServerError):
    """No HTTP answer came back (refused, reset, dropped) after the client's bounded retries."""

    code = "transport_error"
    status = 0


class RequestTimeout(TransportError):
    """The server did not answer within the client's timeout."""

    code = "request_timeout"


#: HTTP status for codes that belong to :mod:`gymhub.errors` rather than this module.
_CORE_STATUS: dict[str, int] = {
    EnvNotFound.code: 404,
    TaskNotFound.code: 404,
    EpisodeFinished.code: 409,
    EpisodeNotStarted.code: 409,
    ConfigError.code: 422,
    "not_found": 404,
    "method_not_allowed": 405,
}

_SERVER_CLASSES: tuple[type[ServerError], ...] = (
    EpisodeNotFound, SeqConflict, AtCapacity, DeadlineExceeded, Unauthorized,
    PayloadTooLarge, InvalidRequest, ReferenceDisabled, ServerDraining, EnvCrashed,
    InternalServerError,
)
_BY_CODE: dict[str, type[GymhubError]] = {c.code: c for c in _SERVER_CLASSES}
_BY_CODE.update({
    EnvNotFound.code: EnvNotFound,
    TaskNotFound.code: TaskNotFound,
    EpisodeFinished.code: EpisodeFinished,
    EpisodeNotStarted.code: EpisodeNotStarted,
    ConfigError.code: ConfigError,
})

#: Every stable code the server may answer, with its HTTP status.
STATUS: dict[str, int] = {**{c.code: c.status for c in _SERVER_CLASSES}, **_CORE_STATUS}


def status_of(exc: GymhubError) -> int:
    """The HTTP status for an exception (422 for configuration mistakes, 500 if unknown)."""
    if isinstance(exc, ServerError):
        return exc.status
    for klass in type(exc).__mro__:
        code = getattr(klass, "code", None)
        if isinstance(code, str) and code in _CORE_STATUS:
            return _CORE_STATUS[code]
    return 422 if isinstance(exc, ConfigError) else 500


def error_from_wire(
    status: int, code: str, message: str, *, retry_after: float | None = None,
    expected: int | None = None,
) -> GymhubError:
    """Rebuild the exception a server answered, mirroring its ``code``.

    Unknown codes (a newer server) become a plain :class:`ServerError` that keeps the
    code and status, so nothing is lost.
    """
    klass = _BY_CODE.get(code)
    exc: GymhubError
    if klass is SeqConflict:
        exc = SeqConflict(message, expected=expected, retry_after=retry_after)
    elif klass is not None and issubclass(klass, ServerError):
        exc = klass(message, retry_after=retry_after)
    elif klass is not None:
        exc = klass(message)
    else:
        exc = ServerError(message, retry_after=retry_after)
        exc.code = code
        exc.status = status
    return exc

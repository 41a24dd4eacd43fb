"""Every exception gymhub raises, in one tree.

Exceptions are for the *caller's* mistakes (a bad id, a bad spec, a bad file). The
*agent's* mistakes (a malformed tool call, invalid SQL) are not exceptions: the
environment answers them with a message. A verifier that cannot judge returns a
:class:`~gymhub.types.Score` with ``error`` set rather than raising.

::

    GymhubError
    ├── ConfigError                  a spec, manifest, task file or option is invalid
    │   ├── SpecError                a verifier spec failed to compile (names the field)
    │   ├── TaskFileError            a user task file is malformed or points nowhere
    │   └── TemplateError            a chat template cannot be used token-exactly
    ├── SandboxPathError             a file name for a sandbox session would leave its workdir
    ├── RegistryError
    │   ├── EnvNotFound              unknown environment id ("did you mean ...?")
    │   └── DuplicateEnv             the id is already registered
    ├── TaskNotFound                 ``reset(options={"task_id": ...})`` names no task
    ├── EpisodeError
    │   ├── EpisodeNotStarted        ``step`` before ``reset``
    │   └── EpisodeFinished          ``step`` after the episode terminated or truncated
    ├── EnvCheckFailed               ``check_env`` found a broken contract
    ├── BackendError                 a database or sandbox backend is unusable
    │   └── ReplProtocolError        a sandboxed interpreter broke the frame protocol
    ├── EngineError                  an inference engine failed or cannot vouch for its output
    │   ├── EngineMisconfigured      a vLLM server was not started the way the learner needs
    │   │                            (also a ConfigError)
    │   ├── GenerationAborted        the engine aborted a request (finish reason ``abort``)
    │   └── WeightSyncError          a weight push failed, timed out or was refused as stale
    ├── AgentError                   the agent's mistake, caught inside the environment and
    │   │                            answered to the agent as a message, never to the caller
    │   ├── ToolError                a tool refuses its call (not found, conflict, ...)
    │   └── QueryError               a query failed because of the query (``kind`` says how)
    ├── HubError                     publishing, validating or resolving on the hub
    │   ├── InvalidName              an owner, env name, env id or distribution name (``kind``)
    │   │   ├── ReservedName         kept for the hub itself (``admin``, ``simple``, ...)
    │   │   └── LookalikeName        same skeleton as an existing name (``l``/``1``, ``o``/``0``)
    │   ├── InvalidArchive           an uploaded wheel is refused (``member`` names the culprit)
    │   │   ├── WheelFilenameError   not ``{dist}-{version}-py3-none-any.whl`` for a hub name
    │   │   ├── CorruptArchive       not a zip, truncated, encrypted, or its parts disagree
    │   │   ├── UnsafeMember         ``..``, absolute, backslash, NUL, symlink, ``.pth``, scripts
    │   │   ├── DuplicateMember      same name, or same after case folding / NFC
    │   │   ├── ArchiveTooLarge      member count, size or ratio cap (zip bombs)
    │   │   ├── RecordMismatch       ``RECORD`` misses, adds or misstates a member
    │   │   ├── WheelMetadataError   ``METADATA``/``WHEEL``/entry points malformed or disagreeing
    │   │   └── NamespaceViolation   a name, env id or module of another owner
    │   ├── HubStoreError            the hub's storage refused; ``status`` is its HTTP default
    │   │   ├── OwnerNotFound        404 no such owner (namespace)
    │   │   ├── PackageNotFound      404 no such package ("did you mean ...?")
    │   │   ├── VersionNotFound      404 no such version, or none a request may resolve to
    │   │   ├── VersionConflict      409 the version is taken by other bytes, or was deleted
    │   │   ├── DigestMismatch       400 the bytes do not match their declared sha256 or size
    │   │   ├── InvalidHubInput      400 a name, version, scope or field the store refuses
    │   │   ├── BlobCorrupted        500 a stored blob is missing, truncated or altered
    │   │   ├── TokenError           a token cannot authorise this request
    │   │   │   ├── TokenInvalid     401 malformed, unknown, or the secret does not match
    │   │   │   ├── TokenRevoked     401 the token was revoked
    │   │   │   ├── TokenExpired     401 the token is past its expiry
    │   │   │   ├── TokenScopeError  403 the token lacks the scope (read, publish, yank)
    │   │   │   └── TokenOwnerError  403 the token belongs to another owner's namespace
    │   │   └── QuotaExceeded        413 the owner's stored versions would pass its quota
    │   └── InstallRefused           ``gymhub install`` will not install a file (nothing changed)
    │       ├── UntrustedPackage     its check did not pass (or none is signed); ``--trust``
    │       ├── KeyMismatch          the hub's signing key is not the one pinned in the lock
    │       ├── SignatureInvalid     an attestation's signature does not verify
    │       └── AttestationMismatch  a valid attestation vouches for other bytes or names
    └── ServerError                  answered by (or about) an environment server; ``status``
        ├── EpisodeNotFound          404 no open episode with that id (closed, reaped, never issued)
        ├── EpisodeLost              410 the episode's server restarted or stopped answering:
        │                            an infrastructure failure, masked by the learner, never 0
        ├── SeqConflict              409 a stale or skipped ``seq`` (``expected`` says which)
        ├── SeqReused                409 the last ``seq`` again, with a different action
        ├── AtCapacity               429 the server holds ``max_episodes``; see ``retry_after``
        ├── DeadlineExceeded         504 a step ran past the server's deadline; episode closed
        ├── Unauthorized             401 missing or wrong bearer token
        ├── PayloadTooLarge          413 the request body is over the server's limit
        ├── InvalidRequest           422 the request does not match the wire schema
        ├── ReferenceDisabled        403 gold/verifier endpoints are switched off on the server
        ├── ServerDraining           503 the server is shutting down
        ├── EnvCrashed               500 the environment raised; the episode was closed
        ├── InternalServerError      500 anything else (a bug)
        ├── RateLimited              429 too many requests from one client or token; ``retry_after``
        └── ServerUnreachable        no HTTP answer at all after the client's bounded retries
            └── RequestTimeout       no answer within the client's deadline

Private control-flow exceptions that never leave their module (a retry signal, a gold
query that failed) derive from :class:`GymhubError` too. The one place that cannot is the
unit-test harness that runs inside the sandbox: it imports the standard library only.

The server errors travel as ``{"error": {"code", "message"}}``; the client turns each
``code`` back into the same class (:func:`error_from_code`), so code that catches
:class:`EnvNotFound` or :class:`EpisodeFinished` works unchanged whether the
environment is local or remote. Which HTTP status carries which code is the server's
business (:mod:`gymhub.server.error_replies`); ``status`` on each class is its default.
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "ArchiveTooLarge",
    "AtCapacity",
    "AttestationMismatch",
    "BackendError",
    "BlobCorrupted",
    "ConfigError",
    "CorruptArchive",
    "DeadlineExceeded",
    "DigestMismatch",
    "DuplicateEnv",
    "DuplicateMember",
    "EngineError",
    "EngineMisconfigured",
    "EnvCheckFailed",
    "EnvCrashed",
    "EnvNotFound",
    "EpisodeError",
    "EpisodeFinished",
    "EpisodeLost",
    "EpisodeNotFound",
    "EpisodeNotStarted",
    "GenerationAborted",
    "GymhubError",
    "HubError",
    "HubStoreError",
    "InstallRefused",
    "InternalServerError",
    "InvalidArchive",
    "InvalidHubInput",
    "InvalidName",
    "InvalidRequest",
    "KeyMismatch",
    "LookalikeName",
    "NamespaceViolation",
    "OwnerNotFound",
    "PackageNotFound",
    "PayloadTooLarge",
    "QueryError",
    "QuotaExceeded",
    "RateLimited",
    "RecordMismatch",
    "ReferenceDisabled",
    "RegistryError",
    "ReplProtocolError",
    "RequestTimeout",
    "ReservedName",
    "SandboxPathError",
    "SeqConflict",
    "SeqReused",
    "ServerDraining",
    "ServerError",
    "ServerUnreachable",
    "SignatureInvalid",
    "SpecError",
    "TaskFileError",
    "TaskNotFound",
    "TemplateError",
    "TokenError",
    "TokenExpired",
    "TokenInvalid",
    "TokenOwnerError",
    "TokenRevoked",
    "TokenScopeError",
    "ToolError",
    "Unauthorized",
    "UnsafeMember",
    "UntrustedPackage",
    "VersionConflict",
    "VersionNotFound",
    "WeightSyncError",
    "WheelFilenameError",
    "WheelMetadataError",
    "error_from_code",
]


class GymhubError(Exception):
    """Base class of every gymhub exception; ``code`` is stable and travels on the wire."""

    code = "gymhub_error"


class ConfigError(GymhubError, ValueError):
    """A configuration the user supplied is invalid."""

    code = "invalid_config"


class SpecError(ConfigError):
    """A verifier spec failed to compile.

    Attributes:
        field: dotted path of the offending field, e.g. ``parts[1].weight``.
    """

    code = "invalid_spec"

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class TaskFileError(ConfigError):
    """A task file (JSONL) is malformed or refers to missing data.

    Attributes:
        path: the file.
        line: 1-based line number, or ``None`` for file-level problems.
    """

    code = "invalid_task_file"

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


class RegistryError(GymhubError):
    """A registry lookup or registration failed."""

    code = "registry_error"


class EnvNotFound(RegistryError, KeyError):
    """No environment is registered under the requested id."""

    code = "env_not_found"

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DuplicateEnv(RegistryError):
    """An environment id was registered twice."""

    code = "duplicate_env"


class TaskNotFound(GymhubError, KeyError):
    """A requested task id does not exist in the environment's task set."""

    code = "task_not_found"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class EpisodeError(GymhubError):
    """An episode was driven out of order."""

    code = "episode_error"


class EpisodeNotStarted(EpisodeError):
    """``step`` was called before ``reset``."""

    code = "episode_not_started"


class EpisodeFinished(EpisodeError):
    """``step`` was called after the episode ended; call ``reset`` first."""

    code = "episode_finished"


class EnvCheckFailed(GymhubError, AssertionError):
    """``check_env`` found at least one failing check; ``report`` holds all of them."""

    code = "env_check_failed"

    def __init__(self, message: str, report: object = None) -> None:
        self.report = report
        super().__init__(message)


class BackendError(GymhubError):
    """A backend (database, sandbox) could not be used at all."""

    code = "backend_error"


class EngineError(GymhubError):
    """An inference engine failed, or reported something the learner must not train on."""

    code = "engine_error"


class EngineMisconfigured(EngineError, ConfigError):
    """The engine (a vLLM server) runs without a setting the learner depends on.

    Raised at start rather than discovered as wrong numbers later: the message names
    the missing flag and how to start the server (``gymhub vllm-serve``).
    """

    code = "engine_misconfigured"


class GenerationAborted(EngineError):
    """The engine aborted a request (vLLM's finish reason ``abort``): the tokens are partial.

    The rollout marks the trajectory errored instead of reading the cut as a stop.
    """

    code = "generation_aborted"


class WeightSyncError(EngineError):
    """Pushing weights to an engine failed, timed out, or carried a stale version.

    After a timeout the transfer channel is in an unknown state: restart the engine.
    """

    code = "weight_sync_error"


class TemplateError(ConfigError):
    """The chat template cannot be used token-exactly (it is not prefix-preserving)."""

    code = "invalid_template"


class SandboxPathError(GymhubError, ValueError):
    """A file name given to a sandbox session's files in/out API would leave the workdir.

    Absolute paths, ``..`` components, NUL bytes and paths through symbolic links are
    refused: the names come from the caller, so this is a caller error, not a result.
    """

    code = "unsafe_path"


class ReplProtocolError(BackendError):
    """A sandboxed interpreter sent something that is not the expected frame.

    The session treats it as a crash of the interpreter: it is restarted and the agent is
    told so; the caller of the session sees it only if the restart fails too.
    """

    code = "repl_protocol_error"


class AgentError(GymhubError):
    """The agent's mistake: the environment catches it and answers the agent with it.

    ``str(exc)`` is shown to the agent verbatim, so every message says what went wrong
    and what to do instead.
    """

    code = "agent_error"


class ToolError(AgentError):
    """Raised by a tool to answer the agent with an error message (not a crash)."""

    code = "tool_error"


class QueryError(AgentError):
    """A query failed because of the query itself (the agent's fault).

    Infrastructure failures (a dead server, a corrupt fixture) are
    :class:`BackendError`, never this.

    Attributes:
        kind: ``"syntax"``, ``"refused"``, ``"timeout"``, ``"too_large"``,
            ``"encoding"`` or ``"runtime"``.
    """

    code = "query_error"
    KINDS = frozenset({"syntax", "refused", "timeout", "too_large", "encoding", "runtime"})

    def __init__(self, kind: str, message: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown QueryError kind {kind!r}")
        self.kind = kind
        super().__init__(message)


# ------------------------------------------------------------------ hub errors
class HubError(GymhubError):
    """Publishing, validating or resolving an environment on the hub failed."""

    code = "hub_error"


class InvalidName(HubError, ValueError):
    """An owner, environment name, environment id or distribution name is refused.

    Attributes:
        kind: ``"owner"``, ``"env_name"``, ``"env_id"`` or ``"distribution"``.
        value: the name as given.
    """

    code = "invalid_name"

    def __init__(self, kind: str, value: str, reason: str) -> None:
        self.kind = kind
        self.value = value
        super().__init__(f"invalid {kind.replace('_', ' ')} {value!r}: {reason}")


class ReservedName(InvalidName):
    """The name is well formed but kept for the hub itself (``admin``, ``simple``, ...)."""

    code = "reserved_name"


class LookalikeName(InvalidName):
    """The name looks like an existing one: same skeleton, or one typo away.

    Same skeleton: ``l``/``1``, ``o``/``0``, ``-``/``_``; one typo: an insertion,
    deletion, substitution or swap of neighbours.

    Attributes:
        existing: the name it would be confused with.
    """

    code = "lookalike_name"

    def __init__(self, kind: str, value: str, existing: str) -> None:
        self.existing = existing
        super().__init__(kind, value, f"too close to the existing {existing!r} "
                                      "(look-alike characters or one typo apart)")


class InvalidArchive(HubError, ValueError):
    """An uploaded wheel is refused; nothing of it was extracted or stored.

    Attributes:
        member: the archive member at fault, or ``None`` for the archive as a whole.
    """

    code = "invalid_archive"

    def __init__(self, message: str, member: str | None = None) -> None:
        self.member = member
        super().__init__(f"{member!r}: {message}" if member is not None else message)


class WheelFilenameError(InvalidArchive):
    """The file name is not ``{name}-{version}-py3-none-any.whl`` for a hub distribution."""

    code = "invalid_wheel_filename"


class CorruptArchive(InvalidArchive):
    """Not a zip, truncated, encrypted, or two parts of the zip disagree (parser confusion)."""

    code = "corrupt_archive"


class UnsafeMember(InvalidArchive):
    """A member's name or type could escape or subvert an install (``..``, symlink, ``.pth``)."""

    code = "unsafe_member"


class DuplicateMember(InvalidArchive):
    """Two members share a name, or collide after case folding or Unicode normalisation."""

    code = "duplicate_member"


class ArchiveTooLarge(InvalidArchive):
    """A member count, size or compression-ratio cap was exceeded (zip bombs included)."""

    code = "archive_too_large"


class RecordMismatch(InvalidArchive):
    """``RECORD`` does not list every member exactly once with its true hash and size."""

    code = "record_mismatch"


class WheelMetadataError(InvalidArchive):
    """``METADATA``, ``WHEEL`` or ``entry_points.txt`` is malformed or disagrees with the name."""

    code = "invalid_wheel_metadata"


class NamespaceViolation(InvalidArchive):
    """The wheel claims a name, environment id or module outside the uploader's namespace."""

    code = "namespace_violation"


# ------------------------------------------------------------------ server errors
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
    """No open episode of this server has that id: it was closed, reaped, or never issued.

    An id issued by an earlier start of the server is :class:`EpisodeLost` instead.
    """

    code = "episode_not_found"
    status = 404


class EpisodeLost(ServerError):
    """The episode was held by a server incarnation that is gone (restarted, or silent).

    Its id names another incarnation than the answering server's, or the server stopped
    answering past the step's deadline. Unlike ``episode_not_found`` (a caller's mistake:
    a closed or unknown id), this is an infrastructure failure: the learner masks and
    counts the trajectory, never scores it 0.
    """

    code = "episode_lost"
    status = 410


class SeqReused(ServerError):
    """The last applied ``seq`` arrived again carrying a different action.

    An identical retry is answered with the cached reply; a reused ``seq`` with other
    content is refused, as an idempotency key reused with other parameters is.
    """

    code = "seq_reused"
    status = 409


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


class ServerUnreachable(ServerError):
    """No HTTP answer came back (refused, reset, dropped) after the client's bounded retries.

    Named for what the learner can do about it (check the server), and unlike
    ``httpx.TransportError`` it means the retries are spent: nothing above retries again.
    """

    code = "transport_error"
    status = 0


class RequestTimeout(ServerUnreachable):
    """The server did not answer within the client's timeout."""

    code = "request_timeout"


class RateLimited(ServerError):
    """A client address or token sent more requests than its rate allows.

    The answer is a 429 whose ``Retry-After`` says when the next request will be taken.
    """

    code = "rate_limited"
    status = 429


# ------------------------------------------------------------------ hub storage errors
class HubStoreError(HubError):
    """The hub's storage layer refused an operation or could not find what it names.

    Attributes:
        status: the HTTP status the hub service answers this error with by default.
    """

    code = "hub_store_error"
    status = 500


class OwnerNotFound(HubStoreError):
    """No owner (namespace) has that name."""

    code = "owner_not_found"
    status = 404


class PackageNotFound(HubStoreError):
    """No package has that owner and name; the message suggests near names, never uses them."""

    code = "package_not_found"
    status = 404


class VersionNotFound(HubStoreError):
    """The version does not exist, or nothing un-yanked satisfies the request."""

    code = "version_not_found"
    status = 404


class VersionConflict(HubStoreError):
    """``(owner, name, version)`` already maps to other bytes, or was deleted for good.

    Versions are immutable and never reused: publishing the same bytes again is a no-op,
    anything else under that version is this error, yanked or deleted included.
    """

    code = "version_conflict"
    status = 409


class DigestMismatch(HubStoreError, ValueError):
    """The uploaded bytes do not hash to (or are not the size of) what was declared."""

    code = "digest_mismatch"
    status = 400


class InvalidHubInput(HubStoreError, ValueError):
    """A name, version, scope, duration or other field the hub store cannot accept."""

    code = "invalid_hub_input"
    status = 400


class BlobCorrupted(HubStoreError):
    """A stored blob is missing, or its size or digest is not what the database records."""

    code = "blob_corrupted"
    status = 500


class TokenError(HubStoreError):
    """A token cannot authorise this request."""

    code = "token_error"
    status = 401


class TokenInvalid(TokenError):
    """The token is malformed or unknown, or its secret does not match."""

    code = "token_invalid"


class TokenRevoked(TokenError):
    """The token was revoked."""

    code = "token_revoked"


class TokenExpired(TokenError):
    """The token is past its expiry time."""

    code = "token_expired"


class TokenScopeError(TokenError):
    """The token is valid but lacks the scope this request needs."""

    code = "token_scope"
    status = 403


class TokenOwnerError(TokenError):
    """The token is valid but belongs to another owner's namespace."""

    code = "token_owner"
    status = 403


class QuotaExceeded(HubStoreError):
    """Publishing would take the owner's stored versions past its storage quota.

    The hub keeps every version forever (immutability), so the only bound on what one
    owner can make it store is a quota on the sum of the owner's version sizes.
    """

    code = "quota_exceeded"
    status = 413


# ------------------------------------------------------------------ hub install refusals
class InstallRefused(HubError):
    """``gymhub install`` refused a file before pip saw it: nothing was installed or locked."""

    code = "install_refused"


class UntrustedPackage(InstallRefused):
    """The hub's check of this exact file did not pass, or no signed check vouches for it.

    ``--trust`` overrides it (and the lock records that it did); so does a lock entry the
    user already trusted for the same sha256.
    """

    code = "untrusted_package"


class KeyMismatch(InstallRefused):
    """The hub presents a signing key other than the one pinned on first use.

    Either the hub rotated its key or something in between is impersonating it; only the
    user can tell which, so only ``--trust`` re-pins.
    """

    code = "key_mismatch"


class SignatureInvalid(InstallRefused):
    """An attestation's signature does not verify under the hub's key (never overridable).

    A statement whose status, digest or any other field was altered, or a signature from
    another key, is refused as a typed error instead of a silent ``False``.
    """

    code = "signature_invalid"


class AttestationMismatch(InstallRefused):
    """A correctly signed attestation names other bytes, another file or another package.

    A valid signature over the wrong statement is a replayed attestation, so ``--trust``
    does not override it either.
    """

    code = "attestation_mismatch"


_SERVER_CLASSES: tuple[type[ServerError], ...] = (
    EpisodeNotFound, EpisodeLost, SeqConflict, SeqReused, AtCapacity, DeadlineExceeded,
    Unauthorized, PayloadTooLarge, InvalidRequest, ReferenceDisabled, ServerDraining,
    EnvCrashed, InternalServerError,
)
#: The classes whose codes a server answers, by code.
_BY_CODE: dict[str, type[GymhubError]] = {
    **{c.code: c for c in _SERVER_CLASSES},
    **{c.code: c for c in (EnvNotFound, TaskNotFound, EpisodeFinished, EpisodeNotStarted,
                           ConfigError)},
}


def error_from_code(status: int, code: str, message: str, *,
                    retry_after: float | None = None,
                    expected: int | None = None) -> GymhubError:
    """Rebuild the exception a server answered, mirroring its ``code``.

    It lives here, below both sides, because the client decodes answers with it and the
    server uses it to type the errors its framework raises (404, 405, 413).

    Args:
        status: the HTTP status the answer came with.
        code: the answer's stable ``error.code``.
        message: the answer's ``error.message``.
        retry_after: the ``Retry-After`` seconds, if the answer carried one.
        expected: on ``seq_conflict``, the ``seq`` the server expects next.

    Returns:
        The class registered for ``code``; an unknown code (a newer server) becomes a
        plain :class:`ServerError` keeping that code and status, so nothing is lost.
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

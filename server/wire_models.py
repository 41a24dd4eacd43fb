"""Pydantic models of the wire protocol: the only place gymhub uses pydantic.

Requests are validated strictly (unknown fields refused) so that a typo in a client
is a readable 422, not a silently ignored option. Replies are documented here for the
OpenAPI schema, but the hot path builds them as plain dicts (see :func:`jsonable`),
because validating every step reply would cost more than stepping ``echo-v0``.

Everything that crosses the wire is JSON: messages travel as
:meth:`gymhub.types.Message.to_dict` dicts, the terminal score as a top-level
``score`` object (:meth:`gymhub.types.Score.to_dict`), and anything in ``info`` that
JSON cannot hold is turned into something it can (see :func:`jsonable`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gymhub.json_codec import dumps, loads
from gymhub.types import Message, Score

__all__ = [
    "BatchClose",
    "BatchCreate",
    "BatchReply",
    "BatchRequest",
    "BatchResult",
    "BatchStep",
    "CreateEpisode",
    "EnvInfo",
    "EnvList",
    "EpisodeClosed",
    "EpisodeCreated",
    "ErrorBody",
    "ErrorDetail",
    "Health",
    "MessageModel",
    "ScoreModel",
    "StepReply",
    "StepRequest",
    "TaskList",
    "TaskSummary",
    "VerifierCaseModel",
    "VerifyRequest",
    "dumps",
    "jsonable",
    "loads",
]

_STRICT = ConfigDict(extra="forbid")
_OPEN = ConfigDict(extra="allow")

#: Largest value a JSON number keeps exactly in every client (JavaScript included).
MAX_SAFE_INT = 2**53 - 1


class ErrorDetail(BaseModel):
    """The error of a failed request."""

    code: str = Field(description="Stable machine-readable code, e.g. 'seq_conflict'.")
    message: str = Field(description="What went wrong and what to do about it.")
    expected_seq: int | None = Field(
        default=None, description="On 'seq_conflict': the seq the server expects next.")


class ErrorBody(BaseModel):
    """Every non-2xx reply."""

    error: ErrorDetail


class MessageModel(BaseModel):
    """A chat message in OpenAI shape (documentation of observations)."""

    model_config = _OPEN
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class ScoreModel(BaseModel):
    """A verifier's verdict; ``error`` set means "could not judge", not zero."""

    value: float
    components: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    verifier: str = ""


class CreateEpisode(BaseModel):
    """``POST /v1/episodes``: open an episode of ``env``."""

    model_config = _STRICT
    env: str = Field(min_length=1, max_length=200, description="A served environment id.")
    seed: int | None = Field(default=None, ge=0, le=MAX_SAFE_INT,
                             description="Picks the task deterministically.")
    task_id: str | None = Field(default=None, max_length=500,
                                description="Picks a task by id (wins over seed).")
    options: dict[str, Any] | None = Field(default=None,
                                           description="Passed to the environment's reset.")
    request_id: str | None = Field(
        default=None, min_length=1, max_length=100,
        description="Makes creation idempotent: a retry with the same id gets the same episode.",
    )


class EpisodeCreated(BaseModel):
    """The first observation of a new episode."""

    episode_id: str
    env: str
    observation: list[MessageModel]
    info: dict[str, Any]


class StepRequest(BaseModel):
    """``POST /v1/episodes/{id}/step``: one assistant action.

    ``seq`` numbers the steps of an episode from 1. Sending the last applied ``seq``
    again with the same action returns the cached reply (a safe retry); with another
    action it is refused with 409 ``seq_reused``; any other ``seq`` but the next is
    refused with 409 ``seq_conflict``, so a step is never applied twice or out of order.
    """

    model_config = _STRICT
    action: Any = Field(description="An assistant message dict; a malformed one is answered by "
                                    "the environment with an error message, not refused.")
    seq: int = Field(ge=1, le=MAX_SAFE_INT,
                     description="1 for the first step, then +1; the last one again, with "
                                 "the same action, replays its reply.")


class StepReply(BaseModel):
    """What one step returns; ``score`` is set on the terminal step."""

    seq: int
    observation: list[MessageModel]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    score: ScoreModel | None = None


class EpisodeClosed(BaseModel):
    """``DELETE /v1/episodes/{id}``."""

    episode_id: str
    closed: bool


#: Most operations one ``POST /v1/batch`` may carry.
MAX_BATCH_OPS = 1024


class BatchCreate(CreateEpisode):
    """A batched ``POST /v1/episodes``."""

    op: Literal["create"]


class BatchStep(StepRequest):
    """A batched ``POST /v1/episodes/{id}/step``."""

    op: Literal["step"]
    episode_id: str = Field(min_length=1, max_length=200)


class BatchClose(BaseModel):
    """A batched ``DELETE /v1/episodes/{id}``."""

    model_config = _STRICT
    op: Literal["close"]
    episode_id: str = Field(min_length=1, max_length=200)


class BatchRequest(BaseModel):
    """``POST /v1/batch``: many episode operations in one request.

    Each operation is answered exactly as its own request would be (same status, same
    body, same idempotency: steps keep their ``seq``, creations their ``request_id``),
    so a client may resend a whole batch after a transport failure. Operations run
    concurrently; those on one episode apply in list order.
    """

    model_config = _STRICT
    ops: list[Annotated[BatchCreate | BatchStep | BatchClose, Field(discriminator="op")]] = \
        Field(min_length=1, max_length=MAX_BATCH_OPS)


class BatchResult(BaseModel):
    """One operation's answer: its HTTP status and the body its own request would get."""

    status: int
    body: dict[str, Any]
    retry_after: int | None = Field(default=None, description="Seconds, on a 429 or 503.")


class BatchReply(BaseModel):
    """The answers, in the order of the operations."""

    results: list[BatchResult]


class EnvInfo(BaseModel):
    """One served environment."""

    id: str
    description: str
    verifier: str = Field(description="The verifier kind, e.g. 'sql_match'.")
    verifier_id: str = Field(description="name@hash of the compiled verifier, when known.")
    tags: list[str]
    max_turns: int | None
    task_count: int
    tools: list[dict[str, Any]]
    env_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Constructor arguments the server passes (gymhub serve --env-arg).")
    standalone_verifier: bool = Field(
        default=True,
        description="Whether the environment scores with a standalone verifier (golden "
                    "cases via /v1/cases) rather than through its tools; a remote "
                    "check_env picks its scoring evidence by it.")


#: What an incarnation field says, on every model that carries one.
_INCARNATION = ("This server start's random id (8 hex digits), new at every start and written "
                "at the front of every episode id it issues (`<incarnation>-<random>`). A "
                "step for an id of another incarnation is answered 'episode_lost' (410): the "
                "server restarted and the episode is gone.")


class EnvList(BaseModel):
    """``GET /v1/envs``."""

    envs: list[EnvInfo]
    incarnation: str = Field(default="", description=_INCARNATION)


class TaskSummary(BaseModel):
    """A task's id and tags (never its gold answer)."""

    id: str
    meta: dict[str, Any]


class TaskList(BaseModel):
    """``GET /v1/tasks?env=ID``: task ids and tags, never gold answers."""

    total: int
    tasks: list[TaskSummary]


class VerifierCaseModel(BaseModel):
    """A golden verifier case (see :class:`gymhub.envs.VerifierCase`)."""

    submission: Any
    expect: str
    note: str


class VerifyRequest(BaseModel):
    """``POST /v1/verify?env=ID``: score a submission outside an episode."""

    model_config = _STRICT
    task_id: str = Field(min_length=1, max_length=500)
    submission: Any


class Health(BaseModel):
    """``GET /healthz``."""

    status: str
    episodes_open: int
    max_episodes: int
    draining: bool
    incarnation: str = Field(description=_INCARNATION)


def jsonable(value: Any, _depth: int = 0) -> Any:
    """Turn ``value`` into something :func:`json.dumps` accepts without loss of meaning.

    Messages and scores use their ``to_dict``; other dataclasses become dicts; sets and
    tuples become lists; non-finite floats become strings ("nan", "inf") because JSON
    has no such numbers; anything else unknown becomes its ``str``. The server calls
    this on ``info`` so that a stray object in an environment's info is a string on
    the wire instead of a 500.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if _depth > 32:
        return str(value)
    if isinstance(value, Message | Score):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, _depth + 1) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value), _depth + 1)
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return jsonable(item(), _depth + 1)
        except (TypeError, ValueError):
            pass
    return str(value)

"""The data that crosses every boundary: messages, tool calls, step results and scores.

Messages use the OpenAI chat shape because every chat template and inference server
already speaks it. These are plain dataclasses for in-process speed; the HTTP layer
converts them with :meth:`to_dict` / :meth:`from_dict` and validates there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Message",
    "Role",
    "Score",
    "StepResult",
    "Task",
    "ToolCall",
    "ToolSpec",
    "VerifierCase",
    "format_message",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True)
class ToolCall:
    """One structured tool call made by the assistant.

    ``arguments`` is already parsed: turning model text into a ``ToolCall`` is the
    learner's job (it knows the model family's format), never the environment's.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """OpenAI-style dict (``function.arguments`` kept as an object, not a string)."""
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        """Accept both the flat shape and OpenAI's ``{"function": {...}}`` shape.

        Raises:
            ValueError: the dict is not a tool call.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a tool call must be an object, got {type(data).__name__}")
        fn = data.get("function")
        if isinstance(fn, Mapping):
            name, args = fn.get("name"), fn.get("arguments", {})
        else:
            name, args = data.get("name"), data.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"tool call arguments are not valid JSON: {exc.msg}") from exc
        if not isinstance(name, str) or not name:
            raise ValueError("a tool call needs a non-empty string 'name'")
        if not isinstance(args, Mapping):
            raise ValueError("tool call 'arguments' must be a JSON object")
        call_id = data.get("id") or ""
        return cls(id=str(call_id), name=name, arguments=dict(args))


@dataclass(frozen=True)
class Message:
    """One chat message.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: the text.
        tool_calls: calls made by an assistant message.
        tool_call_id: on a ``tool`` message, the call it answers.
        name: on a ``tool`` message, the tool's name.
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Chat-template-ready dict; ``None`` fields are left out."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Build a message from a dict, validating the shape.

        Raises:
            ValueError: with a message that says which field is wrong.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a message must be an object, got {type(data).__name__}")
        role = data.get("role")
        if role not in ROLES:
            raise ValueError(f"message 'role' must be one of {sorted(ROLES)}, got {role!r}")
        content = data.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ValueError("message 'content' must be a string")
        raw_calls = data.get("tool_calls")
        calls: tuple[ToolCall, ...] | None = None
        if raw_calls:
            if not isinstance(raw_calls, list | tuple):
                raise ValueError("message 'tool_calls' must be a list")
            calls = tuple(ToolCall.from_dict(c) for c in raw_calls)
        tcid, name = data.get("tool_call_id"), data.get("name")
        return cls(
            role=role,
            content=content,
            tool_calls=calls,
            tool_call_id=None if tcid is None else str(tcid),
            name=None if name is None else str(name),
        )


@dataclass(frozen=True)
class ToolSpec:
    """A JSON-schema function description, as chat templates and OpenAI expect."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """OpenAI ``tools=[...]`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json.loads(json.dumps(self.parameters)),
            },
        }


@dataclass(frozen=True)
class Score:
    """A verifier's verdict.

    ``error`` is *not* a zero: it says the verifier could not judge (its own
    timeout, a crashed fixture, a sandbox failure). The learner masks such a
    trajectory instead of training on a fake 0. ``value`` is then 0.0 and must be
    ignored.

    Attributes:
        value: the score in [0, 1] (combinators may use other ranges).
        components: named sub-scores, e.g. ``{"fixture": 1.0, "perturbed": 0.5}``.
        error: why the verifier could not judge, or ``None``.
        details: anything that explains the verdict (reasons, per-database results).
        verifier: ``name@hash`` of the verifier that produced it.
    """

    value: float
    components: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    verifier: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.value, int | float) or math.isnan(self.value):
            raise ValueError(f"Score.value must be a real number, got {self.value!r}")

    @property
    def ok(self) -> bool:
        """True when the verifier could judge (the value is meaningful)."""
        return self.error is None

    @classmethod
    def failed(cls, error: str, verifier: str = "", **details: Any) -> Score:
        """A score for a verifier that could not judge."""
        return cls(value=0.0, error=error, details=dict(details), verifier=verifier)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "value": self.value,
            "components": dict(self.components),
            "error": self.error,
            "details": json.loads(json.dumps(self.details, default=str)),
            "verifier": self.verifier,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Score:
        """Inverse of :meth:`to_dict`."""
        return cls(
            value=float(data["value"]),
            components={str(k): float(v) for k, v in dict(data.get("components") or {}).items()},
            error=data.get("error"),
            details=dict(data.get("details") or {}),
            verifier=str(data.get("verifier") or ""),
        )


@dataclass
class StepResult:
    """What one ``step`` returns, as a single object (the tuple form is Gymnasium's)."""

    observation: list[Message]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    def as_tuple(self) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Gymnasium's five-tuple."""
        return self.observation, self.reward, self.terminated, self.truncated, self.info


@dataclass(frozen=True)
class Task:
    """One task of an environment.

    Attributes:
        id: unique within the environment; ``reset(options={"task_id": id})`` picks it.
        prompt: the question or instruction shown to the agent.
        fixture: what the episode runs on (a database reference, files ...).
        gold: the reference solution; the gold policy submits it and must score 1.0.
        meta: free-form tags such as ``difficulty`` and ``category``.
    """

    id: str
    prompt: str
    fixture: Any = None
    gold: Any = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifierCase:
    """A golden case for an environment's verifier, checked by ``check_env``.

    Attributes:
        submission: what the agent would submit.
        expect: ``pass`` (scores 1.0), ``fail`` (scores below 1.0) or ``malformed``
            (scores 0.0 with a reason); none of them may come back as an ``error``.
        note: what the case demonstrates.
    """

    submission: Any
    expect: Literal["pass", "fail", "malformed"]
    note: str = ""


def format_message(m: Message) -> str:
    """One message as a line of a transcript."""
    text = f"[{m.role}{':' + m.name if m.name else ''}] {m.content}"
    for c in m.tool_calls or ():
        text += f"\n  -> {c.name}({c.arguments})"
    return text

"""Tool-calling environments: tools are methods, their schema is their signature.

``@tool`` reads a method's type hints and Google-style docstring once, at class
creation, into a JSON schema (what chat templates show the model) and a validator
(what stands between the model's arguments and the method). Validation is strict in
the way BFCL is: ``"5"`` is not an integer, unknown arguments are refused, and every
refusal is a message the model can act on.
"""

from __future__ import annotations

import difflib
import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from gymhub.errors import BackendError, ToolError
from gymhub.types import Message, Score, StepResult, ToolCall, ToolSpec

from ..core import TextEnv

__all__ = ["Final", "ToolDef", "ToolEnv", "ToolError", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

#: Tool calls beyond this many in one assistant message are refused.
MAX_CALLS_PER_TURN = 8


@dataclass(frozen=True)
class Final:
    """Returned by a tool that ends the episode (``submit``), with the verifier's score."""

    content: str
    score: Score


@dataclass(frozen=True)
class _Param:
    name: str
    schema: dict[str, Any]
    required: bool
    description: str


@dataclass(frozen=True)
class ToolDef:
    """A compiled tool: its public spec and how to validate a call to it."""

    name: str
    method: str
    spec: ToolSpec
    params: tuple[_Param, ...]

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check a call's arguments against the schema.

        Raises:
            ToolError: naming the argument and what was expected.
        """
        known = {p.name: p for p in self.params}
        unknown = [k for k in arguments if k not in known]
        if unknown:
            expected = ", ".join(known) or "no arguments"
            raise ToolError(
                f"unknown argument {_shown(unknown[0])} for {self.name}; expected: {expected}"
            )
        out: dict[str, Any] = {}
        for p in self.params:
            if p.name not in arguments:
                if p.required:
                    expected = _describe(p.schema)
                    raise ToolError(
                        f"missing required argument {p.name!r} ({expected}) for {self.name}"
                    )
                continue
            out[p.name] = _check(arguments[p.name], p.schema, p.name)
        return out


def tool(fn: F | None = None, *, name: str | None = None) -> Any:
    """Mark a method of a :class:`ToolEnv` as a tool the agent may call.

    The JSON schema comes from the type hints (``str``, ``int``, ``float``, ``bool``,
    ``list[T]``, ``dict``, ``Literal[...]``, ``T | None``); descriptions come from the
    docstring's summary and its ``Args:`` section. Parameters with defaults are optional.
    """

    def mark(f: F) -> F:
        f.__gymhub_tool__ = name or f.__name__  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


class ToolEnv(TextEnv):
    """A :class:`TextEnv` whose actions are tool calls to ``@tool`` methods.

    Each tool call in an assistant message is validated and run in order; each gets a
    ``tool`` message back. A tool returning :class:`Final` ends the episode
    (terminated) and its score becomes ``info["score"]``. An assistant message with no
    tool calls is answered by :meth:`on_text`.
    """

    _tool_defs: ClassVar[dict[str, ToolDef]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        defs: dict[str, ToolDef] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                tool_name = getattr(value, "__gymhub_tool__", None)
                if tool_name:
                    defs[tool_name] = _compile_tool(tool_name, attr, value)
        cls._tool_defs = defs

    def tool_specs(self) -> list[ToolSpec]:
        """Specs of every ``@tool`` method, in definition order."""
        return [d.spec for d in self._tool_defs.values()]

    def on_text(self, action: Message) -> StepResult:
        """Answer an assistant message that called no tool.

        The text is quoted back (shortened): when the learner could not parse the
        model's tool call it sends the parse error as text, and this is how the
        model gets to see what was wrong.
        """
        names = ", ".join(self._tool_defs)
        text = " ".join(action.content.split())
        quoted = f" ({text[:300]}{'...' if len(text) > 300 else ''})" if text else ""
        reply = f"Error: no tool call found{quoted}. Call one of: {names}."
        return StepResult(
            [Message(role="user", content=reply)],
            0.0,
            False,
            False,
            {"error": "no_tool_call"},
        )

    def _step(self, action: Message) -> StepResult:
        if not action.tool_calls:
            return self.on_text(action)
        observation: list[Message] = []
        info: dict[str, Any] = {}
        terminated = False
        for i, call in enumerate(action.tool_calls):
            if terminated:
                content = "Error: not run; the episode already ended with an earlier call."
            elif i >= MAX_CALLS_PER_TURN:
                content = f"Error: not run; at most {MAX_CALLS_PER_TURN} tool calls per turn."
            else:
                content, final = self.call_tool(call)
                if final is not None:
                    terminated = True
                    info["score"] = final.score
            observation.append(
                Message(role="tool", content=content, tool_call_id=call.id or None, name=call.name)
            )
        return StepResult(observation, 0.0, terminated, False, info)

    def call_tool(self, call: ToolCall) -> tuple[str, Final | None]:
        """Validate and run one call; agent mistakes come back as ``Error: ...`` text."""
        tool_def = self._tool_defs.get(call.name)
        if tool_def is None:
            hint = difflib.get_close_matches(call.name, list(self._tool_defs), n=1)
            did_you_mean = f" Did you mean {hint[0]!r}?" if hint else ""
            available = ", ".join(self._tool_defs)
            return (f"Error: unknown tool {_shown(call.name)}.{did_you_mean} "
                    f"Available: {available}."), None
        try:
            arguments = tool_def.validate(call.arguments)
            result = getattr(self, tool_def.method)(**arguments)
        except ToolError as exc:
            return f"Error: {exc}", None
        except BackendError as exc:
            # Not the agent's fault and nothing it can fix: end the episode with an
            # errored score, so the learner masks the trajectory instead of training on it.
            note = f"Error: the environment's backend failed ({exc}); the episode ends unscored."
            return note, Final(note, Score.failed(f"backend error in {call.name}: {exc}"))
        if isinstance(result, Final):
            return result.content, result
        return str(result), None


# ------------------------------------------------------------------ compilation
_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    dict: {"type": "object"},
    list: {"type": "array"},
}


def _schema_of(hint: Any, where: str) -> dict[str, Any]:
    if hint in _SIMPLE:
        return dict(_SIMPLE[hint])
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple) and args:
        return {"type": "array", "items": _schema_of(args[0], where)}
    if origin is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and len(args) == 2:
            return {**_schema_of(inner[0], where), "nullable": True}
    raise TypeError(f"{where}: unsupported tool parameter type {hint!r}")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    summary, args, current = [], {}, None
    in_args = False
    for raw in inspect.cleandoc(doc).splitlines():
        line = raw.rstrip()
        if re.match(r"^(Args|Arguments|Parameters):\s*$", line):
            in_args = True
            continue
        if in_args and re.match(r"^[A-Z][A-Za-z ]*:\s*$", line):
            in_args = False
        if in_args:
            m = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if m and raw.startswith("    ") and not raw.startswith("        "):
                current = m.group(1)
                args[current] = m.group(2)
            elif current and line.strip():
                args[current] += " " + line.strip()
        elif not args and not in_args:
            summary.append(line)
    description = " ".join(" ".join(summary).split())
    return description, args


def _compile_tool(name: str, attr: str, fn: Callable[..., Any]) -> ToolDef:
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    description, arg_docs = _parse_docstring(fn.__doc__ or "")
    params: list[_Param] = []
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in list(sig.parameters.values())[1:]:  # skip self
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {name}: *args/**kwargs are not allowed")
        if p.name not in hints:
            raise TypeError(f"tool {name}: parameter {p.name!r} needs a type hint")
        schema = _schema_of(hints[p.name], f"tool {name}, parameter {p.name}")
        doc = arg_docs.get(p.name, "")
        prop = {**schema, "description": doc} if doc else dict(schema)
        properties[p.name] = prop
        is_required = p.default is inspect.Parameter.empty
        if is_required:
            required.append(p.name)
        params.append(_Param(p.name, schema, is_required, doc))
    parameters = {"type": "object", "properties": properties, "required": required}
    return ToolDef(name, attr, ToolSpec(name, description, parameters), tuple(params))


def _shown(value: Any, limit: int = 40) -> str:
    """A model-chosen value quoted back, shortened: an error must not echo 150 kB."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    return str(schema.get("type", "any"))


def _check(value: Any, schema: dict[str, Any], where: str) -> Any:
    if value is None and schema.get("nullable"):
        return None
    if "enum" in schema:
        if value not in schema["enum"]:
            raise ToolError(f"argument {where!r} must be {_describe(schema)}, got {value!r}")
        return value
    kind = schema.get("type")
    ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
    }.get(str(kind), True)
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if not ok:
        got = _JSON_NAMES.get(type(value), type(value).__name__)
        raise ToolError(f"argument {where!r} must be {kind}, got {got} {_shown(value)}")
    if kind == "array" and "items" in schema:
        return [_check(v, schema["items"], f"{where}[{i}]") for i, v in enumerate(value)]
    return value


_JSON_NAMES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    type(None): "null",
}

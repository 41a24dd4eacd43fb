"""Reading tool calls out of a model's text, per model family.

Environments receive structured :class:`~gymhub.types.ToolCall` objects and never
tokenise (DESIGN.md §3), so the learner must turn generated text into calls. Three
families are supported:

* ``hermes`` — Hermes/Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  any number of blocks; the text outside them is the message content.
* ``json`` — a bare JSON object (or list of objects) with ``name`` and ``arguments``,
  optionally in a fenced code block; the first JSON value in the text is used.
* ``tags`` — SkyRL-SQL style ``<sql>SELECT …</sql>`` / ``<submit>…</submit>``: each
  configured tag maps to a tool and one string argument. Small models without a
  tool-calling template learn this quickly.

A parse failure is not an exception and not a silent drop: the returned message has no
tool calls and its content states the error (plus the start of the raw text), so the
environment answers a turn without a valid call and the model sees why in the
transcript. The rollout counts failures through :attr:`ParseResult.error`.

Every parser first replaces lone surrogates (text that is not valid UTF-8 cannot cross
the HTTP boundary) and refuses inputs above ``max_chars`` without scanning them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gymhub.types import Message, ToolCall

__all__ = [
    "HermesParser",
    "JsonParser",
    "ParseResult",
    "TagParser",
    "ToolCallParser",
    "make_parser",
]

#: Inputs above this many characters are refused (the environment limit is 200,000).
MAX_CHARS = 200_000
_SNIPPET = 200


@dataclass(frozen=True)
class ParseResult:
    """The assistant message to send, and the parse error if there was one."""

    message: Message
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the text parsed (with or without tool calls)."""
        return self.error is None


class ToolCallParser(Protocol):
    """Turns generated text into an assistant message."""

    def parse(self, text: str) -> ParseResult:
        """Parse one assistant turn's text."""
        ...


def _clean(text: str) -> str:
    """Replace lone surrogates (unencodable in UTF-8) with ``?``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def _failure(text: str, error: str) -> ParseResult:
    snippet = text[:_SNIPPET] + ("…" if len(text) > _SNIPPET else "")
    content = f"[tool call parse error: {error}]\n{snippet}"
    return ParseResult(Message(role="assistant", content=content), error)


def _too_long(text: str, max_chars: int) -> ParseResult | None:
    if len(text) > max_chars:
        return _failure(text, f"output is {len(text):,} characters; the limit is {max_chars:,}")
    return None


def _call_from_obj(obj: Any, index: int) -> ToolCall:
    """Build a call from a decoded JSON object (``ToolCall.from_dict`` validates)."""
    call = ToolCall.from_dict(obj)
    return ToolCall(id=call.id or f"call_{index}", name=call.name, arguments=call.arguments)


class HermesParser:
    """``<tool_call>{json}</tool_call>`` blocks (Hermes, Qwen2.5/3, SmolLM3)."""

    def __init__(
        self,
        open_tag: str = "<tool_call>",
        close_tag: str = "</tool_call>",
        max_chars: int = MAX_CHARS,
    ) -> None:
        self.open_tag, self.close_tag, self.max_chars = open_tag, close_tag, max_chars

    def parse(self, text: str) -> ParseResult:
        """Parse every block; any malformed block fails the whole turn."""
        text = _clean(text)
        if (refused := _too_long(text, self.max_chars)) is not None:
            return refused
        calls: list[ToolCall] = []
        outside: list[str] = []
        pos = 0
        while True:
            start = text.find(self.open_tag, pos)
            if start < 0:
                outside.append(text[pos:])
                break
            outside.append(text[pos:start])
            body_start = start + len(self.open_tag)
            end = text.find(self.close_tag, body_start)
            if end < 0:
                return _failure(text, f"unclosed {self.open_tag} (missing {self.close_tag})")
            body = text[body_start:end].strip()
            try:
                calls.append(_call_from_obj(json.loads(body), len(calls)))
            except json.JSONDecodeError as exc:
                return _failure(text, f"tool call {len(calls) + 1} is not valid JSON: {exc.msg}")
            except ValueError as exc:
                return _failure(text, f"tool call {len(calls) + 1}: {exc}")
            pos = end + len(self.close_tag)
        content = "".join(outside).strip()
        return ParseResult(
            Message(role="assistant", content=content, tool_calls=tuple(calls) or None)
        )


_FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.DOTALL)


class JsonParser:
    """A bare JSON tool call: ``{"name": ..., "arguments": {...}}`` or a list of them.

    Text without any ``{`` or ``[`` is a plain answer (no call, no error).
    """

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self.max_chars = max_chars

    def parse(self, text: str) -> ParseResult:
        """Decode the first JSON value (inside a code fence if there is one)."""
        text = _clean(text)
        if (refused := _too_long(text, self.max_chars)) is not None:
            return refused
        fence = _FENCE.search(text)
        source = fence.group(1) if fence else text
        starts = [i for i in (source.find("{"), source.find("[")) if i >= 0]
        if not starts:
            return ParseResult(Message(role="assistant", content=text.strip()))
        begin = min(starts)
        try:
            obj, end = json.JSONDecoder().raw_decode(source, begin)
        except json.JSONDecodeError as exc:
            return _failure(text, f"not valid JSON: {exc.msg} at character {exc.pos}")
        items = obj if isinstance(obj, list) else [obj]
        try:
            calls = tuple(_call_from_obj(o, i) for i, o in enumerate(items))
        except ValueError as exc:
            return _failure(text, str(exc))
        rest = (
            (text[: fence.start()] + text[fence.end() :])
            if fence
            else (source[:begin] + source[end:])
        )
        return ParseResult(
            Message(role="assistant", content=rest.strip(), tool_calls=calls or None)
        )


class TagParser:
    """Tag style: ``<sql>…</sql>`` becomes a call to the tool the tag maps to.

    Args:
        tags: tag -> ``"tool"`` (the argument is named like the tag) or
            ``"tool:argument"``; e.g. ``{"sql": "query:sql", "submit": "submit:answer"}``.
        max_chars: refuse longer inputs.
    """

    def __init__(self, tags: Mapping[str, str], max_chars: int = MAX_CHARS) -> None:
        if not tags:
            raise ValueError("TagParser needs at least one tag -> tool mapping")
        self.routes: dict[str, tuple[str, str]] = {}
        for tag, target in tags.items():
            if not re.fullmatch(r"[A-Za-z_][\w-]*", tag):
                raise ValueError(f"invalid tag name {tag!r}")
            tool, _, arg = target.partition(":")
            self.routes[tag] = (tool or tag, arg or tag)
        self.max_chars = max_chars
        names = "|".join(re.escape(t) for t in self.routes)
        self._open = re.compile(rf"<({names})>")

    def parse(self, text: str) -> ParseResult:
        """Every configured tag pair becomes one call, in order of appearance."""
        text = _clean(text)
        if (refused := _too_long(text, self.max_chars)) is not None:
            return refused
        calls: list[ToolCall] = []
        outside: list[str] = []
        pos = 0
        while (m := self._open.search(text, pos)) is not None:
            tag = m.group(1)
            close = f"</{tag}>"
            end = text.find(close, m.end())
            if end < 0:
                return _failure(text, f"unclosed <{tag}> (missing {close})")
            outside.append(text[pos : m.start()])
            tool, arg = self.routes[tag]
            body = text[m.end() : end].strip()
            calls.append(ToolCall(id=f"call_{len(calls)}", name=tool, arguments={arg: body}))
            pos = end + len(close)
        outside.append(text[pos:])
        content = "".join(outside).strip()
        return ParseResult(
            Message(role="assistant", content=content, tool_calls=tuple(calls) or None)
        )


def make_parser(kind: str, tags: Mapping[str, str] | None = None) -> ToolCallParser:
    """The parser for a model family: ``hermes``, ``json`` or ``tags``.

    Raises:
        ValueError: unknown kind, or ``tags`` without a mapping.
    """
    if kind == "hermes":
        return HermesParser()
    if kind == "json":
        return JsonParser()
    if kind == "tags":
        return TagParser(tags or {})
    raise ValueError(f"unknown tool parser {kind!r}; expected hermes, json or tags")

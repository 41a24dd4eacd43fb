"""Gymnasium spaces for turns of chat.

Gymnasium's built-in spaces describe arrays; an episode of text has messages. These
spaces let ``gymnasium.utils.env_checker.check_env`` reason about a text environment:
membership is checked structurally, and ``sample()`` draws reproducible (mostly
nonsensical) assistant messages, which is exactly what a checker needs to probe
that bad actions are answered, not raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from gymhub.types import Message, ToolCall

__all__ = ["ChatSpace", "MessageSpace"]

_WORDS = ("hello", "SELECT", "1", "answer", "?", "{", "42", "table", "ok", "</sql>")


class ChatSpace(spaces.Space[list[Message]]):
    """Observations: a list of :class:`~gymhub.types.Message` (the new messages of a turn)."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Text cannot be flattened into a fixed-size array."""
        return False

    def contains(self, x: Any) -> bool:
        """True for a list of messages."""
        return isinstance(x, list) and all(isinstance(m, Message) for m in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        """A one-message user turn of random words."""
        n = int(self.np_random.integers(1, 6))
        words = [_WORDS[int(i)] for i in self.np_random.integers(0, len(_WORDS), size=n)]
        return [Message(role="user", content=" ".join(words))]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatSpace)

    def __repr__(self) -> str:
        return "ChatSpace()"


class MessageSpace(spaces.Space[Message]):
    """Actions: one assistant :class:`~gymhub.types.Message`, optionally with tool calls.

    Args:
        tool_names: names that ``sample()`` may call; arguments are random, so
            sampled calls usually fail validation, as a fuzzer's should.
    """

    def __init__(
        self, tool_names: Sequence[str] = (), seed: int | np.random.Generator | None = None
    ) -> None:
        self.tool_names = tuple(tool_names)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Text cannot be flattened into a fixed-size array."""
        return False

    def contains(self, x: Any) -> bool:
        """True for an assistant message."""
        return isinstance(x, Message) and x.role == "assistant"

    def sample(self, mask: Any = None, probability: Any = None) -> Message:
        """Random text, or a call to a random tool with a random argument."""
        n = int(self.np_random.integers(1, 6))
        text = " ".join(_WORDS[int(i)] for i in self.np_random.integers(0, len(_WORDS), size=n))
        if self.tool_names and self.np_random.random() < 0.5:
            name = self.tool_names[int(self.np_random.integers(0, len(self.tool_names)))]
            call = ToolCall(id="call_0", name=name, arguments={"x": text})
            return Message(role="assistant", content="", tool_calls=(call,))
        return Message(role="assistant", content=text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageSpace) and other.tool_names == self.tool_names

    def __repr__(self) -> str:
        return f"MessageSpace(tool_names={list(self.tool_names)})"

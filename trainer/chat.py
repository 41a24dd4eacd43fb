"""Token-exact chat rendering: the first prompt, observation deltas, and the drift check.

Re-rendering a conversation each turn and re-tokenising it does not reproduce the ids
the model sampled (decode/encode is not an inverse, templates rewrite tool calls and
whitespace), which silently trains on tokens the model never produced. So the learner
owns the ids: the first prompt is rendered once, each assistant turn keeps the
engine's ids verbatim, and each observation is appended as the template's *delta*
against a fixed base conversation::

    delta = tokens(render([*BASE, *observation], generation_prompt=True))
            [len(tokens(render(BASE)) up to and including its last end-of-turn token):]

Cutting the base after its last end-of-turn token (not at its end) lets the delta carry
whatever the template puts after that token (ChatML's newline), which the sampled turn
never contains. The delta is independent of the real history, so it is computed the
same way every turn. :meth:`ChatRenderer.drift` compares an episode's ids with one full
render of its messages and reports the first position where they part.

Rendering the delta that way re-encodes the tool schemas with every observation (a
multi-turn rollout's biggest cost outside the engine on a small model). So the renderer
also tries a short way: render ``[*BASE, *observation]`` without the tools and encode
only the text after the base's last end-of-turn token. Tokenizers split special tokens
out before anything else, so for most the two agree, but not for all (a SentencePiece
``Metaspace`` that marks only the first word of a text; a template that renders tool
replies by looking up the tools). The short way is therefore taken only for a tool set
and an observation shape (its roles) for which it gave exactly the long way's ids on
the first observation of that kind; any mismatch keeps the long way for that kind.
First prompts are encoded the same way, in two parts: the text up to the first
end-of-turn token (a system message with its tool schemas, the same for every task of an
environment, encoded once and remembered) and the rest, for each kind (tool set, roles)
only after its first prompt gave the whole text's ids.

Text is encoded by the tokenizer's Rust backend directly where it has one (a fast
tokenizer): ``tokenizer.encode`` wraps the same call in ~50 microseconds of Python
(argument checks, a batch of one, an encoding object), which a multi-turn rollout pays
for every prompt and observation. The first text a renderer encodes is encoded both
ways; if they differ, it keeps ``tokenizer.encode``. The drift check always uses
``tokenizer.encode``, so it stays an independent render. Likewise, texts of plain data
are rendered from the compiled template directly where that was checked to give
``apply_chat_template``'s text (:mod:`.template_text`); the drift check renders the
public way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gymhub.errors import TemplateError
from gymhub.types import Message

from .template_text import TemplateText

__all__ = ["ChatRenderer", "Drift", "TemplateError", "tools_key"]

_BASE = (Message(role="user", content="base"), Message(role="assistant", content="base"))


@dataclass(frozen=True)
class Drift:
    """Result of comparing an episode's ids with a full render of its messages.

    Attributes:
        ok: the ids match the render exactly.
        position: first differing index, or ``None``.
        episode_tokens: length of the episode's ids.
        render_tokens: length of the render (cut after its last end-of-turn token).
    """

    ok: bool
    position: int | None
    episode_tokens: int
    render_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "ok": self.ok,
            "position": self.position,
            "episode_tokens": self.episode_tokens,
            "render_tokens": self.render_tokens,
        }


def tools_key(tools: Sequence[dict[str, Any]] | None) -> str:
    """A tool set as a string that equal tool sets share (for the renderer's caches)."""
    return json.dumps(list(tools) if tools else None, sort_keys=True, default=str)


class ChatRenderer:
    """Renders messages to ids with a tokenizer's chat template.

    Args:
        tokenizer: a ``transformers`` tokenizer with a chat template.
        end_of_turn_id: the id that closes a turn; defaults to ``eos_token_id``.
    """

    def __init__(self, tokenizer: Any, end_of_turn_id: int | None = None) -> None:
        self.tokenizer = tokenizer
        eot = end_of_turn_id if end_of_turn_id is not None else tokenizer.eos_token_id
        if eot is None:
            raise TemplateError("the tokenizer has no eos token; pass end_of_turn_id")
        self.end_of_turn_id = int(eot)
        self._bases: dict[str, list[int]] = {}
        self._short: dict[tuple[str, tuple[str, ...]], bool] = {}  # see the module docstring
        self._base_text: tuple[str, int] | None = None
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend: Any = backend if callable(getattr(backend, "encode", None)) else None
        self._backend_checked = False
        self._template = TemplateText(tokenizer)
        self._split: dict[tuple[str, tuple[str, ...]], bool] = {}  # prompts: see prompt_ids
        self._heads: dict[str, list[int]] = {}
        self._eot: str | None = None

    def _encode(self, text: str) -> list[int]:
        """``tokenizer.encode(text)`` without special tokens (see the module docstring)."""
        if self._backend is not None:
            try:
                ids = list(self._backend.encode(text, add_special_tokens=False).ids)
            except Exception:  # a backend that does not take these arguments
                ids = None
            if self._backend_checked and ids is not None:
                return ids
            reference = list(self.tokenizer.encode(text, add_special_tokens=False))
            self._backend_checked = True
            if ids != reference:
                self._backend = None
            return reference
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _render(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        generation_prompt: bool,
    ) -> list[int]:
        return self._encode(self._text(messages, tools, generation_prompt))

    def _text(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        generation_prompt: bool,
    ) -> str:
        return self._template.render(messages, tools, generation_prompt)

    def prompt_ids(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """The opening messages with the assistant generation prompt.

        Encoded in two parts where that was checked to give the same ids (see the module
        docstring): the text up to its first end-of-turn token, which prompts of one
        system message and tool set share, is encoded once and remembered.
        """
        text = self._text(messages, tools, True)
        kind = (tools_key(tools), tuple(m.role for m in messages))
        split = self._split.get(kind)
        if split is False:
            return self._encode(text)
        ids = self._split_encode(text)
        if split and ids is not None:
            return ids
        full = self._encode(text)
        if split is None:
            if len(self._split) >= 256:  # a bound, not a policy: kinds are few
                self._split.clear()
            self._split[kind] = ids == full
        return full

    def _split_encode(self, text: str) -> list[int] | None:
        """The ids of ``text`` as its head (remembered) and its tail; ``None`` if no cut."""
        eot = self._eot_text()
        at = text.find(eot) if eot else -1
        cut = at + len(eot)
        if at < 0 or cut >= len(text):
            return None
        head = text[:cut]
        ids = self._heads.get(head)
        if ids is None:
            if len(self._heads) >= 64:  # a bound, not a policy: a run has few system prompts
                self._heads.clear()
            ids = self._heads[head] = self._encode(head)
        return [*ids, *self._encode(text[cut:])]

    def _eot_text(self) -> str:
        """The end-of-turn token as text ("" where the tokenizer gives none)."""
        if self._eot is None:
            eot = self.tokenizer.convert_ids_to_tokens(self.end_of_turn_id)
            self._eot = eot if isinstance(eot, str) else ""
        return self._eot

    def _cut(self, ids: list[int]) -> int:
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] == self.end_of_turn_id:
                return i + 1
        raise TemplateError("the rendered base conversation has no end-of-turn token")

    def observation_ids(
        self, observation: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """The template's tokens for ``observation`` plus the next generation prompt.

        Raises:
            TemplateError: the template renders the base differently once more
                messages follow (it is not prefix-preserving).
        """
        kind = (tools_key(tools), tuple(m.role for m in observation))
        short = self._short.get(kind)
        if short:
            ids = self._short_delta(observation)
            if ids is not None:
                return ids
        ids = self._long_delta(observation, tools)
        if short is None:
            if len(self._short) >= 256:  # a bound, not a policy: kinds are few
                self._short.clear()
            self._short[kind] = self._short_delta(observation) == ids
        return ids

    def _long_delta(
        self, observation: Sequence[Message], tools: Sequence[dict[str, Any]] | None
    ) -> list[int]:
        base = self._base(tools)
        cut = self._cut(base)
        full = self._render([*_BASE, *observation], tools, True)
        if full[:cut] != base[:cut]:
            raise TemplateError(
                "the chat template is not prefix-preserving: appending "
                "messages changed how earlier ones render"
            )
        return full[cut:]

    def _short_delta(self, observation: Sequence[Message]) -> list[int] | None:
        """The delta from the text after the base (no tools); ``None`` where it cannot be cut."""
        if self._base_text is None:
            text = self._text(_BASE, None, False)
            eot = self._eot_text()
            at = text.rfind(eot) if eot else -1
            self._base_text = (text, at + len(eot) if at >= 0 else -1)
        base, cut = self._base_text
        if cut < 0:
            return None
        full = self._text([*_BASE, *observation], None, True)
        if not full.startswith(base[:cut]):
            return None
        return self._encode(full[cut:])

    def _base(self, tools: Sequence[dict[str, Any]] | None) -> list[int]:
        """The base conversation's render, once per tool set.

        It depends on nothing else, and a multi-turn rollout would otherwise render it
        again at every turn.
        """
        key = tools_key(tools)
        base = self._bases.get(key)
        if base is None:
            if len(self._bases) >= 64:  # a bound, not a policy: tool sets are few
                self._bases.clear()
            base = self._bases[key] = self._render(_BASE, tools, False)
        return base

    def decode(self, ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens kept (they are part of the content)."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def drift(
        self,
        ids: Sequence[int],
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> Drift:
        """Compare ``ids`` with a full render of ``messages`` (see the module docstring)."""
        text = self._template.reference(messages, tools, False)
        full = list(self.tokenizer.encode(text, add_special_tokens=False))  # the reference way
        with contextlib.suppress(TemplateError):  # no end-of-turn: compare the whole render
            full = full[: self._cut(full)]
        n = min(len(ids), len(full))
        pos = next((i for i in range(n) if ids[i] != full[i]), None)
        if pos is None and len(ids) != len(full):
            pos = n
        return Drift(ok=pos is None, position=pos, episode_tokens=len(ids), render_tokens=len(full))

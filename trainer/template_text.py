"""Chat-template text without ``apply_chat_template``'s preparation on every call.

``apply_chat_template`` rebuilds every message and tool schema as fresh plain data (so
that the template's sandbox sees no object with methods), looks the template up and
gathers the special tokens at each call, which a multi-turn rollout pays for every
prompt and observation (``benchmarks/bench_rollout_overhead.py`` times the rollout's work
around the engine with and without this). Messages that are already plain data (exact
``str`` fields, JSON tool-call arguments) need none of it, so the compiled template is
rendered with them directly, in the same sandboxed environment.

Tool schemas take it too where they are plain data (checked at each render, a walk
cheaper than the rebuild it saves). That the direct text is ``apply_chat_template``'s is
checked, not assumed: the first render of each kind (with tools or not, the messages'
roles and fields, the generation prompt) is done both ways, and a kind whose texts
differ, or a tokenizer whose template cannot be reached so, keeps
``apply_chat_template``. The compiled template comes from transformers' own cache of
them (a private function, looked up once; without it every render takes the public way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gymhub.types import Message

__all__ = ["TemplateText"]

_MAX_KINDS = 256  # a bound, not a policy: a run renders a handful of kinds
_SCALARS = (str, int, float, bool, type(None))


class TemplateText:
    """Renders messages with a tokenizer's chat template.

    Args:
        tokenizer: a ``transformers`` tokenizer with a chat template.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._checked: dict[tuple[Any, ...], bool] = {}  # kind -> the direct text is the same
        self._compiled: dict[bool, Any] = {}  # with tools or not -> compiled, or False
        self._source: Any = getattr(tokenizer, "chat_template", None)  # what they hold
        self._special: dict[str, Any] | None = None

    def reference(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        generation_prompt: bool,
    ) -> str:
        """The text ``apply_chat_template`` renders."""
        return str(self.tokenizer.apply_chat_template(
            [m.to_dict() for m in messages], tools=list(tools) if tools else None,
            tokenize=False, add_generation_prompt=generation_prompt,
        ))

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        generation_prompt: bool,
    ) -> str:
        """The same text as :meth:`reference`, directly where that was checked."""
        source = getattr(self.tokenizer, "chat_template", None)
        if source is not self._source:  # the tokenizer was given another template
            self._source = source
            self._compiled.clear()
            self._checked.clear()
        plain = not tools or all(_plain(t) for t in tools)
        kind = _kind(messages, bool(tools), generation_prompt) if plain else None
        if kind is None:
            return self.reference(messages, tools, generation_prompt)
        same = self._checked.get(kind)
        if same is False:
            return self.reference(messages, tools, generation_prompt)
        direct = self._direct(messages, tools, generation_prompt)
        if same and direct is not None:
            return direct
        text = self.reference(messages, tools, generation_prompt)
        if len(self._checked) >= _MAX_KINDS:
            self._checked.clear()
        self._checked[kind] = direct == text
        return text

    def _direct(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        generation_prompt: bool,
    ) -> str | None:
        """The compiled template's text, or ``None`` where it cannot be had this way."""
        with_tools = bool(tools)
        compiled = self._compiled.get(with_tools)
        if compiled is None:
            compiled = self._compiled[with_tools] = _compiled_template(self.tokenizer, tools)
            self._special = dict(self.tokenizer.special_tokens_map)
        if compiled is False:
            return None
        try:
            return str(compiled.render(
                messages=[m.to_dict() for m in messages], tools=list(tools) if tools else None,
                documents=None, add_generation_prompt=generation_prompt, **(self._special or {}),
            ))
        except Exception:  # the public way raises its own error, or renders
            return None


def _compiled_template(tokenizer: Any, tools: Sequence[dict[str, Any]] | None) -> Any:
    """The tokenizer's template for these tools (or none), compiled; ``False`` if unreachable.

    A tokenizer can hold several named templates and picks one by whether tools are given.
    """
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        return _compile_jinja_template(
            tokenizer.get_chat_template(None, list(tools) if tools else None))
    except Exception:  # another transformers, or no template: the public way
        return False


def _kind(
    messages: Sequence[Message], with_tools: bool, generation_prompt: bool
) -> tuple[Any, ...] | None:
    """What a render's text depends on besides the values; ``None`` for data not plain."""
    kind: list[Any] = [with_tools, generation_prompt]
    for m in messages:
        if type(m.role) is not str or type(m.content) is not str:
            return None
        if m.tool_calls and not all(_plain(c.to_dict()) for c in m.tool_calls):
            return None
        if type(m.tool_call_id) not in (str, type(None)) or type(m.name) not in (str, type(None)):
            return None
        kind.append((m.role, bool(m.tool_calls), m.tool_call_id is not None, m.name is not None))
    return tuple(kind)


def _plain(value: Any) -> bool:
    """JSON data of exact built-in types (what ``apply_chat_template`` would pass unchanged)."""
    if type(value) in _SCALARS:
        return True
    if type(value) is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if type(value) is list:
        return all(_plain(v) for v in value)
    return False

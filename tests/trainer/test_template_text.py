"""Direct template renders: the text is apply_chat_template's, or the public way is taken."""

from __future__ import annotations

import copy
import types

import pytest

from gymhub.trainer.template_text import TemplateText
from gymhub.types import Message, ToolCall

TOOLS = [{"type": "function", "function": {"name": "look", "description": "Show the word.",
                                           "parameters": {"type": "object", "properties": {}}}}]
CONVERSATIONS = [
    [Message(role="system", content="Be brief."), Message(role="user", content="apple")],
    [Message(role="user", content="base"), Message(role="assistant", content="base"),
     Message(role="tool", content='{"word": "stone"}', tool_call_id="c1", name="look")],
    [Message(role="assistant", content="calling",
             tool_calls=(ToolCall(id="c1", name="look", arguments={"n": [1, 2.5, None, True]}),)),
     Message(role="user", content="ünïcödé \u00a0 and <|im_end|> in the text")],
]


@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no tools", "tools"])
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_direct_renders_equal_the_reference_and_are_taken(tokenizer, tools, generation_prompt):
    text = TemplateText(tokenizer)
    for _ in range(2):  # the first render of a kind checks; the second is direct
        for messages in CONVERSATIONS:
            assert text.render(messages, tools, generation_prompt) == text.reference(
                messages, tools, generation_prompt)
    assert len(text._checked) == len(CONVERSATIONS) and all(text._checked.values())


def test_a_kind_whose_direct_text_differs_keeps_the_public_way(tokenizer):
    text = TemplateText(tokenizer)
    text._compiled = {False: types.SimpleNamespace(render=lambda **_: "something else")}
    text._special = {}
    messages = CONVERSATIONS[0]
    for _ in range(2):
        assert text.render(messages, None, True) == text.reference(messages, None, True)
    assert list(text._checked.values()) == [False]


def test_data_not_plain_takes_the_public_way(tokenizer):
    text = TemplateText(tokenizer)

    class Loud(str):
        """A str subclass: apply_chat_template strips it back to str; the direct way would not."""

    odd = [
        [Message(role="user", content=Loud("apple"))],
        [Message(role="assistant", content="x",
                 tool_calls=(ToolCall(id="c1", name="look", arguments={"t": (1, 2)}),))],
    ]
    for messages in odd:
        assert text.render(messages, None, True) == text.reference(messages, None, True)
    tools = [{**TOOLS[0], "extra": (1, 2)}]  # a tuple: apply_chat_template's data differs
    assert text.render(CONVERSATIONS[0], tools, True) == text.reference(CONVERSATIONS[0], tools, True)
    assert text._checked == {}


def test_a_template_that_raises_raises_the_public_way(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = "{% if messages[0].role == 'tool' %}{{ raise_exception('no tool first') }}" \
                        "{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
    text = TemplateText(tok)
    assert text.render(CONVERSATIONS[0], None, False) == "Be brief.apple"
    with pytest.raises(Exception, match="no tool first"):
        text.render([Message(role="tool", content="x", name="look")], None, False)


def test_a_template_out_of_reach_leaves_every_render_public(tokenizer):
    from gymhub.trainer.template_text import _compiled_template

    assert _compiled_template(object(), None) is False  # no get_chat_template: the public way
    text = TemplateText(tokenizer)
    text._compiled = {False: False}
    for _ in range(2):
        assert text.render(CONVERSATIONS[0], None, True) == text.reference(CONVERSATIONS[0], None, True)
    assert list(text._checked.values()) == [False]


def test_a_template_changed_after_the_first_renders_is_the_one_used(tokenizer):
    tok = copy.deepcopy(tokenizer)
    text = TemplateText(tok)
    for _ in range(2):
        text.render(CONVERSATIONS[0], None, True)
    tok.chat_template = tok.chat_template.replace("<|im_start|>", "<|im_start|>[new]")
    for _ in range(2):
        out = text.render(CONVERSATIONS[0], None, True)
        assert out == text.reference(CONVERSATIONS[0], None, True) and "[new]" in out

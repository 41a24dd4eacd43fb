"""Observation deltas: the short way (no tools, tail only) never differs from the long way."""

from __future__ import annotations

import copy

import pytest

from gymhub.errors import TemplateError
from gymhub.trainer.chat import ChatRenderer
from gymhub.types import Message

TOOLS = [{"type": "function", "function": {"name": "look", "description": "Show the word.",
                                           "parameters": {"type": "object", "properties": {}}}}]
OBSERVATIONS = [
    [Message(role="user", content="apple")],
    [Message(role="tool", content='{"word": "stone"}', tool_call_id="c1", name="look")],
    [Message(role="user", content=" leading space and\ntwo lines ")],
    [Message(role="tool", content="x", name="look"), Message(role="user", content="go on")],
    [Message(role="user", content="ünïcödé \u00a0 and <|im_end|> in the text")],
]


def _long_way(renderer: ChatRenderer, obs: list[Message], tools: list | None) -> list[int]:
    return renderer._long_delta(obs, tools)


@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no tools", "tools"])
def test_short_way_equals_long_way_and_is_taken(tokenizer, tools):
    renderer = ChatRenderer(tokenizer)
    for _ in range(2):  # the second pass runs on the short way for every kind
        for obs in OBSERVATIONS:
            assert renderer.observation_ids(obs, tools) == _long_way(renderer, obs, tools)
    assert renderer._short and all(renderer._short.values())


def test_a_template_that_reads_the_tools_in_replies_keeps_the_long_way(tokenizer):
    """The reply's render depends on the tools: without them the text differs."""
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = tok.chat_template.replace(
        "{% else %}<|im_start|>{{ m.role }}\n",
        "{% else %}<|im_start|>{{ m.role }}{% if tools %} ({{ tools | length }} tools){% endif %}\n",
    )
    renderer = ChatRenderer(tok)
    obs = OBSERVATIONS[1]
    for _ in range(2):
        assert renderer.observation_ids(obs, TOOLS) == _long_way(renderer, obs, TOOLS)
    assert list(renderer._short.values()) == [False]


def _first_word_marker():
    """SentencePiece-style ``Metaspace(prepend_scheme="first")``: a text encoded alone
    gets a word mark that the same text after a special token does not."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from gymhub.trainer.tiny import CHATML_TOOLS, CORPUS

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    raw.decoder = decoders.Metaspace(prepend_scheme="first")
    raw.train_from_iterator(
        CORPUS * 4, trainers.BpeTrainer(vocab_size=300, show_progress=False, special_tokens=[
            "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", unk_token="<unk>")
    tok.chat_template = CHATML_TOOLS
    return tok


def test_a_tokenizer_that_marks_the_first_word_keeps_the_long_way():
    renderer = ChatRenderer(_first_word_marker())
    for _ in range(2):
        for obs in OBSERVATIONS:
            assert renderer.observation_ids(obs, TOOLS) == _long_way(renderer, obs, TOOLS)
    assert False in renderer._short.values()  # the leading word mark differs


def test_a_template_that_is_not_prefix_preserving_still_fails(tokenizer):
    tok = copy.deepcopy(tokenizer)
    # the last assistant turn is rendered differently from earlier ones
    tok.chat_template = tok.chat_template.replace(
        "{% elif m.role == 'assistant' %}<|im_start|>assistant\n",
        "{% elif m.role == 'assistant' %}<|im_start|>assistant{% if loop.last %} (last)"
        "{% endif %}\n",
    )
    renderer = ChatRenderer(tok)
    with pytest.raises(TemplateError, match="prefix-preserving"):
        renderer.observation_ids([Message(role="user", content="a")])


def test_the_backend_encodes_as_the_tokenizer_does_and_is_used(tokenizer):
    renderer = ChatRenderer(tokenizer)
    first = [Message(role="system", content="be brief"), Message(role="user", content="apple")]
    texts = [m for obs in OBSERVATIONS for m in obs]
    for message in texts:
        text = renderer._text([*first, message], TOOLS, True)
        assert renderer._encode(text) == tokenizer.encode(text, add_special_tokens=False)
    assert renderer._backend is not None and renderer._backend_checked


def test_a_backend_that_disagrees_is_dropped_for_the_tokenizer(tokenizer):
    class Off:  # a backend whose ids are not the tokenizer's
        def encode(self, text, add_special_tokens=False):
            from types import SimpleNamespace

            return SimpleNamespace(ids=[7])

    renderer = ChatRenderer(tokenizer)
    renderer._backend = Off()
    prompt = [Message(role="user", content="apple")]
    assert renderer.prompt_ids(prompt) == tokenizer.encode(
        renderer._text(prompt, None, True), add_special_tokens=False)
    assert renderer._backend is None  # checked once, found wrong, never used again


PROMPTS = [
    [Message(role="system", content="Repeat the word."), Message(role="user", content=word)]
    for word in ("apple", "river stone", " zephyr\n", "ünïcödé <|im_end|> x")
]


@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no tools", "tools"])
def test_prompts_encoded_in_two_parts_equal_the_whole_and_share_the_head(tokenizer, tools):
    renderer = ChatRenderer(tokenizer)
    for messages in PROMPTS:
        text = renderer._template.reference(messages, tools, True)
        assert renderer.prompt_ids(messages, tools) == tokenizer.encode(
            text, add_special_tokens=False)
    assert list(renderer._split.values()) == [True]
    assert len(renderer._heads) == 1  # the system message (and tools) encoded once


def test_a_tokenizer_that_marks_the_first_word_encodes_prompts_whole():
    tok = _first_word_marker()
    renderer = ChatRenderer(tok)
    for messages in PROMPTS:
        text = renderer._template.reference(messages, TOOLS, True)
        assert renderer.prompt_ids(messages, TOOLS) == tok.encode(text, add_special_tokens=False)
    assert list(renderer._split.values()) == [False]

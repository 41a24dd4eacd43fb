"""Tool-call parsers: every family, with malformed inputs."""

import time

import pytest

from gymhub.trainer.parsers import HermesParser, JsonParser, TagParser, make_parser


def test_hermes_several_calls_and_text():
    text = (
        'Let me look.\n<tool_call>{"name": "look", "arguments": {}}</tool_call>\n'
        '<tool_call>\n{"name": "submit", "arguments": {"answer": "apple-0"}}\n</tool_call> done'
    )
    res = HermesParser().parse(text)
    assert res.ok
    calls = res.message.tool_calls
    assert [c.name for c in calls] == ["look", "submit"]
    assert calls[1].arguments == {"answer": "apple-0"} and calls[1].id == "call_1"
    assert res.message.content == "Let me look.\n\n done"


def test_hermes_string_arguments_and_openai_shape():
    text = '<tool_call>{"function": {"name": "f", "arguments": "{\\"x\\": 1}"}}</tool_call>'
    res = HermesParser().parse(text)
    assert res.message.tool_calls[0].arguments == {"x": 1}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('<tool_call>{"name": "f", "arguments": {</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "f"', "unclosed"),
        ('<tool_call>{"arguments": {}}</tool_call>', "non-empty string 'name'"),
        ("<tool_call>[1, 2]</tool_call>", "must be an object"),
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "JSON object"),
    ],
)
def test_hermes_malformed(text, match):
    res = HermesParser().parse(text)
    assert not res.ok and match in res.error
    assert res.message.tool_calls is None
    assert res.message.role == "assistant" and "parse error" in res.message.content


def test_plain_text_is_not_an_error():
    for parser in (HermesParser(), JsonParser(), TagParser({"submit": "submit:answer"})):
        res = parser.parse("just an answer")
        assert res.ok and res.message.tool_calls is None and res.message.content == "just an answer"


def test_json_parser():
    res = JsonParser().parse('Sure: {"name": "submit", "arguments": {"answer": "x"}} ok')
    assert res.message.tool_calls[0].name == "submit" and res.message.content == "Sure:  ok"
    res = JsonParser().parse('```json\n[{"name": "a", "arguments": {}}, {"name": "b"}]\n```')
    assert [c.name for c in res.message.tool_calls] == ["a", "b"]
    bad = JsonParser().parse('{"name": "a", "arguments": {"x": }')
    assert not bad.ok and "not valid JSON" in bad.error


def test_tag_parser():
    parser = TagParser({"sql": "query:sql", "submit": "submit:answer"})
    res = parser.parse("<think>hm</think><sql> SELECT 1 </sql> then <submit>42</submit>")
    assert [(c.name, c.arguments) for c in res.message.tool_calls] == [
        ("query", {"sql": "SELECT 1"}),
        ("submit", {"answer": "42"}),
    ]
    assert res.message.content == "<think>hm</think> then"
    bad = parser.parse("<sql>SELECT 1")
    assert not bad.ok and "unclosed <sql>" in bad.error
    assert make_parser("tags", {"sql": "query"}).parse("<sql>x</sql>").message.tool_calls[
        0
    ].arguments == {"sql": "x"}
    with pytest.raises(ValueError, match="at least one"):
        TagParser({})


def test_surrogates_are_replaced():
    text = '<tool_call>{"name": "submit", "arguments": {"answer": "a\ud800b"}}</tool_call>'
    res = HermesParser().parse(text)
    answer = res.message.tool_calls[0].arguments["answer"]
    answer.encode("utf-8")  # must not raise
    tag = TagParser({"submit": "submit"}).parse("<submit>\udcff</submit>")
    tag.message.tool_calls[0].arguments["submit"].encode("utf-8")


def test_huge_input_is_refused_fast():
    text = "<tool_call>" + "x" * 10_000_000
    for parser in (HermesParser(), JsonParser(), TagParser({"sql": "query"})):
        t0 = time.perf_counter()
        res = parser.parse(text)
        assert time.perf_counter() - t0 < 1.0
        assert not res.ok and "limit" in res.error and len(res.message.content) < 1000


def test_make_parser_unknown():
    with pytest.raises(ValueError, match="unknown tool parser"):
        make_parser("xml")

"""READMEs as safe HTML: CommonMark rendered once, sanitised, linear in hostile input."""

from __future__ import annotations

import time
from html.parser import HTMLParser

import pytest

from gymhub.hub.markdown import (
    MAX_README_CHARS,
    readme_from_metadata,
    render_markdown,
    render_readme,
)

ALLOWED_TAGS = {"a", "blockquote", "br", "code", "del", "em", "h2", "h3", "h4", "h5", "h6",
                "hr", "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th",
                "thead", "tr", "ul"}


def hostile_readme(size: int = 200_000) -> str:
    """Every trick at once: emphasis runs, open brackets, raw HTML, bad links, deep quotes."""
    parts = [
        "# Title\n\n",
        "**a " * 10_000, "\n\n",
        "[" * 20_000, "\n\n",
        "[x](" * 5_000, "\n\n",
        "<script>alert(1)</script> <img src=x onerror=alert(1)> "
        "<iframe src=//evil></iframe> <style>body{}</style> <a href=x onclick=y>z</a>\n\n" * 50,
        "[click](javascript:alert(1)) [data](data:text/html,<script>1</script>) "
        "[vb](vbscript:x) [rel](/api/v1/whoami) ![img](javascript:alert(1)) "
        "<javascript:alert(1)> [ok](https://example.org/ok)\n\n" * 100,
        ">" * 20_000, " deep\n\n",
        "".join(">" * i + " quote\n" for i in range(1, 300)), "\n",
        "".join("  " * i + "- item\n" for i in range(300)), "\n",
        "*a _b " * 5_000, "\n\n", "`" * 10_000, "\n\n", "&amp;" * 5_000, "\n",
    ]
    text = "".join(parts)
    return (text * (size // len(text) + 1))[:size]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def assert_safe(html: str) -> None:
    """Only allowlisted tags; no event handlers, styles or scripts; links http(s)/mailto only."""
    parser = _Tags()
    parser.feed(html)
    for tag, attrs in parser.tags:
        assert tag in ALLOWED_TAGS, tag
        for name, value in attrs:
            assert not name.startswith("on") and name not in {"style", "src", "srcdoc"}, name
            if name == "href":
                assert (value or "").startswith(("https://", "http://", "mailto:")), value
        if tag == "a":
            assert ("rel", "nofollow noopener") in attrs, attrs
    lowered = html.lower()
    assert "<script" not in lowered and "<iframe" not in lowered and "<style" not in lowered
    assert "<img" not in lowered
    assert "javascript:" not in "".join(v or "" for _, attrs in parser.tags for _, v in attrs)


def test_markdown_renders_commonmark_and_keeps_only_safe_markup():
    out = render_markdown(
        '# T\n\n```\n<script>x</script>\n```\n\n**b** *i* ~~s~~ [a](data:text/html,1) '
        '![p](https://e.org/p.png)\n\n<div onclick="x">raw</div>\n\n'
        '| a | b |\n|---|---|\n| `<i>` | <u>x</u> |\n\n3. three\n4. four\n')
    assert "<h2>T</h2>" in out and "&lt;script&gt;x&lt;/script&gt;" in out
    assert "<strong>b</strong>" in out and "<em>i</em>" in out and "<s>s</s>" in out
    assert "data:" not in out and "<img" not in out and "<div" not in out
    assert '<a href="https://e.org/p.png" rel="nofollow noopener">p</a>' in out  # an image
    assert "<th>a</th>" in out and "<td><code>&lt;i&gt;</code></td>" in out
    assert "<u>" not in out and "&lt;u&gt;x&lt;/u&gt;" in out
    assert '<ol start="3">' in out
    assert_safe(out)


@pytest.mark.parametrize("link", ["javascript:alert(1)", "JavaScript:alert(1)",
                                  " javascript:alert(1)", "data:text/html,x", "vbscript:x",
                                  "/relative", "//evil.example/x", "#frag"])
def test_unsafe_link_targets_keep_their_text_and_lose_the_link(link):
    out = render_markdown(f"[label]({link}) and ![alt]({link})")
    assert "label" in out and "alt" in out and "<a" not in out
    assert_safe(out)


def test_a_hostile_readme_renders_safely_in_linear_time():
    text = hostile_readme()
    assert len(text) == 200_000
    t0 = time.perf_counter()
    out = render_markdown(text)
    took = time.perf_counter() - t0
    assert_safe(out)
    assert '<a href="https://example.org/ok" rel="nofollow noopener">ok</a>' in out
    # The quadratic renderer this replaced took 33 s on 120,000 characters of "**a ";
    # the CommonMark parser takes ~1-3 s on this (benchmarks/bench_hub_pages.py).
    assert took < 30, f"{took:.1f} s"


def test_over_long_readmes_are_cut_and_say_so():
    out = render_markdown("word " * (MAX_README_CHARS // 4))
    assert "README shortened" in out and len(out) < MAX_README_CHARS + 1000


def test_render_readme_distinguishes_none_from_empty():
    assert render_readme(None) == "" and render_readme("  \n") == ""
    assert render_readme("hi") == "<p>hi</p>\n"


def test_readme_from_metadata_reads_the_body_or_the_old_header():
    body = b"Metadata-Version: 2.4\nName: x\nVersion: 1\n\n# Hello\n\nworld\n"
    assert readme_from_metadata(body) == "# Hello\n\nworld\n"
    header = (b"Metadata-Version: 1.0\nName: x\nVersion: 1\nDescription: line one\n"
              b"        line two\n\n")
    assert readme_from_metadata(header) == "line one\nline two"
    assert readme_from_metadata(b"Metadata-Version: 2.4\nName: x\n\n") is None

"""A tiny, safe Markdown subset for READMEs on hub pages.

A README is untrusted text from whoever published the package, and the hub's pages share
an origin with its API, so no byte of it may ever reach the browser as markup. Every
piece of text is HTML-escaped *before* any Markdown rule adds a tag, and the only tags
that exist are the ones written here: headings, paragraphs, lists, fenced and indented
code, block quotes, pipe tables, ``inline code``, bold, italic and links. Links are kept only for
``http:``, ``https:`` and ``mailto:`` targets (never ``javascript:``/``data:``) and get
``rel="nofollow noopener"``. Raw HTML in the README shows as text. Images show as their
alt text plus the link: the hub may run offline, and a page must not fetch third-party
pixels that track its readers.
"""

from __future__ import annotations

import html
import re

from markupsafe import Markup

__all__ = ["render_markdown"]

_MAX_CHARS = 200_000  # a page is for reading; the wheel keeps the rest
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"(!?)\[([^\]\n]{0,500})\]\(([^)\s]{1,2000})\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"\s{0,3}[-*+]\s+(.*)")
_NUMBERED = re.compile(r"\s{0,3}\d{1,9}[.)]\s+(.*)")
_TABLE_RULE = re.compile(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(rows: list[str]) -> str:
    """A pipe table: a header row, the ``---`` rule, then body rows."""
    head = "".join(f"<th>{_inline(c)}</th>" for c in _cells(rows[0]))
    body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in _cells(r)) + "</tr>"
                   for r in rows[2:])
    head_row = f"<tr>{head}</tr>" if any(_cells(rows[0])) else ""  # skip an empty header
    return f"<table>{head_row}{body}</table>"


def _inline(text: str) -> str:
    """One line of text as safe HTML: escaped first, then the inline rules."""
    codes: list[str] = []

    def keep_code(m: re.Match[str]) -> str:
        codes.append(f"<code>{html.escape(m.group(1))}</code>")
        return f"\x00{len(codes) - 1}\x00"

    text = _CODE_SPAN.sub(keep_code, text.replace("\x00", ""))
    out: list[str] = []
    pos = 0
    for m in _LINK.finditer(text):
        out.append(_emphasis(html.escape(text[pos:m.start()])))
        bang, label, target = m.groups()
        label_html = _emphasis(html.escape(label))
        if target.lower().startswith(_SAFE_SCHEMES):
            href = html.escape(target, quote=True)
            shown = f"{label_html} ({href})" if bang else label_html
            out.append(f'<a href="{href}" rel="nofollow noopener">{shown}</a>')
        else:  # a relative or unsafe target: the text survives, the link does not
            out.append(label_html)
        pos = m.end()
    out.append(_emphasis(html.escape(text[pos:])))
    joined = "".join(out)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], joined)


def _emphasis(escaped: str) -> str:
    return _ITALIC.sub(r"<em>\1</em>", _BOLD.sub(r"<strong>\1</strong>", escaped))


def render_markdown(text: str) -> Markup:
    """``text`` as HTML that contains only tags this module writes.

    Args:
        text: the package's long description (any content type: plain text renders as
            paragraphs, reStructuredText as mostly-readable paragraphs).

    Returns:
        Markup safe to place in an autoescaping template unchanged.
    """
    lines = text[:_MAX_CHARS].replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    para: list[str] = []
    items: list[str] = []
    list_tag = ""

    def flush() -> None:
        nonlocal list_tag
        if para:
            out.append(f"<p>{' '.join(_inline(p) for p in para)}</p>")
            para.clear()
        if items:
            out.append(f"<{list_tag}>" + "".join(f"<li>{_inline(i)}</li>" for i in items)
                       + f"</{list_tag}>")
            items.clear()
            list_tag = ""

    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            flush()
            fence, body = stripped[:3], []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                body.append(lines[i])
                i += 1
            out.append(f"<pre><code>{html.escape(chr(10).join(body))}</code></pre>")
        elif line.startswith(("    ", "\t")) and not para and not items and stripped:
            body = []
            while i < len(lines) and (lines[i].startswith(("    ", "\t")) or not lines[i].strip()):
                body.append(lines[i][4:] if lines[i].startswith("    ") else lines[i][1:])
                i += 1
            out.append(f"<pre><code>{html.escape(chr(10).join(body).rstrip())}</code></pre>")
            continue
        elif (stripped.startswith("|") and i + 1 < len(lines)
              and _TABLE_RULE.fullmatch(lines[i + 1].strip())):
            flush()
            rows = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(lines[i])
                i += 1
            out.append(_table(rows))
            continue
        elif not stripped:
            flush()
        elif m := _HEADING.fullmatch(stripped):
            flush()
            level = len(m.group(1))
            out.append(f"<h{level + 1 if level < 6 else 6}>{_inline(m.group(2))}"
                       f"</h{level + 1 if level < 6 else 6}>")
        elif stripped.startswith(">"):
            flush()
            out.append(f"<blockquote>{_inline(stripped.lstrip('> '))}</blockquote>")
        elif (m := _BULLET.fullmatch(line)) or (m := _NUMBERED.fullmatch(line)):
            tag = "ul" if _BULLET.fullmatch(line) else "ol"
            if para or (items and tag != list_tag):
                flush()
            list_tag = tag
            items.append(m.group(1))
        elif items and line.startswith("  "):
            items[-1] += " " + stripped  # a wrapped list item
        else:
            if items:
                flush()
            para.append(stripped)
        i += 1
    flush()
    return Markup("\n".join(out))

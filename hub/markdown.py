"""READMEs as safe HTML, rendered once when a version is published.

A README is untrusted text from whoever published the package, and the hub's pages share
an origin with its API, so nothing in it may reach a reader's browser as active markup.
It is rendered by a CommonMark parser (``markdown-it-py``: linear in the input, with the
reference implementation's guards against pathological emphasis and nesting) with raw
HTML switched off, then sanitised by ``nh3`` (the Ammonia sanitiser) against a short
allowlist of tags and attributes: two independent layers, so a bug in one is not an
injection. The hand-written renderer this replaces was quadratic (120,000 characters of
``**a `` took 33 s, on every page request); rendering now happens at publish time only
(:meth:`gymhub.hub.store.HubStore.publish`), and pages serve the stored HTML.

What survives: headings (shifted down one level: the page owns the ``<h1>``),
paragraphs, lists, block quotes, code, emphasis, tables, rules, and links to
``http:``, ``https:`` and ``mailto:`` targets, which get ``rel="nofollow noopener"``.
Every other link (``javascript:``, ``data:``, relative) keeps its text and loses its
target. Images become links to the image with their alt text: the hub may run offline,
its CSP allows no third-party images, and a page must not fetch pixels that track its
readers. Raw HTML in the README shows as text.
"""

from __future__ import annotations

import email.parser
import re
from collections.abc import Sequence

import nh3
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from markupsafe import escape

__all__ = ["MAX_README_CHARS", "readme_from_metadata", "render_markdown", "render_readme"]

#: The longest README rendered; a page is for reading, the wheel keeps the rest.
MAX_README_CHARS = 200_000
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_TAGS = {"a", "blockquote", "br", "code", "del", "em", "h2", "h3", "h4", "h5", "h6", "hr",
         "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr",
         "ul"}
_ATTRIBUTES = {"a": {"href"}, "ol": {"start"}}
_TRUNCATED = "\n\n*(README shortened to its first {n:,} characters; the wheel holds it all.)*\n"


def _safe_href(url: str) -> bool:
    return url.strip().lower().startswith(_SAFE_SCHEMES)


def _image(renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict,
           env: EnvType) -> str:
    """An image as a link to it, labelled with its alt text (never an ``<img>``)."""
    token = tokens[idx]
    alt = renderer.renderInlineAsText(token.children or [], options, env)
    src = str(token.attrGet("src") or "")
    label = escape(alt or src)
    if not _safe_href(src):
        return str(label)
    return f'<a href="{escape(src)}">{label}</a>'


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = lambda url: True  # type: ignore[method-assign]  # judged below
    md.add_render_rule("image", _image)
    return md


_MD = _parser()


def _defang(tokens: list[Token]) -> None:
    """Shift headings down a level and strip unsafe link targets, keeping their text."""
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(int(token.tag[1]) + 1, 6)}"
        if token.children:
            dropping = False
            for child in token.children:
                if child.type == "link_open" and not _safe_href(str(child.attrGet("href"))):
                    child.type, child.tag, child.attrs, dropping = "text", "", {}, True
                elif child.type == "link_close" and dropping:  # links do not nest
                    child.type, child.tag, dropping = "text", "", False


def render_markdown(text: str) -> str:
    """``text`` (Markdown) as sanitised HTML, linear in its length.

    Args:
        text: the README; anything past :data:`MAX_README_CHARS` is cut (and a note says so).

    Returns:
        HTML holding only the allowlisted tags and attributes, safe to place in a page
        unescaped.
    """
    if len(text) > MAX_README_CHARS:
        text = text[:MAX_README_CHARS] + _TRUNCATED.format(n=MAX_README_CHARS)
    text = text.replace("\x00", "\ufffd")
    env: EnvType = {}
    tokens = _MD.parse(text, env)
    _defang(tokens)
    raw = _MD.renderer.render(tokens, _MD.options, env)
    return nh3.clean(raw, tags=_TAGS, attributes=_ATTRIBUTES, clean_content_tags=set(),
                     link_rel="nofollow noopener", url_schemes={"http", "https", "mailto"},
                     strip_comments=True)


def render_readme(readme: str | None) -> str:
    """What the store keeps in ``versions.readme_html``: ``""`` when there is no README.

    The empty string (rendered: nothing to show) is distinct from ``NULL`` (published
    before READMEs were rendered at publish time, see :mod:`gymhub.hub.pages`).
    """
    if readme is None or not readme.strip():
        return ""
    return render_markdown(readme)


def readme_from_metadata(raw: bytes) -> str | None:
    """The long description in a wheel's ``METADATA``: its body, else the old header form."""
    msg = email.parser.Parser().parsestr(raw.decode("utf-8", "replace"))
    body = msg.get_payload()
    if isinstance(body, str) and body.strip():
        return body
    header = msg.get("Description")
    if header:  # continuation lines are indented with 8 spaces, a tab, or '|'
        lines = str(header).splitlines()
        return "\n".join([lines[0], *(re.sub(r"^( {8}|\t|\|)", "", ln) for ln in lines[1:])])
    return None

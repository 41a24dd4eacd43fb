"""MkDocs hook: pages that would drift if written by hand are generated at build time.

A page holds a marker line, ``<!-- gymhub:NAME -->``, and the build replaces it with
Markdown made from the code itself:

* ``training-config``: every field of :class:`gymhub.trainer.config.GRPOConfig`, the same
  model ``gymhub train --help`` prints, grouped by the ``# --- section`` comments of its
  source, with the type, bounds and default spelled as ``--help`` spells them;
* ``wire-protocol``: every route of the episode server from the OpenAPI schema FastAPI
  builds for ``create_app``, the request and reply models, and every stable error code
  with its HTTP status (``gymhub.server.error_replies.STATUS``).

An unknown marker fails the build, so a typo cannot silently leave a page empty.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

MARKER = re.compile(r"^<!-- gymhub:([a-z-]+) -->$", re.M)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each generator marker of a page by the Markdown it names."""
    del page, config, files

    def expand(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown docs generator {name!r}; known: {sorted(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(expand, markdown)


def _cell(text: object) -> str:
    """One Markdown table cell: no line breaks, no bare pipes, reST literals as Markdown."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", str(text))
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return " ".join(text.split()).replace("|", "\\|")


# -------------------------------------------------------------- training config
def training_config_markdown() -> str:
    """A table per section of ``GRPOConfig``; every field appears exactly once."""
    from gymhub.trainer import config as cfg

    sections = _config_sections(inspect.getsource(cfg.GRPOConfig))
    out: list[str] = []
    for title, names in sections:
        out += [f"### {title[0].upper()}{title[1:]}", "", "| key | type | default | meaning |",
                "|---|---|---|---|"]
        for name in names:
            info = cfg.GRPOConfig.model_fields[name]
            kind = cfg._type_name(info.annotation)
            base, optional, _ = kind.partition(" or none")
            kind = base + cfg._constraints(name) + optional
            default = info.get_default(call_default_factory=True)
            out.append(f"| `{name}` | {_cell(kind)} | `{_cell(repr(default))}` | "
                       f"{_cell(info.description or '')} |")
        out.append("")
    return "\n".join(out)


def _config_sections(source: str) -> list[tuple[str, list[str]]]:
    """``[(section title, [field, ...]), ...]`` in source order.

    Fields come from pydantic's own list; the source only says where each section
    starts, so a field declared before any section header lands in "general".
    """
    from gymhub.trainer.config import GRPOConfig

    fields = set(GRPOConfig.model_fields)
    sections: list[tuple[str, list[str]]] = [("general", [])]
    for line in source.splitlines():
        header = re.match(r"\s+# --- (.+)$", line)
        if header:
            sections.append((header.group(1).strip(), []))
            continue
        name = re.match(r"    (\w+): ", line)
        if name and name.group(1) in fields:
            sections[-1][1].append(name.group(1))
    listed = [n for _, names in sections for n in names]
    missing = fields - set(listed)
    if missing or len(listed) != len(fields):
        raise ValueError(f"GRPOConfig fields not placed in a section: {sorted(missing)}")
    return [(title, names) for title, names in sections if names]


# ---------------------------------------------------------------- wire protocol
def wire_protocol_markdown() -> str:
    """Routes, models and error codes of the episode server, from its OpenAPI schema."""
    from gymhub.server.app import create_app
    from gymhub.server.error_replies import STATUS

    schema = create_app(["echo-v0"]).openapi()
    models: dict[str, Any] = schema["components"]["schemas"]
    out = [f"Generated from the server's OpenAPI {schema['openapi']} schema "
           f"(`{schema['info']['title']}` {schema['info']['version']}); "
           "`GET /openapi.json` on a running server returns the same document.", "",
           "### Routes", "", "| method | path | parameters | what it does | answers |",
           "|---|---|---|---|---|"]
    used: list[str] = []
    for path, methods in schema["paths"].items():
        for method, op in methods.items():
            summary = (op.get("description") or op.get("summary", "")).split("\n\n")[0]
            codes = ", ".join(sorted(op.get("responses", {})))
            params = ", ".join(f"`{p['name']}` ({p['in']})" for p in op.get("parameters", []))
            out.append(f"| `{method.upper()}` | `{path}` | {params} | {_cell(summary)} | "
                       f"{codes} |")
            used += _models_of(op)
    out += ["", "### Request and reply models", ""]
    seen: set[str] = set()
    queue = list(dict.fromkeys(used))
    while queue:
        name = queue.pop(0)
        if name in seen or name not in models:
            continue
        seen.add(name)
        text, refs = _model_markdown(name, models[name])
        out.append(text)
        queue += [r for r in refs if r not in seen]
    out += ["### Error codes", "",
            "Every failure is `{\"error\": {\"code\", \"message\"}}` with one of these codes; "
            "the code is stable, the message is for people.", "",
            "| code | HTTP status | meaning |", "|---|---|---|"]
    meanings = _error_meanings()
    for code, status in sorted(STATUS.items(), key=lambda kv: (kv[1], kv[0])):
        out.append(f"| `{code}` | {status} | {_cell(meanings.get(code, ''))} |")
    out.append("")
    return "\n".join(out)


def _refs(node: Any) -> list[str]:
    """Every ``#/components/schemas/NAME`` under a schema node, in order."""
    if isinstance(node, dict):
        found = []
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.append(ref.rsplit("/", 1)[-1])
        for value in node.values():
            found += _refs(value)
        return found
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    return []


def _models_of(op: dict[str, Any]) -> list[str]:
    names = _refs(op.get("requestBody", {}))
    for code, reply in sorted(op.get("responses", {}).items()):
        if code.startswith("2"):
            names += _refs(reply)
    return names


def _type_of(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " or ".join(_type_of(p) for p in prop["anyOf"])
    if "enum" in prop:
        return " / ".join(f"`{v}`" for v in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(prop.get('items', {}))}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"map of {_type_of(prop['additionalProperties'])}"
    return str(kind)


def _model_markdown(name: str, model: dict[str, Any]) -> tuple[str, list[str]]:
    doc = (model.get("description") or "").split("\n\n")[0]
    lines = [f"#### `{name}`", "", _cell(doc), ""]
    props: dict[str, Any] = model.get("properties", {})
    required = set(model.get("required", []))
    if props:
        lines += ["| field | type | required | meaning |", "|---|---|---|---|"]
        for field, prop in props.items():
            meaning = prop.get("description", "")
            if "default" in prop and field not in required:
                meaning = f"{meaning} (default `{prop['default']!r}`)".strip()
            lines.append(f"| `{field}` | {_cell(_type_of(prop))} | "
                         f"{'yes' if field in required else 'no'} | {_cell(meaning)} |")
        lines.append("")
    return "\n".join(lines), _refs(props)


def _error_meanings() -> dict[str, str]:
    """Each error code's meaning: the first line of its exception's docstring."""
    from gymhub import errors

    out: dict[str, str] = {
        "not_found": "No such route.",
        "method_not_allowed": "The route exists, not with this method.",
    }
    for obj in vars(errors).values():
        code = getattr(obj, "code", None)
        if inspect.isclass(obj) and isinstance(code, str) and obj.__doc__:
            out.setdefault(code, obj.__doc__.strip().splitlines()[0])
    return out


GENERATORS = {
    "training-config": training_config_markdown,
    "wire-protocol": wire_protocol_markdown,
}

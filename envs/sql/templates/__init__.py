"""Question templates of the built-in ``sql-v0`` tasks, one module per fixture schema."""

from __future__ import annotations

from . import flights, hr, library, retail
from .base import CATEGORIES, DIALECTS, Template, render

__all__ = ["CATEGORIES", "DIALECTS", "TEMPLATES", "Template", "render"]

#: Templates per schema, in the order tasks are generated (and numbered) from them.
TEMPLATES: dict[str, tuple[Template, ...]] = {
    "retail": retail.TEMPLATES,
    "hr": hr.TEMPLATES,
    "flights": flights.TEMPLATES,
    "library": library.TEMPLATES,
}

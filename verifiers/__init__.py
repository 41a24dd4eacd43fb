"""Pure, deterministic scoring functions and the spec compiler (see :mod:`.core`)."""

from . import combinators, sql_match, text, unit_tests  # noqa: F401  (register built-in kinds)
from .core import KINDS, SpecReader, Verifier, compile, verifier_kind

__all__ = ["KINDS", "SpecReader", "Verifier", "compile", "verifier_kind"]

"""Pure, deterministic scoring functions and the spec compiler (see :mod:`.core`)."""

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

from . import (  # noqa: F401  (register built-in kinds)
    combinators,
    json_schema,
    math_equiv,
    sql_match,
    state_match,
    text,
    tool_calls,
    unit_tests,
)
from .core import KINDS, SpecReader, Verifier, compile, verifier_kind

__all__ = ["KINDS", "SpecReader", "Verifier", "compile", "verifier_kind"]

"""Pure, deterministic scoring functions and the spec compiler (see :mod:`.core`)."""

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

from . import combinators, sql_match, state_match, text, unit_tests  # noqa: F401  (register built-in kinds)
from .core import KINDS, SpecReader, Verifier, compile, verifier_kind

__all__ = ["KINDS", "SpecReader", "Verifier", "compile", "verifier_kind"]

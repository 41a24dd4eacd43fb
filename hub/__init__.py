"""Packaging, publishing and installing environments."""

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

"""How every ``gymhub`` command reports a :class:`~gymhub.errors.GymhubError`.

One line, ``gymhub: error: <message>``, on stderr: the messages are written to be read by
the person who typed the command (they name the key, the URL, the file), and a Python
traceback under them only hides that line. ``gymhub --debug CMD`` (or
``GYMHUB_DEBUG=1``) prints the traceback too, for a bug report.

The exit status says whose move it is, as argparse's 2 does for a mistyped option:

* **2**, the command cannot be done as asked: a bad option, config key, file or id, an
  install the user must confirm (:class:`~gymhub.errors.ConfigError`,
  :class:`~gymhub.errors.RegistryError`, :class:`~gymhub.errors.HubError`, ...);
* **1**, something the command relied on failed: an environment server that is not
  there or lost its episodes, a backend, an inference engine
  (:class:`~gymhub.errors.ServerError`, :class:`~gymhub.errors.BackendError`,
  :class:`~gymhub.errors.EngineError`). The same command may work once it is back.

Imports nothing but the standard library and :mod:`gymhub.errors`, so ``gymhub --help``
stays light.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Iterator

from gymhub.errors import BackendError, ConfigError, EngineError, GymhubError, ServerError

__all__ = ["DEBUG_ENV", "debug_mode", "debugging", "exit_status", "report"]

#: Set (to anything but ``0`` or empty) to print tracebacks; ``--debug`` sets it.
DEBUG_ENV = "GYMHUB_DEBUG"


def debugging() -> bool:
    """Whether errors are shown with their traceback."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


@contextlib.contextmanager
def debug_mode(on: bool) -> Iterator[None]:
    """Turn tracebacks on for the duration (``--debug``), for delegated commands too."""
    if not on:
        yield
        return
    before = os.environ.get(DEBUG_ENV)
    os.environ[DEBUG_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(DEBUG_ENV, None)
        else:
            os.environ[DEBUG_ENV] = before


def exit_status(exc: GymhubError) -> int:
    """1 when something the command relied on failed, 2 when the request was wrong."""
    failed = isinstance(exc, ServerError | BackendError | EngineError)
    return 1 if failed and not isinstance(exc, ConfigError) else 2


def report(exc: GymhubError) -> int:
    """Print ``exc`` as one line (after its traceback when debugging); its exit status."""
    if debugging():
        traceback.print_exception(exc, file=sys.stderr)
    print(f"gymhub: error: {str(exc) or type(exc).__name__}", file=sys.stderr, flush=True)
    return exit_status(exc)

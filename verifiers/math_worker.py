"""The worker process behind ``math_equiv``: parses and compares with ``math-verify``.

It runs as a script (``python -P math_worker.py MEMORY_MB``), not as part of gymhub: it
imports only the standard library and ``math_verify``, so a worker starts as fast as
those imports allow and nothing of the host's state leaks in.

Why a separate process: math-verify's own timeout uses ``SIGALRM``, which fails outside
the main thread, and a runaway SymPy simplification (``9^{9^{9^9}}``) cannot be stopped
from inside. Here both its timeouts are off; the host kills this process at its deadline.
math-verify also turns its internal failures into ``False``, so a timeout inside it would
read as a wrong answer: with the host's deadline a timeout is always reported as one.

Protocol: one JSON object per line on stdin, one reply per line on stdout. The first
line written is ``{"status": "ready"}`` (or ``{"status": "fatal", "message": ...}``).
A request is ``{"gold", "answer", "float_rounding", "numeric_precision", "strict",
"gold_format"}``; a reply's ``status`` is ``match``, ``mismatch``, ``gold_unparsed``,
``answer_unparsed`` or ``crash``, with the parsed forms for the record. Anything else
printed while working (a library's stray ``print``) goes to stderr, never the channel.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
from typing import Any

_SHOW = 200


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= _SHOW else text[: _SHOW - 3] + "..."


def _limit_memory(memory_mb: int) -> None:
    if memory_mb <= 0:
        return
    try:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # not on this platform: the deadline remains
        pass


def _orphan_watch() -> None:
    """Exit when the host dies mid-computation (stdin EOF is seen only between requests)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            threading.Event().wait(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def main() -> int:
    """Serve requests until stdin closes."""
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # stray prints go to stderr, never into the reply channel
    sys.stdout = sys.stderr
    _orphan_watch()

    def reply(obj: dict[str, Any]) -> None:
        channel.write(json.dumps(obj) + "\n")
        channel.flush()

    try:
        import math_verify
        from math_verify import grader, parser
    except Exception as exc:  # the host reports this as an error, with the cause
        reply({"status": "fatal", "message": f"cannot import math_verify: {exc!r}"})
        return 2
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    parser.TIMEOUT_WARNING_SHOWN = True  # the host's deadline is the timeout
    grader.TIMEOUT_WARNING_SHOWN = True
    _limit_memory(int(sys.argv[1]) if len(sys.argv) > 1 else 0)

    @functools.lru_cache(maxsize=1024)
    def parse_gold(gold: str, gold_format: str) -> list[Any]:
        if gold_format == "auto" and not any(m in gold for m in ("$", "\\boxed", "\\(", "\\[")):
            found = math_verify.parse(f"${gold}$", parsing_timeout=None)
            if found:
                return list(found)
        return list(math_verify.parse(gold, parsing_timeout=None))

    reply({"status": "ready"})
    for line in sys.stdin:
        try:
            req = json.loads(line)
            gold = parse_gold(req["gold"], req.get("gold_format", "auto"))
            if not gold:
                reply({"status": "gold_unparsed"})
                continue
            answer = math_verify.parse(req["answer"], parsing_timeout=None)
            if not answer:
                reply({"status": "answer_unparsed", "gold": [_short(g) for g in gold]})
                continue
            ok = math_verify.verify(
                gold, answer, float_rounding=req.get("float_rounding", 6),
                numeric_precision=req.get("numeric_precision", 15),
                strict=req.get("strict", True), timeout_seconds=None)
            reply({"status": "match" if ok else "mismatch", "gold": [_short(g) for g in gold],
                   "answer": [_short(a) for a in answer]})
        except MemoryError:
            reply({"status": "crash", "message": "the worker ran out of memory"})
        except Exception as exc:
            reply({"status": "crash", "message": f"{type(exc).__name__}: {_short(exc)}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``gymhub sandbox exec``: run one command in a sandbox from the shell.

::

    gymhub sandbox exec [--backend B] [--timeout S] [--memory MB] [--json] -- ARGV...

The exit status says whether the *sandbox* worked, not what the command did: 0 when a
result was produced (whatever the command's own exit code, signal or limit), 2 for a
usage error, 3 when the backend is unusable. The command's outcome is printed: its
stdout and stderr, then one status line on stderr; or, with ``--json``, one JSON object
(:meth:`~gymhub.sandbox.ExecResult.to_dict`) on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys

from gymhub.errors import BackendError

__all__ = ["main"]

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_BACKEND = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gymhub sandbox",
        description="Run untrusted commands in a gymhub sandbox.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("exec", help="run one command and print its result")
    ex.add_argument("--backend", default=None,
                    help="bwrap, docker or local (default: $GYMHUB_SANDBOX_BACKEND or the "
                         "best available)")
    ex.add_argument("--timeout", type=float, default=None, metavar="S",
                    help="wall-clock limit in seconds (also the CPU limit)")
    ex.add_argument("--memory", type=int, default=None, metavar="MB", help="memory limit")
    ex.add_argument("--json", action="store_true", help="print one JSON object")
    ex.add_argument("--stdin", action="store_true", help="pass this process's stdin on")
    ex.add_argument("argv", nargs=argparse.REMAINDER, help="-- followed by the command")
    return parser


def main(argv: list[str]) -> int:
    """Entry point of ``gymhub sandbox`` (``argv`` excludes the program name)."""
    from gymhub.sandbox import Limits, get_sandbox

    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on errors (2)
        return int(exc.code or 0)
    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.print_usage(sys.stderr)
        print("gymhub sandbox exec: give the command after --", file=sys.stderr)
        return EXIT_USAGE
    changes: dict[str, float | int] = {}
    if args.timeout is not None:
        changes.update(wall_s=args.timeout, cpu_s=args.timeout)
    if args.memory is not None:
        changes["memory_mb"] = args.memory
    try:
        limits = Limits().replace(**changes)
    except ValueError as exc:
        print(f"gymhub sandbox exec: {exc}", file=sys.stderr)
        return EXIT_USAGE
    stdin = sys.stdin.buffer.read() if args.stdin else None
    try:
        with get_sandbox(args.backend, limits) as sandbox:
            result = sandbox.run(command, stdin=stdin)
    except BackendError as exc:
        print(f"gymhub sandbox exec: backend unusable: {exc}", file=sys.stderr)
        return EXIT_BACKEND
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        sys.stdout.buffer.write(result.stdout)
        sys.stdout.flush()
        sys.stderr.buffer.write(result.stderr)
        flags = [name for name in ("stdout_truncated", "stderr_truncated", "oom_killed")
                 if getattr(result, name)]
        print(f"[{result.backend}] status={result.status} exit_code={result.exit_code} "
              f"signal={result.signal} wall_ms={result.wall_ms:.1f} cpu_ms={result.cpu_ms:.1f}"
              + (" " + " ".join(flags) if flags else ""), file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

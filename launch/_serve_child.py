"""``gymhub serve``, killed with the process that started it.

Run as ``python -m gymhub.launch._serve_child PARENT_PID NICE SERVE_ARGS...`` by a Ray
actor (``NICE`` is ``-`` to keep the inherited niceness).
Why: when Ray kills an actor's process (``ray.kill``, a lost node, an OOM kill) nothing
runs in it, so a plain child would outlive it, still holding episodes on a port that no
list names any more. ``PR_SET_PDEATHSIG`` has the kernel send ``SIGKILL`` instead; it is
set here, in the child itself, because ``preexec_fn`` is unsafe in a threaded parent.
The parent's pid is checked after setting it: a parent that died before would never
send the signal.

Ray runs its workers at niceness 15 (its ``worker_niceness``), and a child inherits it;
a server is on the learner's data path, and on a busy node a niced server measured
~7 % fewer steps/s than the same server started by hand. So the launcher asks for 0
(lowering niceness needs ``CAP_SYS_NICE`` or an ``RLIMIT_NICE`` allowance; without
either, the server keeps 15 and the launcher's ``info()`` shows it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    """Tie this process to ``argv[0]`` (the parent's pid), set niceness ``argv[1]``, serve."""
    parent, nice, rest = int(argv[0]), argv[1], argv[2:]
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        return 3  # the parent is already gone
    if nice != "-":
        with contextlib.suppress(OSError):  # not allowed to lower it: keep what we have
            os.setpriority(os.PRIO_PROCESS, 0, int(nice))
    from gymhub.server.cli import main as serve

    return serve(rest)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

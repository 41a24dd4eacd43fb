"""A sandboxed Python session for environments whose agent may compute (code-v0, math-v0).

One session per episode, opened on the first call (a one-shot answer costs no sandbox)
and closed when the episode ends. Variables, imports and files persist between calls like
a notebook kernel; a crash or timeout restarts the REPL and the answer says so. Where a
backend has no REPL, each call runs a fresh interpreter in the same workdir and the
answer says that too. Output shown to the agent is capped (head and tail kept): a model
learns nothing from a megabyte of output. An unusable sandbox is a tool error the agent
reads, never an exception out of ``step``.
"""

from __future__ import annotations

from gymhub.errors import BackendError
from gymhub.sandbox import ExecResult, Limits, PythonResult, Session, shared_sandbox

from .tools import ToolError

__all__ = ["SandboxPython", "render_result"]

_NO_REPL_NOTE = ("[note: this sandbox has no persistent REPL; each call runs a fresh "
                 "interpreter: files persist, variables do not]")
_RESTART_NOTE = ("[the Python process crashed or timed out and was restarted: variables and "
                 "imports are gone; files remain]")


class SandboxPython:
    """The episode's Python session and the text a ``run_python`` tool answers with.

    Args:
        backend: sandbox backend (default: the best available one).
        run_timeout_s: wall-clock limit of one call.
        memory_mb: the session's memory limit.
        max_output_chars: characters of output shown to the agent.
    """

    def __init__(self, backend: str | None, *, run_timeout_s: float, memory_mb: int,
                 max_output_chars: int) -> None:
        self.backend = backend
        self.run_timeout_s = run_timeout_s
        self.memory_mb = memory_mb
        self.max_output_chars = max_output_chars
        self.session: Session | None = None

    def require(self) -> Session:
        """The episode's session, opened now if needed.

        Raises:
            ToolError: the sandbox cannot start.
        """
        if self.session is None:
            try:
                limits = Limits(wall_s=self.run_timeout_s + 2, cpu_s=self.run_timeout_s + 2,
                                memory_mb=self.memory_mb)
                # The process-wide sandbox (one workdir/container pool per backend, shared
                # with the verifiers and closed at exit).
                self.session = shared_sandbox(self.backend).session(limits)
            except BackendError as exc:
                raise ToolError(f"the sandbox is unavailable: {exc}") from exc
        return self.session

    def run(self, code: str) -> str:
        """Run ``code`` in the session; its output, capped, as the agent sees it.

        Raises:
            ToolError: the sandbox failed, or the code cannot be sent (bad encoding).
        """
        session = self.require()
        note = ""
        try:
            try:
                result: ExecResult = session.run_python(code, timeout=self.run_timeout_s)
            except NotImplementedError:
                note = _NO_REPL_NOTE
                result = session.run(["python3", "-I", "-c", code])
        except BackendError as exc:
            raise ToolError(f"the sandbox failed: {exc}") from exc
        except (UnicodeError, ValueError) as exc:
            raise ToolError(f"cannot run this code: {exc}") from exc
        return self.cap(render_result(result, note, self.run_timeout_s))

    def cap(self, text: str) -> str:
        """``text`` cut to ``max_output_chars``: three quarters head, one quarter tail."""
        limit = self.max_output_chars
        if len(text) <= limit:
            return text
        cut = len(text) - limit
        head, tail = text[: limit * 3 // 4], text[-(limit // 4):]
        return f"{head}\n... [{cut:,} characters cut] ...\n{tail}"

    def close(self) -> None:
        """End the session (idempotent)."""
        if self.session is not None:
            session, self.session = self.session, None
            session.close()


def render_result(result: ExecResult, note: str, timeout_s: float) -> str:
    """stdout, stderr and what happened, as the agent sees it."""
    parts = [note] if note else []
    if result.stdout:
        parts.append(result.stdout_text.rstrip("\n"))
    if result.stderr:
        parts.append("[stderr]\n" + result.stderr_text.rstrip("\n"))
    if result.stdout_truncated or result.stderr_truncated:
        parts.append("[output truncated by the sandbox]")
    if result.timed_out:
        parts.append(f"[stopped: over the time limit ({timeout_s:g} s); {result.limit}]")
    elif result.oom_killed or result.limit:
        parts.append(f"[killed: {result.limit or 'out of memory'}]")
    elif result.signal is not None:
        parts.append(f"[killed by signal {result.signal}]")
    if isinstance(result, PythonResult) and result.restarted:
        parts.append(_RESTART_NOTE)
    elif not note and not isinstance(result, PythonResult) and result.exit_code not in (0, None):
        parts.append(f"[exit status {result.exit_code}]")
    return "\n".join(parts) if parts else "(no output)"

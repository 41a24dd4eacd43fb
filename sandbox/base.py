"""The backend-independent contract: limits, results, and the Sandbox/Session interfaces.

Every backend (``bwrap``, ``docker``, ``local``) implements :class:`Sandbox` and
:class:`Session`; callers (verifiers, environments, the CLI) only see this module.

Two rules shape it:

* **Failures are data.** Whatever the *command* does (crash, hang, fork bomb, flood
  its output, eat memory), ``run`` returns an :class:`ExecResult` that says what
  happened. Only a backend that cannot run anything at all raises
  :class:`~gymhub.errors.BackendError`; a file name that would escape the workdir is the
  *caller's* mistake and raises :class:`SandboxPathError`.
* **Limits are one value object.** :class:`Limits` travels unchanged to every backend,
  which maps it onto its own mechanisms (cgroups and rlimits, container options).
"""

from __future__ import annotations

import abc
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar

from gymhub.errors import SandboxPathError

__all__ = [
    "WORKDIR",
    "ExecResult",
    "Limits",
    "PythonResult",
    "Sandbox",
    "SandboxPathError",
    "Session",
]

#: Where the session's workdir appears inside every backend; commands start there.
WORKDIR = "/work"

#: Values of :attr:`ExecResult.limit` (which limit the sandbox enforced by killing).
LIMIT_WALL = "wall_time"
LIMIT_CPU = "cpu_time"
LIMIT_MEMORY = "memory"
LIMIT_OUTPUT = "output"


@dataclass(frozen=True)
class Limits:
    """Resource limits for one command (or one session's REPL).

    Defaults suit a unit-test run of model-written Python: small enough that a hostile
    program cannot hurt a shared 2-core machine, large enough for numpy imports.

    Attributes:
        wall_s: wall-clock deadline; the sandbox kills the command after it.
        cpu_s: CPU seconds summed over all the command's processes (cgroup) and per
            process (``RLIMIT_CPU``, the second layer).
        memory_mb: resident memory of all processes together (memory cgroup or
            container limit); ``RLIMIT_AS`` is set to a multiple of it as a second layer.
        pids: processes and threads alive at once (pids cgroup); stops fork bombs.
        output_bytes: bytes kept from stdout and from stderr each; more kills the
            command (``limit == "output"``) so a flood cannot burn CPU until the deadline.
        file_size_mb: largest file the command may write (``RLIMIT_FSIZE``).
        open_files: open descriptors per process (``RLIMIT_NOFILE``).
        tmp_mb: size of the private ``/tmp`` tmpfs.
        workdir_mb: size of the workdir tmpfs (where the backend can cap it).
        network: ``False`` (the default and the only value the built-in environments
            use) gives the command no network at all, not even DNS.
    """

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 512
    pids: int = 64
    output_bytes: int = 1 << 20
    file_size_mb: int = 64
    open_files: int = 256
    tmp_mb: int = 64
    workdir_mb: int = 128
    network: bool = False

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "pids", "output_bytes", "file_size_mb",
                     "open_files", "tmp_mb", "workdir_mb"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")

    def replace(self, **changes: Any) -> Limits:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ExecResult:
    """What one command did. Never an exception: every outcome is a field.

    Attributes:
        exit_code: the command's exit status, or ``None`` when a signal ended it.
        signal: the signal that ended it (9 for every kill by the sandbox), else ``None``.
        stdout: captured bytes, at most ``Limits.output_bytes``; may be non-UTF-8.
        stderr: the same for stderr.
        stdout_truncated: more stdout was produced than was kept.
        stderr_truncated: the same for stderr.
        timed_out: the wall-clock or CPU-time limit ended the command.
        oom_killed: the kernel's OOM killer ended a process of the command.
        pids_exhausted: a fork or thread creation was refused by the process limit.
        limit: which limit the sandbox enforced by killing (``"wall_time"``,
            ``"cpu_time"``, ``"memory"``, ``"output"``), else ``None``.
        wall_ms: wall time of the call as the caller saw it, sandbox setup included.
        cpu_ms: CPU time of all the command's processes (user + system).
        files: files collected from the workdir after the run (``collect=``), by name;
            a requested file that is missing, not regular, or reached through a symlink
            is absent.
        backend: name of the backend that ran it.
    """

    exit_code: int | None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    oom_killed: bool = False
    pids_exhausted: bool = False
    limit: str | None = None
    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    files: Mapping[str, bytes] = field(default_factory=dict)
    backend: str = ""

    @property
    def ok(self) -> bool:
        """The command exited 0 and no limit was hit."""
        return self.exit_code == 0 and self.limit is None and not self.oom_killed

    @property
    def stdout_text(self) -> str:
        """Stdout decoded as UTF-8, undecodable bytes replaced (never raises)."""
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        """Stderr decoded as UTF-8, undecodable bytes replaced (never raises)."""
        return self.stderr.decode("utf-8", errors="replace")

    @property
    def status(self) -> str:
        """One word for logs and metrics: ``ok``, ``exit``, ``signal``, ``oom`` or a limit."""
        if self.oom_killed:
            return "oom"
        if self.limit is not None:
            return self.limit
        if self.signal is not None:
            return "signal"
        return "ok" if self.exit_code == 0 else "exit"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (text decoded with replacement; file contents likewise)."""
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stdout": self.stdout_text,
            "stderr": self.stderr_text,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "timed_out": self.timed_out,
            "oom_killed": self.oom_killed,
            "pids_exhausted": self.pids_exhausted,
            "limit": self.limit,
            "wall_ms": round(self.wall_ms, 3),
            "cpu_ms": round(self.cpu_ms, 3),
            "files": {k: v.decode("utf-8", errors="replace") for k, v in self.files.items()},
            "backend": self.backend,
        }


@dataclass(frozen=True)
class PythonResult(ExecResult):
    """Result of :meth:`Session.run_python`: an :class:`ExecResult` plus REPL state.

    ``exit_code`` is 0 when the code ran without an exception and 1 when it raised (the
    traceback, starting in the cell, is in ``stderr``); ``SystemExit`` gives its own
    code and leaves the REPL running. ``exit_code`` is ``None`` with ``signal`` (9 for a
    kill by the sandbox) and ``limit`` set when the interpreter itself was killed; an
    interpreter that exited on its own (``os._exit(3)``) reports that status.

    ``stdout``/``stderr`` hold what the cell wrote to fds 1 and 2 (``print``, direct
    writes, child processes), at most ``Limits.output_bytes`` each, with the truncation
    flags set beyond; unlike :meth:`Session.run`, more output does not kill the REPL. A
    trailing expression's ``repr`` is printed to ``stdout``, as in ``python -i``. Output
    of a call that killed the interpreter is lost.

    Attributes:
        restarted: the interpreter's state (variables, imports, threads) is gone: it died
            or was killed during this call and the next call gets a fresh one, or it had
            died since the previous call and this call ran in a fresh one. Files in the
            workdir survive either way.
        restart_reason: why, in words (``"timed out after 2 s; ..."``), else ``None``.
        value: ``repr`` of the cell's trailing expression when it is not ``None``
            (capped like the output), else ``None``.
        exception: class name of the exception the cell raised (``"ZeroDivisionError"``,
            ``"SyntaxError"``, ``"SystemExit"``), else ``None``.
    """

    restarted: bool = False
    restart_reason: str | None = None
    value: str | None = None
    exception: str | None = None

    @property
    def status(self) -> str:
        """Like :attr:`ExecResult.status`, with ``exception`` for a raised error."""
        base = super().status
        return "exception" if base == "exit" and self.exit_code == 1 else base

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict including the REPL fields."""
        data = super().to_dict()
        data.update(restarted=self.restarted, restart_reason=self.restart_reason,
                    value=self.value, exception=self.exception)
        return data


Files = Mapping[str, bytes | str]


class Session(abc.ABC):
    """One episode's sandbox: a workdir that persists across calls until :meth:`close`.

    Commands run with the workdir as ``/work`` (their current directory). Files written
    there by one call are seen by the next. Closing kills everything still running and
    deletes the workdir; a closed session refuses further calls with ``RuntimeError``.
    Sessions are context managers and are safe to call from several threads (calls are
    serialised per session).

    Backends implement :meth:`_execute`; :meth:`run` owns what every backend must do the
    same way before a command starts (argument checks, the session lock, the closed
    check, files in), so no backend can forget or reorder a step.

    Args:
        limits: the session's default limits.
    """

    limits: Limits

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        #: Serialises calls; re-entrant so that :meth:`run` can use :meth:`write_file`.
        self._lock = threading.RLock()
        self._closed = False

    def _check_open(self) -> None:
        """Refuse a call on a closed session (the caller holds :attr:`_lock`)."""
        if self._closed:
            raise RuntimeError("the sandbox session is closed")

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        files: Files | None = None,
        collect: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """Run one command in the session's workdir.

        Args:
            argv: the command and its arguments (no shell; use ``["sh", "-c", ...]``).
            stdin: bytes fed to the command's stdin (empty when ``None``).
            files: files written into the workdir first (name → content).
            collect: workdir files read back into :attr:`ExecResult.files` afterwards.
            env: extra environment variables; the host's environment is never passed.
            limits: overrides the session's limits for this call.

        Raises:
            SandboxPathError: a name in ``files``/``collect`` escapes the workdir.
            BackendError: the backend could not start the command at all.
            RuntimeError: the session is closed.
            ValueError: ``argv`` is a string or empty.
        """
        if isinstance(argv, str) or not argv:
            raise ValueError("argv must be a non-empty list of strings")
        lim = limits or self.limits
        data_in = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        with self._lock:
            self._check_open()
            for name, data in (files or {}).items():
                self.write_file(name, data)
            return self._execute(list(argv), data_in, env or {}, lim, tuple(collect))

    @abc.abstractmethod
    def _execute(self, argv: list[str], stdin: bytes, env: Mapping[str, str], limits: Limits,
                 collect: tuple[str, ...]) -> ExecResult:
        """Run one command for :meth:`run`, which holds the lock and wrote the files.

        Args:
            argv: the command, already checked to be a non-empty list.
            stdin: bytes for the command's stdin (possibly empty).
            env: the caller's extra variables (the backend adds its base environment).
            limits: the call's limits (the session's unless overridden).
            collect: workdir files to read back into :attr:`ExecResult.files`.
        """

    @abc.abstractmethod
    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a file into the workdir (parents created). Raises SandboxPathError."""

    @abc.abstractmethod
    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Read a regular workdir file without following symlinks.

        Raises:
            SandboxPathError: the name escapes the workdir.
            FileNotFoundError: no such regular file (a symlink counts as missing).
        """

    @abc.abstractmethod
    def list_files(self) -> list[str]:
        """Relative names of the regular files in the workdir, sorted."""

    def run_python(self, code: str, *, timeout: float | None = None) -> PythonResult:
        """Run Python source in the session's persistent REPL (state kept between calls).

        The contract code-v0 builds on: the REPL starts on first use, inside the
        session's sandbox (same limits, workdir as current directory, sandbox user, no
        network), and talks to the host over a dedicated channel with length-prefixed
        frames. Variables, imports and threads persist between calls, like a notebook
        kernel. If the last statement is an expression its repr is printed. A crash, an
        exhausted limit, a timeout or tampering with the REPL's channel kills the
        interpreter; the result says ``restarted=True`` with a ``restart_reason`` and the
        next call gets a fresh one (see :class:`PythonResult`).

        Args:
            code: Python source (one cell).
            timeout: wall-clock seconds for this call (``Limits.wall_s`` when omitted).

        Raises:
            RuntimeError: the session is closed.
            BackendError: the interpreter cannot start at all (no ``python3`` inside).
        """
        raise NotImplementedError(f"{type(self).__name__} has no persistent REPL")

    @abc.abstractmethod
    def close(self) -> None:
        """Kill everything the session started and delete its workdir (idempotent)."""

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Sandbox(abc.ABC):
    """A backend that runs untrusted commands under :class:`Limits`.

    Attributes:
        name: the backend's registry name (``bwrap``, ``docker``, ``local``).
        limits: default limits of runs and sessions.
    """

    name: ClassVar[str] = ""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()

    @abc.abstractmethod
    def session(self, limits: Limits | None = None) -> Session:
        """Open a per-episode session; close it (or use ``with``) when the episode ends.

        Raises:
            BackendError: the backend cannot create a session.
        """

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        files: Files | None = None,
        collect: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """Run one command in a fresh, throw-away session (see :meth:`Session.run`)."""
        with self.session(limits) as session:
            return session.run(argv, stdin=stdin, files=files, collect=collect, env=env)

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release backend-wide resources (container pools); sessions close on their own."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

"""The interpreter side of the persistent REPL: runs INSIDE the sandbox, stdlib only.

The host does not import this module: it reads its source and starts it as
``python3 -I -c <source> <req_fd> <resp_fd>`` inside the session's sandbox (``stdio``
instead of the two numbers makes it use its own stdin/stdout as the channel and move
them out of the way, which is what a Docker ``exec`` offers). Keeping it stdlib-only and
import-free means it runs on whatever ``python3`` the sandbox has.

Why the design is as it is:

* **A dedicated channel.** Requests and responses travel on their own descriptors, made
  non-inheritable so that programs the code starts do not get them. The code's fds 1 and
  2 point at fresh in-memory files for the duration of each call (``memfd``), so nothing
  it prints, at any level (``print``, ``os.write(1, ...)``, a child process), reaches
  the channel; the captured bytes are read back (up to the cap) and sent as raw bytes, so
  non-UTF-8 output survives unchanged.
* **Frames the host can check.** Each response is ``MAGIC, u32 length, u32 header
  length, JSON header, stdout, stderr`` and echoes the request's random id. Code that
  writes to the channel itself (it runs in this process, so it can) produces a frame the
  host rejects, and the host then kills and restarts the interpreter: forging can only
  ever break the caller's own REPL.
* **Fail fast.** Any error on the channel, or finding that the code closed or replaced
  one of the descriptors this loop relies on, ends the process (the host restarts it)
  rather than serve in an unknown state.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import linecache
import os
import resource
import struct
import sys
import traceback
import types
from typing import Any

MAGIC = b"GHR1"
_HEAD = struct.Struct(">4sI")
_SUB = struct.Struct(">I")
#: Exit status when the channel is broken or a descriptor was tampered with.
EXIT_CHANNEL = 70


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _send(fd: int, header: dict[str, Any], out: bytes = b"", err: bytes = b"") -> None:
    head = json.dumps(header).encode()
    body = _SUB.pack(len(head)) + head + out + err
    _write_all(fd, _HEAD.pack(MAGIC, len(body)) + body)


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _cpu_ms() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total * 1000.0


def _read_back(fd: int, cap: int) -> tuple[bytes, int]:
    size = os.fstat(fd).st_size
    return os.pread(fd, min(size, cap), 0), size


class Kernel:
    """Executes cells in one persistent namespace, like a notebook kernel."""

    def __init__(self) -> None:
        # The cells' namespace is a fresh ``__main__`` module, as in ``python -i``: pickle
        # and multiprocessing find the classes and functions the cells define.
        module = types.ModuleType("__main__")
        sys.modules["__main__"] = module
        self.namespace: dict[str, Any] = module.__dict__
        self.namespace["__builtins__"] = builtins
        self.count = 0
        self.stdout = sys.stdout
        self.stderr = sys.stderr

    def run(self, code: str, cap: int) -> dict[str, Any]:
        """Run one cell; returns the header fields (exit code, value, exception name)."""
        self.count += 1
        name = f"<cell-{self.count}>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        sys.stdout, sys.stderr = self.stdout, self.stderr  # undo a swap by an earlier cell
        result: dict[str, Any] = {"exit_code": 0, "value": None, "exception": None}
        try:
            tree = ast.parse(code, name, "exec")
            last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            if last is not None:
                tree.body.pop()
            exec(compile(tree, name, "exec", dont_inherit=True), self.namespace)
            if last is not None:
                expr = ast.Expression(last.value)
                value = eval(compile(expr, name, "eval", dont_inherit=True), self.namespace)
                if value is not None:
                    builtins._ = value  # type: ignore[attr-defined]
                    text = repr(value)
                    print(text)
                    result["value"] = text[:cap]
        except SystemExit as exc:
            code_ = exc.code
            result["exit_code"] = code_ if isinstance(code_, int) else (0 if code_ is None else 1)
            result["exception"] = "SystemExit"
            if not isinstance(code_, int | None):
                print(code_, file=sys.stderr)
        except BaseException as exc:
            result["exit_code"] = 1
            result["exception"] = type(exc).__name__
            tb = exc.__traceback__
            # Drop this module's own frame: the traceback starts in the cell.
            if tb is not None and tb.tb_frame.f_code is Kernel.run.__code__:
                tb = tb.tb_next
            self._print_exc(exc, tb)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):  # a closed stream is the cell's doing
                stream.flush()
        return result

    def _print_exc(self, exc: BaseException, tb: Any) -> None:
        lines = traceback.format_exception(type(exc), exc, tb)
        if isinstance(exc, SyntaxError):
            lines = traceback.format_exception_only(type(exc), exc)
        try:
            sys.stderr.write("".join(lines))
        except BaseException:
            os.write(2, "".join(lines).encode("utf-8", "backslashreplace"))


def main(argv: list[str]) -> int:
    """Serve requests until the host closes the channel; see the module docstring."""
    devnull = os.open(os.devnull, os.O_RDWR)
    if argv[1] == "stdio":
        req, resp = os.dup(0), os.dup(1)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
    else:
        # The host passes its own descriptor numbers, which are high when the host has
        # many files open; moved to the lowest free ones, the channel looks the same
        # whatever the host's state.
        high = int(argv[1]), int(argv[2])
        req, resp = os.dup(high[0]), os.dup(high[1])
        for fd in high:
            os.close(fd)
        os.dup2(devnull, 0)
    for fd in (req, resp):
        os.set_inheritable(fd, False)
    with contextlib.suppress(OSError):
        os.setsid()  # the host can tell the REPL's processes from a command's
    sys.path.insert(0, "")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), "utf-8", "backslashreplace")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), "utf-8", "backslashreplace",
                                  line_buffering=True)
    kernel = Kernel()
    ids = {fd: _identity(fd) for fd in (req, resp)}
    _send(resp, {"id": "hello", "pid": os.getpid(), "sid": os.getsid(0),
                 "python": sys.version.split()[0]})
    os.dup2(devnull, 2)
    while True:
        try:
            (magic, size) = _HEAD.unpack(_read_exact(req, _HEAD.size))
            if magic != MAGIC:
                return EXIT_CHANNEL
            request = json.loads(_read_exact(req, size))
        except EOFError:
            return 0
        cap = int(request["cap"])
        out, err = os.memfd_create("stdout"), os.memfd_create("stderr")
        os.dup2(out, 1)
        os.dup2(err, 2)
        cpu = _cpu_ms()
        header = kernel.run(str(request["code"]), cap)
        header["cpu_ms"] = _cpu_ms() - cpu
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            if any(_identity(fd) != ident for fd, ident in ids.items()):
                return EXIT_CHANNEL
            out_bytes, out_total = _read_back(out, cap)
            err_bytes, err_total = _read_back(err, cap)
        except OSError:
            return EXIT_CHANNEL
        os.close(out)
        os.close(err)
        header.update(id=request["id"], stdout_len=len(out_bytes), stderr_len=len(err_bytes),
                      stdout_total=out_total, stderr_total=err_total)
        _send(resp, header, out_bytes, err_bytes)


if __name__ == "__main__":
    try:
        status = main(sys.argv)
    except OSError:
        status = EXIT_CHANNEL
    os._exit(status)

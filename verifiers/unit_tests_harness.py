"""The sandbox side of the ``unit_tests`` verifier: the trusted harness and the worker.

This module is never imported inside the sandbox. :mod:`gymhub.verifiers.unit_tests`
reads this file's text and runs it there as ``python3 -I -S -c SOURCE`` (the harness,
the sandbox's pid 1); the harness starts the worker from the same text as ``python3 -I
-S -c SOURCE worker MEMORY_MB``. So it may use the standard library only (the sandbox
sees no gymhub), and importing it on the host has no side effects: everything runs from
:func:`main`. Line numbers in a harness traceback are this file's.
:mod:`gymhub.verifiers.unit_tests` explains the design and why the candidate cannot
fake a pass.

Three parts:

* the plain-data codec and length-prefixed frames (:func:`pack`, :func:`unpack`,
  :func:`send`, :func:`recv`), used by both sides;
* the worker (:func:`worker`): loads the solution once, then forks per call; untrusted
  as soon as the solution ran;
* the harness (:func:`harness`): runs the tests against a proxy of the entry point and
  reports each result on its own stdout, under the host's nonce.
"""

from __future__ import annotations

import builtins
import marshal
import os
import struct
import sys
import time

# Not ``typing.TYPE_CHECKING``: importing typing costs every sandboxed start a few ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable
    from types import FrameType
    from typing import Any
else:  # ``signal`` imports enum: the raw module is all the harness needs, and faster.
    import _signal as signal

__all__ = ["dec", "enc", "harness", "main", "pack", "recv", "send", "unpack", "worker"]

MAX_DEPTH = 1000
LIMIT = 16 << 20
_SEQS: tuple[tuple[type, bytes], ...] = (
    (tuple, b"t"), (list, b"l"), (frozenset, b"F"), (set, b"S"))
_MAKE: dict[bytes, Callable[[list[Any]], Any]] = {
    b"t": tuple, b"l": list, b"F": frozenset, b"S": set}


# ------------------------------------------------------------------------------- codec
def enc(v: object, out: list[bytes], d: int = 0) -> None:
    """Append the tagged bytes of a plain-data value to ``out``.

    Raises:
        TypeError: ``v`` holds something other than plain data.
        ValueError: ``v`` is nested deeper than :data:`MAX_DEPTH`.
    """
    if d > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if v is None:
        out.append(b"N")
    elif isinstance(v, bool):
        out.append(b"T" if v is True else b"B")
    elif isinstance(v, int):
        out.append(b"i%x;" % int(v) if int(v) >= 0 else b"j%x;" % -int(v))
    elif isinstance(v, float):
        out.append(b"f" + struct.pack(">d", float(v)))
    elif isinstance(v, complex):
        out.append(b"c" + struct.pack(">dd", float(v.real), float(v.imag)))
    elif isinstance(v, str):
        data = str.__str__(v).encode("utf-8", "surrogatepass")
        out.append(b"s%d:" % len(data) + data)
    elif isinstance(v, bytes | bytearray):
        out.append(b"y%d:" % len(v) + bytes(v))
    elif isinstance(v, dict):
        out.append(b"d%d:" % len(v))
        for k, x in list(dict.items(v)):
            enc(k, out, d + 1)
            enc(x, out, d + 1)
    else:
        for t, tag in _SEQS:
            if isinstance(v, t):
                items = list(v)  # type: ignore[call-overload]
                out.append(tag + b"%d:" % len(items))
                for x in items:
                    enc(x, out, d + 1)
                return
        raise TypeError(f"a value of type {type(v).__name__} cannot cross the test boundary "
                        "(plain data only)")


def _num(b: bytes, i: int, end: bytes) -> tuple[bytes, int]:
    j = b.index(end, i)
    return b[i:j], j + 1


def dec(b: bytes, i: int = 0, d: int = 0) -> tuple[Any, int]:
    """Decode one value at ``b[i:]``: ``(value, next index)``. Builds only plain data.

    Raises:
        ValueError: malformed or truncated bytes.
        TypeError: an unhashable value where a set member or dict key must be.
    """
    if d > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    tag = b[i:i + 1]
    i += 1
    if tag == b"N":
        return None, i
    if tag in (b"T", b"B"):
        return tag == b"T", i
    if tag in (b"i", b"j"):
        digits, i = _num(b, i, b";")
        n = int(digits, 16)
        return (n if tag == b"i" else -n), i
    if tag == b"f":
        return struct.unpack(">d", b[i:i + 8])[0], i + 8
    if tag == b"c":
        re_, im = struct.unpack(">dd", b[i:i + 16])
        return complex(re_, im), i + 16
    size, i = _num(b, i, b":")
    n = int(size)
    if n < 0 or (tag in (b"s", b"y") and i + n > len(b)):
        raise ValueError("truncated value")
    if tag == b"s":
        return b[i:i + n].decode("utf-8", "surrogatepass"), i + n
    if tag == b"y":
        return bytes(b[i:i + n]), i + n
    items = []
    for _ in range(n * 2 if tag == b"d" else n):
        x, i = dec(b, i, d + 1)
        items.append(x)
    if tag == b"d":
        return dict(zip(items[::2], items[1::2], strict=True)), i
    if tag in _MAKE:
        return _MAKE[tag](items), i
    raise ValueError("malformed value")


def pack(v: object) -> bytes:
    """The bytes of a plain-data value (see :func:`enc`)."""
    out: list[bytes] = []
    enc(v, out)
    return b"".join(out)


def unpack(b: bytes) -> Any:
    """The value of :func:`pack`'s bytes; trailing bytes are an error (ValueError)."""
    v, i = dec(b)
    if i != len(b):
        raise ValueError("trailing bytes")
    return v


def send(fd: int, v: object, data: bytes | None = None) -> None:
    """Write one frame: ``v`` packed (or ``data`` as is), length-prefixed."""
    data = pack(v) if data is None else data
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _readn(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv(fd: int) -> Any:
    """Read one frame's value, or None at end of file.

    Raises:
        ValueError: the frame is over :data:`LIMIT` or malformed.
    """
    head = _readn(fd, 4)
    if head is None:
        return None
    n = struct.unpack(">I", head)[0]
    if n > LIMIT:
        raise ValueError("message too large")
    body = _readn(fd, n)
    return None if body is None else unpack(body)


def _text(e: BaseException) -> str:
    try:
        return str(e)[:300]
    except BaseException:
        return "?"


# ------------------------------------------------------------------------------ worker
def worker(memory_mb: int) -> None:
    """Load the solution sent on fd 0, then answer each call on fd 1 from a fork.

    The request and response pipes move off fds 0 and 1, which (with 2) become
    ``/dev/null``, so nothing the solution prints can look like a frame.
    """
    r, w = os.dup(0), os.dup(1)
    nul = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(nul, fd)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # under memory pressure the kernel kills a worker, not the harness
    except OSError:
        pass
    try:
        import resource

        mem = memory_mb << 20
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        mem = mem if hard < 0 or mem < hard else hard
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    except (ImportError, ValueError, OSError):
        pass
    # As in a normal interpreter (-S leaves them out).
    builtins.exit = builtins.quit = sys.exit  # type: ignore[assignment]
    fn, err = _load(r)
    send(w, ["ready", err])
    while fn is not None:
        msg = recv(r)
        if msg is None:
            os._exit(0)
        seq, args, kwargs = msg
        pid = os.fork()
        if pid == 0:
            try:
                try:
                    data = pack(["r", seq, "ok", fn(*args, **kwargs)])
                except BaseException as e:
                    data = pack(["r", seq, "exc", type(e).__name__, _text(e)])
                send(w, None, data)
            finally:
                os._exit(0)
        send(w, ["e", seq, os.waitpid(pid, 0)[1]])
    os._exit(0)


def _load(r: int) -> tuple[Callable[..., Any] | None, str | None]:
    """Run the solution's source; ``(entry point, None)`` or ``(None, why not)``."""
    code, entry_point = recv(r)
    ns: dict[str, Any] = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(code, "solution.py", "exec"), ns)
    except BaseException as e:
        return None, f"the solution raised while loading: {type(e).__name__}: {_text(e)}"
    fn = ns.get(entry_point)
    if not callable(fn):
        return None, f"the solution does not define {entry_point}()"
    return fn, None


# ----------------------------------------------------------------------------- harness
# BaseException subclasses: a test's ``except Exception`` must not swallow them.
class Deadline(BaseException):
    """The current step's deadline passed (raised from the SIGALRM handler)."""


class SolutionDied(BaseException):
    """The worker died, misbehaved or raised a non-Exception; the case is an error."""


class SolutionError(Exception):
    """The solution raised an exception that is not a builtin one (name and text kept)."""


_deadline = [float("inf")]


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    if time.monotonic() >= _deadline[0] - 0.002:  # ignore early SIGALRMs sent by others
        raise Deadline()


def arm(seconds: float) -> None:
    """Raise :class:`Deadline` in the harness after ``seconds``."""
    _deadline[0] = time.monotonic() + seconds
    signal.setitimer(signal.ITIMER_REAL, seconds)


def disarm() -> None:
    """Cancel the deadline."""
    _deadline[0] = float("inf")
    signal.setitimer(signal.ITIMER_REAL, 0)


def rebuild(name: object, text: object) -> BaseException:
    """The harness's own exception for what the worker reported the solution raised."""
    cls = getattr(builtins, str(name), None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(text)
        except Exception:
            pass
    elif isinstance(cls, type) and issubclass(cls, BaseException):
        return SolutionDied(f"the solution raised {name}")
    return SolutionError(f"{name}: {text}")


class Candidate:
    """The entry point as the tests see it: a proxy to a worker holding the solution.

    The worker is started again after a death or timeout.
    """

    def __init__(self, source: str, code: str, entry_point: str, memory_mb: int,
                 pid1: bool) -> None:
        self.source, self.code, self.entry_point = source, code, entry_point
        self.memory_mb, self.pid1 = memory_mb, pid1
        self.pid: int | None = None
        self.r: int | None = None
        self.w: int | None = None
        self.seq = 0
        self.load_error: str | None = None

    def start(self) -> None:
        """Spawn the worker and load the solution in it.

        Raises:
            SolutionDied: the solution did not load (the reason is the message).
        """
        r_req, w_req = os.pipe()
        r_res, w_res = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            self.pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", "-c", self.source, "worker", str(self.memory_mb)],
                {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, setsid=True,
                file_actions=[(os.POSIX_SPAWN_DUP2, r_req, 0), (os.POSIX_SPAWN_DUP2, w_res, 1),
                              (os.POSIX_SPAWN_DUP2, null, 2)])
        finally:
            for fd in (r_req, w_res, null):
                os.close(fd)
        self.r, self.w = r_res, w_req
        try:
            send(self.w, [self.code, self.entry_point])
            msg = recv(self.r)
        except BaseException:
            self.kill()
            raise
        if not isinstance(msg, list) or len(msg) != 2 or msg[0] != "ready" or msg[1] is not None:
            err = msg[1] if isinstance(msg, list) and len(msg) == 2 else None
            self.kill()
            raise SolutionDied(str(err or "the solution exited while loading"))

    def kill(self) -> None:
        """Kill the worker and everything it left; reap orphans."""
        for fd in (self.r, self.w):
            if fd is not None:
                os.close(fd)
        self.r = self.w = None
        if self.pid is not None:
            pid = self.pid
            _ignore_oserror(lambda: os.killpg(pid, 9), lambda: os.kill(pid, 9),
                            lambda: os.waitpid(pid, 0))
            self.pid = None
        if self.pid1:  # daemons that left the worker's session die with it (not the harness)
            _ignore_oserror(lambda: os.kill(-1, 9))
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap orphans re-parented to pid 1
                pass
        except ChildProcessError:
            pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the solution's entry point in a fork of the worker; rebuild its answer."""
        if self.load_error is not None:
            raise SolutionDied(self.load_error)
        pack([args, kwargs])  # fails here, in the test, if an argument is not plain data
        if self.pid is None:
            self.start()
        assert self.r is not None and self.w is not None
        self.seq += 1
        result: list[Any] | None = None
        end: object = None
        try:
            send(self.w, [self.seq, args, kwargs])
            while end is None:
                try:
                    msg = recv(self.r)
                except (ValueError, TypeError, IndexError, struct.error, UnicodeError):
                    raise SolutionDied(
                        "the solution's process sent a malformed message") from None
                if msg is None:
                    raise SolutionDied("the solution's process died")
                if not isinstance(msg, list) or len(msg) < 3 or msg[1] != self.seq:
                    continue
                if msg[0] == "r" and result is None:
                    result = msg
                elif msg[0] == "e":
                    end = msg[2]
        except BaseException:
            self.kill()
            raise
        if result is None:
            raise SolutionDied(f"the call ended without a result (exit status {end!r})")
        if result[2] == "ok" and len(result) == 4:
            return result[3]
        if result[2] == "exc" and len(result) == 5:
            raise rebuild(result[3], result[4])
        raise SolutionDied("malformed result")


def _ignore_oserror(*steps: Callable[[], object]) -> None:
    """Run each step, ignoring OSError (not contextlib: one import less at every start)."""
    for step in steps:
        try:  # noqa: SIM105
            step()
        except OSError:
            pass


def run_case(src: str, ns: dict[str, Any], timeout: float, probe: str | None) -> tuple[str, str]:
    """Run one step under its own deadline: ``(status, message)``.

    One deadline per case, its failure probe included: a candidate that answers wrong
    just in time and then sleeps in the probe must not get two deadlines, or it could
    overrun the host's wall budget and pass for a starved host.
    """
    end = time.monotonic() + timeout
    try:
        try:
            arm(timeout)
            exec(compile(src, "<test>", "exec"), ns)
        finally:
            disarm()
        return "passed", ""
    except Deadline:
        return "timeout", f"exceeded {timeout:g}s"
    except AssertionError as e:
        msg = str(e) or "assertion failed"
        left = end - time.monotonic()
        if probe and left > 0.001:
            try:
                try:
                    arm(left)
                    msg += "; got " + repr(eval(probe, ns))[:200]
                finally:
                    disarm()
            except BaseException:
                pass
        return "failed", msg
    except SolutionDied as e:
        return "error", str(e)
    except BaseException as e:
        return "error", f"{type(e).__name__}: {str(e)[:300]}"


def _harden() -> bool:
    """Make this process non-dumpable: ``/proc/1/mem``, ``/proc/1/fd`` and ptrace close."""
    try:
        import ctypes

        return bool(ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) == 0)  # PR_SET_DUMPABLE = 0
    except Exception:
        return False


def _own_source() -> str:
    """The program text this interpreter runs (``-c SOURCE``): the worker's too."""
    argv = sys.orig_argv
    return argv[argv.index("-c") + 1]


def harness() -> None:
    """Run the request on stdin (marshal: nonce, limits, jobs) and report on stdout.

    Writes ``NONCE start PID MODE`` first, ``NONCE JOB CASE STATUS MESSAGE`` per case
    (case ``-1``: the solution did not load) and ``NONCE done MODE`` last.
    """
    hardened = _harden()
    # As the pid namespace's init the kernel drops SIGSTOP/SIGKILL sent from inside, so
    # no candidate can stop this process (the host trusts a starvation verdict only then).
    pid1 = os.getpid() == 1
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _on_alarm)
    source = _own_source()

    req = marshal.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    nonce, timeout, memory_mb = req["nonce"], req["timeout_s"], req["memory_mb"]
    mode = "hardened" if hardened else "soft"

    def emit(*fields: object) -> None:
        line = " ".join(str(f).replace("\n", " ").replace("\r", " ") for f in fields)
        sys.stdout.write(nonce + " " + line + "\n")
        sys.stdout.flush()

    emit("start", "pid1" if pid1 else f"pid{os.getpid()}", mode)
    for j, (code, entry_point, steps) in enumerate(req["jobs"]):
        cand = Candidate(source, code, entry_point, memory_mb, pid1)
        try:
            arm(timeout)
            cand.start()
        except Deadline:
            cand.kill()
            cand.load_error = f"the solution did not load within {timeout:g}s"
        except SolutionDied as e:
            cand.load_error = str(e)
        except OSError as e:
            cand.load_error = f"cannot start the solution: {e}"
        finally:
            disarm()
        if cand.load_error:
            emit(j, -1, "error", cand.load_error)
        ns: dict[str, Any] = {"__name__": "__tests__", "__builtins__": builtins,
                              entry_point: cand}
        case = 0
        for kind, src, probe in steps:
            if kind == "setup":
                run_case(src, ns, timeout, None)
                continue
            if cand.load_error:
                status, message = "error", cand.load_error
            else:
                status, message = run_case(src, ns, timeout, probe)
            emit(j, case, status, message[:300])
            case += 1
        cand.kill()
    emit("done", mode)


def main(argv: list[str]) -> None:
    """Be the worker (``worker MEMORY_MB``) or, with no arguments, the harness."""
    sys.setrecursionlimit(4 * MAX_DEPTH)
    if argv[:1] == ["worker"]:
        worker(int(argv[1]))
    else:
        harness()


if __name__ == "__main__":
    main(sys.argv[1:])

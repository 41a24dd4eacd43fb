"""``unit_tests``: score model-written Python by hidden assert-style tests run in a sandbox.

A spec such as ``{"type": "unit_tests", "timeout_s": 2, "memory_mb": 256}`` compiles to
``verify(code, task, state) -> Score`` where the suite (``entry_point`` and ``tests``) is
``state`` or ``task.fixture``: anything with those two attributes or keys. The score is
the fraction of tests passed, with components ``pass_fraction`` and ``all_passed``.

**Splitting.** The test source is parsed once per suite (cached) into steps: each
top-level ``assert``, each ``def test_*()`` and each other statement that contains an
assert is one *case*; everything else (imports, helpers, data) is *setup*, run in
source order. Every case has its own deadline (``timeout_s``).

**Why one sandbox call per submission.** A fresh sandbox per test would cost a sandbox
start plus an interpreter start per test (about 50 ms each here); instead one call runs a
trusted *harness* that starts one interpreter for the candidate (the *worker*) and
forks it per call, so a test costs a fork (about 1 ms) and still starts from the
freshly loaded solution: no state, crash or ``exit`` leaks from one test to the next.
``benchmarks/bench_code_env.py`` measures both ways side by side.

**Why the candidate cannot fake a pass** (each is a test in
``tests/verifiers/test_unit_tests.py``):

* The tests never run in the candidate's process. They run in the harness, where the
  entry point is a proxy: each call is sent to the worker, and the result comes back as
  tagged plain data (None, bool, int, float, complex, str, bytes, tuple, list, dict,
  set) that the harness rebuilds itself. An object whose ``__eq__`` is always true, a
  patched ``assert`` or patched builtins never reach the comparison.
* The tests and their expected values never enter the worker (a fresh ``exec``'d
  interpreter that receives only the solution and each call's arguments), and the
  harness marks itself non-dumpable, so ``/proc/1/mem``, ``/proc/1/fd`` and ptrace are
  closed to the candidate; forging a result frame therefore means knowing the answer.
* Results leave through the harness's own stdout, which no worker holds (workers get
  pipes; their stdout and stderr go to ``/dev/null``), each line prefixed by a random
  nonce the host sent over stdin; the host counts only tests the harness reported.
* ``exit``, ``os._exit``, ``SystemExit``, ``KeyboardInterrupt`` or a crash end only the
  worker (or its fork); the harness records an error. The harness is the sandbox's pid 1
  (``bwrap --as-pid-1``), so ``kill -9 -1`` or ``kill(1, ...)`` cannot stop it; the
  signals it handles ignore stray senders. Workers prefer the OOM killer's attention.
* A test the harness never reported (the sandbox hit a limit) counts as failed; a
  harness that failed for no such reason, or a sandbox that could not run at all, is a
  :class:`~gymhub.types.Score` with ``error``, never a 0.

Limits: tests may call only the entry point with such plain-data arguments (no
callables), and compare its return value; mutation of arguments is not observed.
"""

from __future__ import annotations

import ast
import functools
import marshal
import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gymhub.errors import BackendError, SpecError
from gymhub.sandbox import BACKENDS, ExecResult, Limits, Sandbox, get_sandbox
from gymhub.types import Score

from .core import SpecReader, VerifyFn, verifier_kind

__all__ = [
    "Job",
    "Runner",
    "SuiteRun",
    "TestOutcome",
    "TestStep",
    "run_suites",
    "split_tests",
]

Status = Literal["passed", "failed", "timeout", "error"]
#: Longest submission accepted (characters); longer ones score 0 with a reason.
MAX_CODE_CHARS = 100_000
_SLACK_S = 5.0


class Runner(Protocol):
    """Anything that runs a command in isolation: a :class:`Sandbox` or a session."""

    def run(self, argv: Sequence[str], *, stdin: bytes | str | None = ...,
            limits: Limits | None = ...) -> ExecResult:
        """Run ``argv`` (see :meth:`gymhub.sandbox.Sandbox.run`)."""


@dataclass(frozen=True)
class TestStep:
    """One top-level piece of a test source.

    Attributes:
        kind: ``case`` (scored) or ``setup`` (run for its side effects).
        name: a short label (the source's first line, or ``test_x``).
        src: Python source the harness executes.
        probe: for ``assert A == B`` cases, ``A``: shown as "got" when the case fails.
    """

    kind: Literal["setup", "case"]
    name: str
    src: str
    probe: str | None = None


@dataclass(frozen=True)
class TestOutcome:
    """What happened to one case: ``passed``, ``failed``, ``timeout`` or ``error``."""

    name: str
    status: Status
    message: str = ""

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"name": self.name, "status": self.status, "message": self.message}


@dataclass(frozen=True)
class Job:
    """One candidate solution against one suite."""

    code: Any
    entry_point: str
    steps: tuple[TestStep, ...]


@dataclass
class SuiteRun:
    """The result of one job.

    Attributes:
        outcomes: one per case, in source order.
        reason: why the candidate scored as it did when it did not run normally
            (syntax error, not loadable, sandbox limit); ``None`` otherwise.
        error: the verifier could not judge (sandbox or harness failure).
        wall_ms: wall time of the sandbox call that ran it.
        backend: the sandbox backend used.
        hardened: the harness made itself non-dumpable (``/proc`` closed to the candidate).
    """

    outcomes: list[TestOutcome] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None
    wall_ms: float = 0.0
    backend: str = ""
    hardened: bool = False

    @property
    def passed(self) -> int:
        """Number of cases passed."""
        return sum(o.status == "passed" for o in self.outcomes)


# ------------------------------------------------------------------ sandbox-side code
# Shipped as source (``python3 -I -S -c``): stdlib only, no gymhub inside the sandbox.
# _COMMON: the plain-data codec and length-prefixed frames, used by harness and worker.
_COMMON = r"""
import builtins, os, struct, sys

MAX_DEPTH = 1000
LIMIT = 16 << 20
sys.setrecursionlimit(4 * MAX_DEPTH)
_SEQS = ((tuple, b"t"), (list, b"l"), (frozenset, b"F"), (set, b"S"))
_MAKE = {b"t": tuple, b"l": list, b"F": frozenset, b"S": set}

def enc(v, out, d=0):
    # Appends the tagged bytes of a plain-data value to the list ``out``.
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
    elif isinstance(v, (bytes, bytearray)):
        out.append(b"y%d:" % len(v) + bytes(v))
    elif isinstance(v, dict):
        out.append(b"d%d:" % len(v))
        for k, x in list(dict.items(v)):
            enc(k, out, d + 1)
            enc(x, out, d + 1)
    else:
        for t, tag in _SEQS:
            if isinstance(v, t):
                items = list(v)
                out.append(tag + b"%d:" % len(items))
                for x in items:
                    enc(x, out, d + 1)
                return
        raise TypeError("a value of type %s cannot cross the test boundary (plain data only)"
                        % type(v).__name__)

def _num(b, i, end):
    j = b.index(end, i)
    return b[i:j], j + 1

def dec(b, i=0, d=0):
    # Decodes one value at ``b[i:]``; returns (value, next index). Builds only plain data.
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
        return dict(zip(items[::2], items[1::2])), i
    if tag in _MAKE:
        return _MAKE[tag](items), i
    raise ValueError("malformed value")

def pack(v):
    out = []
    enc(v, out)
    return b"".join(out)

def unpack(b):
    v, i = dec(b)
    if i != len(b):
        raise ValueError("trailing bytes")
    return v

def send(fd, v, data=None):
    data = pack(v) if data is None else data
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]

def readn(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return buf

def recv(fd):
    # One frame, or None at end of file; a frame over LIMIT is refused.
    head = readn(fd, 4)
    if head is None:
        return None
    n = struct.unpack(">I", head)[0]
    if n > LIMIT:
        raise ValueError("message too large")
    body = readn(fd, n)
    return None if body is None else unpack(body)
"""

# _WORKER: loads the solution once, then forks per call; untrusted once the solution ran.
_WORKER = r"""
R, W = os.dup(0), os.dup(1)
_nul = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2):
    os.dup2(_nul, _fd)
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")  # under memory pressure the kernel kills a worker, not the harness
except OSError:
    pass
try:
    import resource
    _mem = int(sys.argv[1]) << 20
    _hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    _mem = _mem if _hard < 0 or _mem < _hard else _hard
    resource.setrlimit(resource.RLIMIT_AS, (_mem, _mem))
except (ImportError, ValueError, OSError):
    pass

def _text(e):
    try:
        return str(e)[:300]
    except BaseException:
        return "?"

builtins.exit = builtins.quit = sys.exit  # as in a normal interpreter (-S leaves them out)

def _load():
    code, entry_point = recv(R)
    ns = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(code, "solution.py", "exec"), ns)
    except BaseException as e:
        return None, "the solution raised while loading: %s: %s" % (type(e).__name__, _text(e))
    fn = ns.get(entry_point)
    if not callable(fn):
        return None, "the solution does not define %s()" % entry_point
    return fn, None

FN, ERR = _load()
send(W, ["ready", ERR])
while FN is not None:
    msg = recv(R)
    if msg is None:
        os._exit(0)
    seq, args, kwargs = msg
    pid = os.fork()
    if pid == 0:
        try:
            try:
                data = pack(["r", seq, "ok", FN(*args, **kwargs)])
            except BaseException as e:
                data = pack(["r", seq, "exc", type(e).__name__, _text(e)])
            send(W, None, data)
        finally:
            os._exit(0)
    send(W, ["e", seq, os.waitpid(pid, 0)[1]])
os._exit(0)
"""

# _HARNESS: the trusted sandbox pid 1 that runs the tests and reports to the host.
_HARNESS = r"""
import _signal as signal, marshal, time

def _harden():
    try:
        import ctypes
        return ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE = 0
    except Exception:
        return False

HARDENED = _harden()
for _n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE"):
    signal.signal(getattr(signal, _n), signal.SIG_IGN)

# BaseException subclasses: a test's ``except Exception`` must not swallow them.
class Deadline(BaseException):
    pass

class SolutionDied(BaseException):
    pass

class SolutionError(Exception):
    pass

_deadline = [float("inf")]

def _on_alarm(signum, frame):
    if time.monotonic() >= _deadline[0] - 0.002:  # ignore early SIGALRMs sent by others
        raise Deadline()

signal.signal(signal.SIGALRM, _on_alarm)

def arm(seconds):
    _deadline[0] = time.monotonic() + seconds
    signal.setitimer(signal.ITIMER_REAL, seconds)

def disarm():
    _deadline[0] = float("inf")
    signal.setitimer(signal.ITIMER_REAL, 0)

def rebuild(name, text):
    cls = getattr(builtins, str(name), None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(text)
        except Exception:
            pass
    elif isinstance(cls, type) and issubclass(cls, BaseException):
        return SolutionDied("the solution raised %s" % name)
    return SolutionError("%s: %s" % (name, text))

class Candidate:
    # The worker holding the loaded solution; started again after a death or timeout.

    def __init__(self, code, entry_point, memory_mb):
        self.code, self.entry_point, self.memory_mb = code, entry_point, memory_mb
        self.pid = self.r = self.w = None
        self.seq, self.load_error = 0, None

    def start(self):
        r_req, w_req = os.pipe()
        r_res, w_res = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            self.pid = os.posix_spawn(
                sys.executable, [sys.executable, "-I", "-S", "-c", WORKER, str(self.memory_mb)],
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

    def kill(self):
        for fd in (self.r, self.w):
            if fd is not None:
                os.close(fd)
        self.r = self.w = None
        if self.pid is not None:
            for fn in (lambda: os.killpg(self.pid, 9), lambda: os.kill(self.pid, 9),
                       lambda: os.waitpid(self.pid, 0)):
                try:
                    fn()
                except OSError:
                    pass
            self.pid = None
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap orphans re-parented to pid 1
                pass
        except ChildProcessError:
            pass

    def __call__(self, *args, **kwargs):
        if self.load_error is not None:
            raise SolutionDied(self.load_error)
        pack([args, kwargs])  # fails here, in the test, if an argument is not plain data
        if self.pid is None:
            self.start()
        self.seq += 1
        result = end = None
        try:
            send(self.w, [self.seq, args, kwargs])
            while end is None:
                try:
                    msg = recv(self.r)
                except (ValueError, TypeError, IndexError, struct.error, UnicodeError):
                    raise SolutionDied("the solution's process sent a malformed message")
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
            raise SolutionDied("the call ended without a result (exit status %r)" % (end,))
        if result[2] == "ok" and len(result) == 4:
            return result[3]
        if result[2] == "exc" and len(result) == 5:
            raise rebuild(result[3], result[4])
        raise SolutionDied("malformed result")

def run_case(src, ns, timeout, probe):
    try:
        try:
            arm(timeout)
            exec(compile(src, "<test>", "exec"), ns)
        finally:
            disarm()
        return "passed", ""
    except Deadline:
        return "timeout", "exceeded %gs" % timeout
    except AssertionError as e:
        msg = str(e) or "assertion failed"
        if probe:
            try:
                try:
                    arm(timeout)
                    msg += "; got %s" % repr(eval(probe, ns))[:200]
                finally:
                    disarm()
            except BaseException:
                pass
        return "failed", msg
    except SolutionDied as e:
        return "error", str(e)
    except BaseException as e:
        return "error", "%s: %s" % (type(e).__name__, str(e)[:300])

def main():
    req = marshal.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    nonce, timeout, memory_mb = req["nonce"], req["timeout_s"], req["memory_mb"]

    def emit(*fields):
        line = " ".join(str(f).replace("\n", " ").replace("\r", " ") for f in fields)
        sys.stdout.write(nonce + " " + line + "\n")
        sys.stdout.flush()

    for j, (code, entry_point, steps) in enumerate(req["jobs"]):
        cand = Candidate(code, entry_point, memory_mb)
        try:
            arm(timeout)
            cand.start()
        except Deadline:
            cand.kill()
            cand.load_error = "the solution did not load within %gs" % timeout
        except SolutionDied as e:
            cand.load_error = str(e)
        except OSError as e:
            cand.load_error = "cannot start the solution: %s" % e
        finally:
            disarm()
        if cand.load_error:
            emit(j, -1, "error", cand.load_error)
        ns = {"__name__": "__tests__", "__builtins__": builtins, entry_point: cand}
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
    emit("done", "hardened" if HARDENED else "soft")

main()
"""

#: The harness program: common code, the worker's source as a constant, the harness.
HARNESS_SOURCE = _COMMON + f"\nWORKER = {_COMMON + _WORKER!r}\n" + _HARNESS


# ----------------------------------------------------------------------------- splitting
@functools.lru_cache(maxsize=1024)
def split_tests(source: str) -> tuple[TestStep, ...]:
    """Split assert-style test source into setup steps and individually scored cases.

    Raises:
        ValueError: the source does not parse or contains no test case.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"tests do not parse: line {exc.lineno}: {exc.msg}") from None
    lines = source.splitlines()
    steps: list[TestStep] = []
    for node in tree.body:
        first = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""
        label = f"line {node.lineno}: {first[:80]}"
        src = ast.unparse(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            steps.append(TestStep("setup", label, src))
            if node.name.startswith("test") and not node.args.args:
                steps.append(TestStep("case", node.name, f"{node.name}()"))
        elif isinstance(node, ast.Assert):
            probe = None
            test = node.test
            if (isinstance(test, ast.Compare) and len(test.ops) == 1
                    and isinstance(test.ops[0], ast.Eq)):
                probe = ast.unparse(test.left)
            steps.append(TestStep("case", label, src, probe))
        elif any(isinstance(n, ast.Assert) for n in ast.walk(node)):
            steps.append(TestStep("case", label, src))
        else:
            steps.append(TestStep("setup", label, src))
    if not any(s.kind == "case" for s in steps):
        raise ValueError("tests contain no assert statement or test_* function")
    return tuple(steps)


def _precheck(code: Any, max_chars: int) -> str | None:
    """Why ``code`` cannot be run at all (checked on the host, nothing executed)."""
    if not isinstance(code, str):
        return f"the submission must be Python source (a string), got {type(code).__name__}"
    if not code.strip():
        return "the submission is empty"
    if len(code) > max_chars:
        return f"the submission is {len(code):,} characters; the limit is {max_chars:,}"
    try:
        compile(code, "solution.py", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"syntax error: line {exc.lineno}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return f"the submission does not compile: {type(exc).__name__}: {exc}"
    return None


# ------------------------------------------------------------------------------- running
def run_suites(runner: Runner, jobs: Sequence[Job], *, timeout_s: float = 2.0,
               memory_mb: int = 256, max_code_chars: int = MAX_CODE_CHARS) -> list[SuiteRun]:
    """Run each job's cases against its candidate in one sandbox call (batched).

    Jobs whose code is not runnable (not a string, empty, a syntax error) get a
    ``reason`` and all cases failed without touching the sandbox.

    Raises:
        BackendError: the runner could not run anything.
    """
    runs: list[SuiteRun] = []
    payload: list[tuple[str, str, list[tuple[str, str, str | None]]]] = []
    todo: list[int] = []
    budget = _SLACK_S
    for i, job in enumerate(jobs):
        cases = [s for s in job.steps if s.kind == "case"]
        problem = _precheck(job.code, max_code_chars)
        if problem is not None:
            runs.append(SuiteRun([TestOutcome(c.name, "failed", "not run") for c in cases],
                                 reason=problem))
            continue
        runs.append(SuiteRun())
        todo.append(i)
        budget += timeout_s * (2 + len(job.steps))
        payload.append((job.code, job.entry_point,
                        [(s.kind, s.src, s.probe) for s in job.steps]))
    if not todo:
        return runs
    nonce = secrets.token_hex(16)
    request = marshal.dumps({"nonce": nonce, "timeout_s": float(timeout_s),
                             "memory_mb": int(memory_mb), "jobs": payload})
    limits = Limits(wall_s=budget, cpu_s=budget, memory_mb=memory_mb + 128, pids=64,
                    output_bytes=4 << 20)
    result = runner.run(["python3", "-I", "-S", "-c", HARNESS_SOURCE], stdin=request,
                        limits=limits)
    reports, done, hardened = _parse(result.stdout, nonce)
    cause = _cause(result, done)
    for slot, i in enumerate(todo):
        run = runs[i]
        run.wall_ms, run.backend, run.hardened = result.wall_ms, result.backend, hardened
        got = reports.get(slot, {})
        for k, case in enumerate(s for s in jobs[i].steps if s.kind == "case"):
            rep = got.get(k)
            if rep is None:
                run.outcomes.append(TestOutcome(case.name, "error", f"not run: {cause}"))
            else:
                run.outcomes.append(TestOutcome(case.name, rep[0], rep[1]))
        if not done and cause.startswith("harness"):
            run.error = cause
        elif not done:
            run.reason = f"the sandbox stopped the run: {cause}"
        elif reports.get(slot, {}).get(-1):
            run.reason = reports[slot][-1][1]
    return runs


_STATUSES = frozenset({"passed", "failed", "timeout", "error"})


def _parse(stdout: bytes, nonce: str) -> tuple[dict[int, dict[int, tuple[Status, str]]], bool,
                                                 bool]:
    """Per job, per case: (status, message); whether the harness finished; hardened.

    The harness writes ``NONCE JOB CASE STATUS MESSAGE`` lines and ``NONCE done MODE``
    last; lines without the nonce are not the harness's and are ignored.
    """
    prefix = nonce + " "
    reports: dict[int, dict[int, tuple[Status, str]]] = {}
    done = hardened = False
    for line in stdout.decode("utf-8", "replace").split("\n"):
        if not line.startswith(prefix):
            continue
        fields = line[len(prefix):].split(" ", 3)
        if fields[0] == "done":
            done, hardened = True, fields[1:] == ["hardened"]
            continue
        if len(fields) < 3 or fields[2] not in _STATUSES:
            continue
        try:
            job, case = int(fields[0]), int(fields[1])
        except ValueError:
            continue
        status: Status = fields[2]  # type: ignore[assignment]
        reports.setdefault(job, {})[case] = (status, fields[3][:500] if len(fields) > 3 else "")
    return reports, done, hardened


def _cause(result: ExecResult, done: bool) -> str:
    """Why unreported cases were not run.

    A sandbox limit is the candidate's doing, and so is a harness killed by a signal: in
    the sandbox only its own processes can signal it (the sandbox's kills set ``limit``),
    and where the harness is not pid 1 (the docker backend) ``kill -9 -1`` reaches it.
    Anything else (a traceback, a launcher failure) is the harness's own failure, an
    error for the learner to mask. The candidate gains nothing from either: only reported
    passes count.
    """
    if done:
        return "the harness skipped it"
    if result.oom_killed or result.limit is not None or result.pids_exhausted:
        what = "oom" if result.oom_killed and result.limit is None else result.limit
        return f"sandbox limit: {what or 'process count'}"
    if result.signal is not None:
        return f"the solution killed the harness (signal {result.signal})"
    tail = result.stderr_text.strip().splitlines()[-3:]
    return f"harness failed (exit {result.exit_code}): " + " | ".join(tail)


# ------------------------------------------------------------------------------ verifier
def _suite_of(task: Any, state: Any) -> tuple[str, str]:
    """``(entry_point, tests)`` from ``state`` or ``task.fixture`` (attributes or keys)."""
    for source in (state, getattr(task, "fixture", None), task):
        if source is None:
            continue
        if isinstance(source, Mapping):
            ep, tests = source.get("entry_point"), source.get("tests")
        else:
            ep, tests = getattr(source, "entry_point", None), getattr(source, "tests", None)
        if isinstance(ep, str) and isinstance(tests, str):
            return ep, tests
    raise ValueError("no test suite: pass state or a task whose fixture has entry_point and "
                     "tests")


_sandboxes: dict[str | None, Sandbox] = {}
_sandbox_lock = threading.Lock()


def _sandbox(backend: str | None) -> Sandbox:
    """One sandbox object per backend name per process (they are thread-safe)."""
    with _sandbox_lock:
        if backend not in _sandboxes:
            _sandboxes[backend] = get_sandbox(backend)
        return _sandboxes[backend]


def score_run(run: SuiteRun, verifier: str = "") -> Score:
    """The :class:`Score` of one :class:`SuiteRun`."""
    if run.error is not None:
        return Score.failed(run.error, verifier, tests=[o.to_dict() for o in run.outcomes])
    total = len(run.outcomes)
    passed = run.passed
    value = passed / total if total else 0.0
    details: dict[str, Any] = {
        "passed": passed, "total": total, "tests": [o.to_dict() for o in run.outcomes],
        "backend": run.backend, "wall_ms": round(run.wall_ms, 1), "hardened": run.hardened,
    }
    if run.reason:
        details["reason"] = run.reason
    elif passed == 0:
        details["reason"] = "no test passed"
    return Score(value=value, components={"pass_fraction": value,
                                          "all_passed": float(total > 0 and passed == total)},
                 details=details, verifier=verifier)


@verifier_kind("unit_tests")
def build_unit_tests(spec: SpecReader) -> VerifyFn:
    """Compile a ``unit_tests`` spec.

    Fields:
        timeout_s: per-test deadline in seconds (default 2).
        memory_mb: memory of the candidate's process (default 256).
        backend: sandbox backend (default: ``$GYMHUB_SANDBOX_BACKEND`` or the best found).
        max_code_chars: longest submission accepted (default 100,000).
    """
    timeout_s = spec.number("timeout_s", 2.0, lo=0.05, hi=120.0)
    memory_mb = spec.integer("memory_mb", 256, lo=32)
    backend = spec.get("backend", (str, type(None)), None)
    if backend is not None and backend not in BACKENDS:
        raise SpecError(spec._field("backend"), f"must be one of {sorted(BACKENDS)}")
    max_chars = spec.integer("max_code_chars", MAX_CODE_CHARS, lo=1)

    def verify(submission: Any, task: Any, state: Any) -> Score:
        try:
            entry_point, tests = _suite_of(task, state)
            steps = split_tests(tests)
        except ValueError as exc:
            return Score.failed(f"invalid test suite: {exc}")
        job = Job(submission, entry_point, steps)
        if _precheck(submission, max_chars) is None:
            try:
                runner: Runner = _sandbox(backend)
                run = run_suites(runner, [job], timeout_s=timeout_s, memory_mb=memory_mb,
                                 max_code_chars=max_chars)[0]
            except BackendError as exc:
                return Score.failed(f"sandbox unusable: {exc}")
        else:
            run = run_suites(_NO_RUNNER, [job], max_code_chars=max_chars)[0]
        return score_run(run)

    return verify


class _NoRunner:
    """A runner for jobs that never reach the sandbox (rejected by the precheck)."""

    def run(self, argv: Sequence[str], *, stdin: bytes | str | None = None,
            limits: Limits | None = None) -> ExecResult:
        raise BackendError("no sandbox needed for rejected code")


_NO_RUNNER = _NoRunner()

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
  harness that failed for no such reason, a harness starved by an overloaded host, or a
  sandbox that could not run at all, is a :class:`~gymhub.types.Score` with ``error``,
  never a 0 (see :func:`_cause` for why a candidate cannot pass for a starved host).

Limits: tests may call only the entry point with such plain-data arguments (no
callables), and compare its return value; mutation of arguments is not observed.
"""

from __future__ import annotations

import ast
import functools
import importlib.resources
import marshal
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from gymhub.errors import BackendError, SpecError
from gymhub.sandbox import BACKENDS, ExecResult, Limits, shared_sandbox
from gymhub.sandbox.base import LIMIT_WALL
from gymhub.types import Score

from .core import SpecReader, VerifyFn, verifier_kind
from .golden import GoldenCase

__all__ = [
    "Job",
    "Runner",
    "SuiteRun",
    "TestOutcome",
    "TestStep",
    "UnitTestSettings",
    "harness_source",
    "run_suites",
    "split_tests",
    "unit_test_settings",
]

Status = Literal["passed", "failed", "timeout", "error"]
#: Who a stopped run is blamed on: the candidate (a 0) or the infrastructure (an error).
Blame = Literal["candidate", "infra"]
#: Longest submission accepted (characters); longer ones score 0 with a reason.
MAX_CODE_CHARS = 100_000
_SLACK_S = 5.0
#: A run stopped by its wall budget while its processes used less CPU than this share
#: of its wall time was starved (an overloaded host), not busy (see :func:`_cause`).
_STARVED_CPU_RATIO = 0.25


@runtime_checkable
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

    __test__ = False  # not a pytest class

    kind: Literal["setup", "case"]
    name: str
    src: str
    probe: str | None = None


@dataclass(frozen=True)
class TestOutcome:
    """What happened to one case: ``passed``, ``failed``, ``timeout`` or ``error``."""

    __test__ = False  # not a pytest class

    name: str
    status: Status
    message: str = ""

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"name": self.name, "status": self.status, "message": self.message}


@dataclass(frozen=True)
class UnitTestSettings:
    """The parsed fields of a ``unit_tests`` spec (see :func:`build_unit_tests`).

    One parser for the verifier and for ``code-v0``'s ``run_examples``, so the examples
    run under exactly the limits the submission will be scored with and the defaults
    live in one place.
    """

    timeout_s: float = 2.0
    memory_mb: int = 256
    backend: str | None = None
    max_code_chars: int = MAX_CODE_CHARS


def _read_settings(spec: SpecReader) -> UnitTestSettings:
    """Read and validate the settings fields of ``spec``.

    Raises:
        SpecError: a field is of the wrong type or out of range (named by its path).
    """
    default = UnitTestSettings()
    timeout_s = spec.number("timeout_s", default.timeout_s, lo=0.05, hi=120.0)
    memory_mb = spec.integer("memory_mb", default.memory_mb, lo=32)
    backend = spec.get("backend", (str, type(None)), None)
    if backend is not None and backend not in BACKENDS:
        raise SpecError(spec._field("backend"), f"must be one of {sorted(BACKENDS)}")
    max_chars = spec.integer("max_code_chars", default.max_code_chars, lo=1)
    return UnitTestSettings(timeout_s, memory_mb, backend, max_chars)


def unit_test_settings(spec: Mapping[str, Any]) -> UnitTestSettings:
    """Parse a whole ``unit_tests`` spec's settings, validated exactly as by compiling it.

    Raises:
        SpecError: an invalid or unknown field, named by its path.
    """
    reader = SpecReader(spec)
    settings = _read_settings(reader)
    reader.finish()
    return settings


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


@functools.cache
def harness_source() -> str:
    """The text of :mod:`gymhub.verifiers.unit_tests_harness`, as the sandbox runs it.

    The harness is an ordinary module (linted and type-checked like the rest) that is
    never imported inside the sandbox: its file's text is passed as ``python3 -I -S -c``,
    so the sandbox needs the standard library only and can load nothing else of gymhub.
    Read through :mod:`importlib.resources`, so it works from any installed layout.
    """
    return (importlib.resources.files(__package__).joinpath("unit_tests_harness.py")
            .read_text(encoding="utf-8"))


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
def run_suites(runner: Runner | Callable[[], Runner], jobs: Sequence[Job], *,
               timeout_s: float = 2.0, memory_mb: int = 256,
               max_code_chars: int = MAX_CODE_CHARS) -> list[SuiteRun]:
    """Run each job's cases against its candidate in one sandbox call (batched).

    Jobs whose code is not runnable (not a string, empty, a syntax error) get a
    ``reason`` and all cases failed without touching the sandbox.

    Args:
        runner: a :class:`Runner`, or a zero-argument factory of one. The factory is
            called only when some job passes the precheck, so a batch of rejected code
            never builds (or fails to build) a sandbox, and the precheck runs once.
        jobs: candidates and their suites.
        timeout_s: each case's deadline (also the candidate's load deadline).
        memory_mb: memory of the candidate's process.
        max_code_chars: longest submission accepted.

    Raises:
        BackendError: the runner could not be made or could not run anything.
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
        # Load, one deadline per step (a case's probe shares its case's deadline) and
        # one spare: a candidate cannot make a pid-1 harness overrun this (see _cause).
        budget += timeout_s * (2 + len(job.steps))
        payload.append((job.code, job.entry_point,
                        [(s.kind, s.src, s.probe) for s in job.steps]))
    if not todo:
        return runs
    if not isinstance(runner, Runner):
        runner = runner()
    nonce = secrets.token_hex(16)
    request = marshal.dumps({"nonce": nonce, "timeout_s": float(timeout_s),
                             "memory_mb": int(memory_mb), "jobs": payload})
    limits = Limits(wall_s=budget, cpu_s=budget, memory_mb=memory_mb + 128, pids=64,
                    output_bytes=4 << 20)
    result = runner.run(["python3", "-I", "-S", "-c", harness_source()], stdin=request,
                        limits=limits)
    report = _parse(result.stdout, nonce)
    blame, cause = _cause(result, report)
    for slot, i in enumerate(todo):
        run = runs[i]
        run.wall_ms, run.backend, run.hardened = result.wall_ms, result.backend, report.hardened
        got = report.cases.get(slot, {})
        for k, case in enumerate(s for s in jobs[i].steps if s.kind == "case"):
            rep = got.get(k)
            if rep is None:
                run.outcomes.append(TestOutcome(case.name, "error", f"not run: {cause}"))
            else:
                run.outcomes.append(TestOutcome(case.name, rep[0], rep[1]))
        if not report.done and blame == "infra":
            run.error = cause
        elif not report.done:
            run.reason = f"the sandbox stopped the run: {cause}"
        elif got.get(-1):
            run.reason = got[-1][1]
    return runs


_STATUSES = frozenset({"passed", "failed", "timeout", "error"})


@dataclass
class _Report:
    """What the harness reported (only lines carrying the nonce count).

    Attributes:
        cases: per job, per case: ``(status, message)``; case ``-1`` is a load error.
        done: the harness finished every job.
        hardened: the harness made itself non-dumpable (said at the end).
        stop_proof: the harness said at its start that it is the sandbox's pid 1 and
            non-dumpable, so no candidate process can stop (``SIGSTOP``), trace or
            kill it: only the kernel's scheduler or the sandbox can delay it.
    """

    cases: dict[int, dict[int, tuple[Status, str]]] = field(default_factory=dict)
    done: bool = False
    hardened: bool = False
    stop_proof: bool = False


def _parse(stdout: bytes, nonce: str) -> _Report:
    """Read the harness's report from its stdout.

    The harness writes ``NONCE start PID1 MODE`` first, ``NONCE JOB CASE STATUS
    MESSAGE`` lines, and ``NONCE done MODE`` last; lines without the nonce are not the
    harness's and are ignored.
    """
    prefix = nonce + " "
    report = _Report()
    for line in stdout.decode("utf-8", "replace").split("\n"):
        if not line.startswith(prefix):
            continue
        fields = line[len(prefix):].split(" ", 3)
        if fields[0] == "done":
            report.done, report.hardened = True, fields[1:] == ["hardened"]
            continue
        if fields[0] == "start":
            report.stop_proof = fields[1:] == ["pid1", "hardened"]
            continue
        if len(fields) < 3 or fields[2] not in _STATUSES:
            continue
        try:
            job, case = int(fields[0]), int(fields[1])
        except ValueError:
            continue
        status: Status = fields[2]  # type: ignore[assignment]
        report.cases.setdefault(job, {})[case] = (
            status, fields[3][:500] if len(fields) > 3 else "")
    return report


def _cause(result: ExecResult, report: _Report) -> tuple[Blame, str]:
    """Why unreported cases were not run, and whom to blame: ``candidate`` or ``infra``.

    ``candidate`` makes the unreported cases failures (a 0 or a partial score);
    ``infra`` makes the run a :class:`Score` with ``error``, which the learner masks.
    The rule must never let a hostile candidate turn its failure into an ``infra``
    (a masked trajectory instead of a 0), so ``infra`` needs evidence it cannot forge:

    * A sandbox limit (memory, output, CPU time, process count) is the candidate's
      doing: the harness itself stays far inside them.
    * A harness killed by a signal is the candidate's doing: in the sandbox only its
      own processes can signal it (the sandbox's kills set ``limit``), and where the
      harness is not pid 1 (the docker backend) ``kill -9 -1`` reaches it.
    * The whole-run wall budget (:data:`_SLACK_S` plus ``timeout_s`` per step, per job,
      plus two) is ``infra`` only when all of these hold:

      - the harness said, on its own nonce-tagged stdout before any candidate ran,
        that it is the sandbox's pid 1 and non-dumpable. Then no candidate process can
        stop it: the kernel drops ``SIGSTOP``/``SIGKILL`` sent to a pid namespace's
        init from inside, and ptrace is refused. Without that (docker, local) a
        candidate could ``SIGSTOP`` the harness and sit out the budget at zero CPU, so
        there the stop stays the candidate's;
      - a pid-1 harness cannot be delayed by a *sleeping* candidate: every load, setup
        step and case (its failure probe included) has its own wall-clock deadline,
        and the budget covers all of them plus a spare and the slack. Overrunning it
        therefore needs the harness itself to be slow;
      - a *busy* candidate (threads, daemons or forks burning CPU to slow the harness)
        shows up in the run's CPU time, so ``cpu_ms`` must be below
        :data:`_STARVED_CPU_RATIO` of ``wall_ms``: the run got less than a quarter of
        a core on average, i.e. it was waiting for a CPU the host did not give it.

      What is left (a slow harness that was neither stoppable nor busy) is the host's
      doing, and scoring it 0 would punish correct code for the machine's load.
    * Anything else without a ``done`` line (a traceback, a launcher failure) is the
      harness's own failure: ``infra``. The candidate gains nothing from any of these:
      only reported passes count.
    """
    if report.done:
        return "candidate", "the harness skipped it"
    if result.oom_killed or result.pids_exhausted or (
            result.limit is not None and result.limit != LIMIT_WALL):
        what = "oom" if result.oom_killed and result.limit is None else result.limit
        return "candidate", f"sandbox limit: {what or 'process count'}"
    if result.limit == LIMIT_WALL:
        starved = result.cpu_ms < _STARVED_CPU_RATIO * result.wall_ms
        if report.stop_proof and starved:
            return "infra", (
                f"the host starved the run: it hit its wall-time budget having used "
                f"{result.cpu_ms / 1000:.1f} s of CPU in {result.wall_ms / 1000:.1f} s")
        return "candidate", f"sandbox limit: {LIMIT_WALL}"
    if result.signal is not None:
        return "candidate", f"the solution killed the harness (signal {result.signal})"
    tail = result.stderr_text.strip().splitlines()[-3:]
    return "infra", f"harness failed (exit {result.exit_code}): " + " | ".join(tail)


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


@verifier_kind("unit_tests", depends_on=("gymhub.verifiers.unit_tests_harness",))
def build_unit_tests(spec: SpecReader) -> VerifyFn:
    """Compile a ``unit_tests`` spec.

    Fields:
        timeout_s: per-test deadline in seconds (default 2).
        memory_mb: memory of the candidate's process (default 256).
        backend: sandbox backend (default: ``$GYMHUB_SANDBOX_BACKEND`` or the best found).
        max_code_chars: longest submission accepted (default 100,000).

    The sandbox is the process-wide :func:`~gymhub.sandbox.shared_sandbox`, fetched
    only when the submission passes the host-side precheck.
    """
    settings = _read_settings(spec)

    def verify(submission: Any, task: Any, state: Any) -> Score:
        try:
            entry_point, tests = _suite_of(task, state)
            steps = split_tests(tests)
        except ValueError as exc:
            return Score.failed(f"invalid test suite: {exc}")
        try:
            run = run_suites(lambda: shared_sandbox(settings.backend),
                             [Job(submission, entry_point, steps)],
                             timeout_s=settings.timeout_s, memory_mb=settings.memory_mb,
                             max_code_chars=settings.max_code_chars)[0]
        except BackendError as exc:
            return Score.failed(f"sandbox unusable: {exc}")
        return score_run(run)

    return verify


_UT = {"type": "unit_tests", "timeout_s": 2.0}
_ADD = {"entry_point": "add",
        "tests": "assert add(2, 3) == 5\nassert add(-4, -4) == -8\nassert add(10, 7) == 17\n"}
_SANDBOX = ("sandbox",)

GOLDEN = [
    GoldenCase("pass", _UT, "def add(a, b):\n    return a + b\n", fixture=_ADD, needs=_SANDBOX),
    GoldenCase("fail", _UT, "def add(a, b):\n    return 5\n", fixture=_ADD, needs=_SANDBOX,
               note="a constant passes one test of three"),
    GoldenCase("fail", _UT, "import os\ndef add(a, b):\n    os._exit(0)\n", fixture=_ADD,
               needs=_SANDBOX, note="exiting early is not a pass"),
    GoldenCase("malformed", _UT, "def add(a, b) return a + b", fixture=_ADD,
               note="a syntax error, rejected on the host"),
    GoldenCase("malformed", _UT, {"code": "def add(a, b): ..."}, fixture=_ADD,
               note="not source text"),
    GoldenCase("error", _UT, "def add(a, b):\n    return a + b\n",
               fixture={"entry_point": "add", "tests": "assert ("},
               note="a suite that does not parse cannot judge anyone"),
]

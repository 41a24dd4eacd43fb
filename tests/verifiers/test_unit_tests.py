"""unit_tests verifier: splitting, scoring, isolation, and every forgery attack we know of."""

from __future__ import annotations

import dataclasses
import marshal
import math
import sys
import textwrap
from typing import Any

import pytest

from gymhub.errors import BackendError, SpecError
from gymhub.sandbox import ExecResult, available_backends, shared_sandbox
from gymhub.verifiers import compile
from gymhub.verifiers import unit_tests as ut
from gymhub.verifiers import unit_tests_harness as harness

pytestmark = pytest.mark.skipif(not available_backends(), reason="no sandbox backend here")

# A suite no constant answer can pass, so a forged "ok True/1/None" scores 0.
ADD = {
    "entry_point": "add",
    "tests": "assert add(2, 3) == 5\nassert add(-4, -4) == -8\nassert add(10, 7) == 17\n",
}
GOLD = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def verify() -> Any:
    return compile({"type": "unit_tests", "timeout_s": 1.0})


def score(verify: Any, code: Any, suite: dict[str, str] = ADD) -> Any:
    return verify(textwrap.dedent(code) if isinstance(code, str) else code, None, suite)


# --------------------------------------------------------------------------- splitting
def test_split_cases_setup_and_test_functions() -> None:
    steps = ut.split_tests(textwrap.dedent("""
        import math
        DATA = [1, 2]
        assert f(1) == 2
        for x in DATA:
            assert f(x) > 0
        def helper(): return 3
        def test_thing():
            assert f(helper()) == 4
    """))
    kinds = [(s.kind, s.name.split(":")[0]) for s in steps]
    assert [k for k, _ in kinds] == ["setup", "setup", "case", "case", "setup", "setup", "case"]
    assert steps[2].probe == "f(1)"
    assert steps[-1].src == "test_thing()"


@pytest.mark.parametrize("bad", ["assert (", "x = 1\n", ""])
def test_split_rejects_unparsable_or_empty(bad: str) -> None:
    with pytest.raises(ValueError):
        ut.split_tests(bad)


def test_codec_round_trips_plain_data_and_rejects_junk() -> None:
    # The harness is an ordinary module: importing it on the host runs nothing.
    limit = sys.getrecursionlimit()
    ns = vars(harness)
    assert sys.getrecursionlimit() == limit
    values = [None, True, False, 0, -(10**50), 2.5, -0.0, float("inf"), 1 + 2j, "h\udcffé",
              b"\x00", (1, [2, {3: "x", (4,): frozenset({5})}]), set(), frozenset(), {}, ()]
    for v in values:
        back = ns["unpack"](ns["pack"](v))
        assert back == v and type(back) is type(v)
    assert math.isnan(ns["unpack"](ns["pack"](float("nan"))))
    # Malformed frames raise what the harness catches as "malformed message" (ValueError
    # for bad structure, TypeError for an unhashable set member), never a value.
    junk = {b"": ValueError, b"X": ValueError, b"i12": ValueError, b"s5:ab": ValueError,
            b"l3:N": ValueError, b"S1:l0:": TypeError, b"NN": ValueError}
    for data, error in junk.items():
        with pytest.raises(error):
            ns["unpack"](data)
    with pytest.raises(TypeError):
        ns["pack"](object())


# ------------------------------------------------------------------------------- specs
def test_spec_errors_name_the_field() -> None:
    with pytest.raises(SpecError, match="timeout_s"):
        compile({"type": "unit_tests", "timeout_s": 0})
    with pytest.raises(SpecError, match="backend"):
        compile({"type": "unit_tests", "backend": "vm"})
    with pytest.raises(SpecError, match="memroy_mb"):
        compile({"type": "unit_tests", "memroy_mb": 5})


# ------------------------------------------------------------------------ golden cases
def test_reference_scores_one_with_components(verify: Any) -> None:
    s = score(verify, GOLD)
    assert s.ok and s.value == 1.0
    assert s.components == {"pass_fraction": 1.0, "all_passed": 1.0}
    assert s.details["passed"] == s.details["total"] == 3
    assert s.details["hardened"] is True
    assert s.verifier.startswith("unit_tests@")


def test_partial_and_wrong(verify: Any) -> None:
    partial = score(verify, "def add(a, b):\n    return 5 if a == 2 else a + b + 1\n")
    assert partial.value == pytest.approx(1 / 3) and partial.components["all_passed"] == 0.0
    failed = [t for t in partial.details["tests"] if t["status"] == "failed"]
    assert failed and "got" in failed[0]["message"]
    wrong = score(verify, "def add(a, b):\n    return None\n")
    assert wrong.ok and wrong.value == 0.0 and wrong.details["reason"]


@pytest.mark.parametrize(("code", "reason"), [
    ("", "empty"),
    ("   \n", "empty"),
    (None, "string"),
    ("def add(a, b)\n    return a + b", "syntax error: line 1"),
    ("x = '\0'", "syntax error"),
    ("x = 1\n" * 60_000, "limit"),
])
def test_unrunnable_code_scores_zero_with_reason(verify: Any, code: Any, reason: str) -> None:
    s = score(verify, code)
    assert s.ok and s.value == 0.0
    assert reason in s.details["reason"]


def test_missing_entry_point_and_import_error(verify: Any) -> None:
    s = score(verify, "def plus(a, b):\n    return a + b\n")
    assert s.value == 0.0 and "does not define add()" in s.details["reason"]
    s = score(verify, "import numpy_does_not_exist\n")
    assert s.value == 0.0 and "ModuleNotFoundError" in s.details["reason"]


def test_exceptions_cross_the_boundary_as_builtins(verify: Any) -> None:
    suite = {"entry_point": "f", "tests": textwrap.dedent("""
        def test_raises():
            try:
                f(-1)
            except ValueError as e:
                assert "negative" in str(e)
            else:
                raise AssertionError("no error")
        assert f(2) == (2, [2.5], {"k": {2}})
    """)}
    good = """
        def f(x):
            if x < 0:
                raise ValueError("negative input")
            return (x, [x + 0.5], {"k": {x}})
    """
    assert score(verify, good, suite).value == 1.0
    custom = "class Oops(Exception): pass\ndef f(x):\n    raise Oops('no')\n"
    assert score(verify, custom, suite).value == 0.0


def test_each_test_has_its_own_timeout_and_fresh_state(verify: Any) -> None:
    suite = {"entry_point": "f", "tests": textwrap.dedent("""
        assert f(0) == 1
        assert f(1) == 1
        assert f(2) == 1
    """)}
    code = """
        CALLS = []
        def f(x):
            CALLS.append(x)
            if x == 1:
                while True:
                    pass
            return len(CALLS)
    """
    s = score(verify, code, suite)
    assert [t["status"] for t in s.details["tests"]] == ["passed", "timeout", "passed"]
    assert s.value == pytest.approx(2 / 3)


def test_a_memory_bomb_fails_only_its_test(verify: Any) -> None:
    suite = {"entry_point": "f", "tests": "assert f(1) == 1\nassert f(0) == 0\n"}
    code = "def f(x):\n    if x:\n        return len(bytearray(4 << 30))\n    return 0\n"
    s = score(verify, code, suite)
    assert [t["status"] for t in s.details["tests"]] == ["error", "passed"]


# ----------------------------------------------------------------------------- attacks
ATTACKS = {
    "exit() at import": "exit(0)",
    "sys.exit in the function": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "os._exit at import": "import os\nos._exit(0)\n",
    "os._exit in the function": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "raise SystemExit": "def add(a, b):\n    raise SystemExit(0)\n",
    "raise KeyboardInterrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "always-equal object": """
        class Eq:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = None
        def add(a, b):
            return Eq()
    """,
    "always-equal int subclass": """
        class Eq(int):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = int.__hash__
        def add(a, b):
            return Eq(0)
    """,
    "patched assert and builtins": """
        import builtins
        class Never(BaseException): pass
        builtins.AssertionError = Never
        builtins.isinstance = lambda *a: True
        builtins.type = lambda *a: int
        def add(a, b):
            return 0
    """,
    "fake results on stdout, stderr and fds": """
        import os, sys
        lines = "".join(f"{n} {j} {c} passed\\n" for n in ("x" * 32,) for j in range(3)
                        for c in range(3)) + "done hardened\\n"
        for fd in (1, 2):
            os.write(fd, lines.encode())
        print(lines)
        for path in ("/proc/1/fd/1", "/proc/1/fd/0", "/dev/stdout", "/dev/tty"):
            try:
                with open(path, "w") as f:
                    f.write(lines)
            except OSError:
                pass
        def add(a, b):
            print("PASSED", file=sys.stderr)
            return 0
    """,
    "forged frames on the worker's pipe": """
        import __main__
        def add(a, b):
            for fd in range(3, 64):  # whichever descriptor is the result pipe
                try:
                    for seq in range(1, 50):
                        for value in (True, 0, None, 5, -8, 17):
                            __main__.send(fd, ["r", seq, "ok", value])
                        __main__.send(fd, ["e", seq, 0])
                except OSError:
                    pass
            return 1
    """,
    "patched worker codec": """
        import __main__
        __main__.pack = lambda v: b"T"
        __main__.enc = lambda v, out, d=0: out.append(b"T")
        def add(a, b):
            return 99
    """,
    "kill every process and signal the harness": """
        import os, signal
        def add(a, b):
            for sig in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, 9):
                try:
                    os.kill(1, sig)
                except OSError:
                    pass
            os.kill(-1, 9)
            return a + b
    """,
    "fork a daemon that forges later": """
        import os, time, __main__
        def add(a, b):
            if os.fork() == 0:
                os.setsid()
                time.sleep(0.05)
                for fd in range(3, 64):
                    try:
                        for seq in range(1, 20):
                            __main__.send(fd, ["r", seq, "ok", 1])
                    except OSError:
                        pass
                os._exit(0)
            return 0
    """,
    "fork bomb": """
        import os
        def add(a, b):
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
    """,
    "delete and rewrite files": """
        import os, shutil
        for root in ("/work", "/tmp"):
            for name in os.listdir(root):
                p = os.path.join(root, name)
                shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.remove(p)
        for target in ("/usr/bin/python3", "/etc/passwd"):
            try:
                open(target, "w").write("#!/bin/sh\\necho passed\\n")
            except OSError:
                pass
        def add(a, b):
            return 0
    """,
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_cannot_fake_a_pass(verify: Any, name: str) -> None:
    s = score(verify, ATTACKS[name])
    assert s.ok, s.error
    assert s.value == 0.0, s.details
    assert s.components["all_passed"] == 0.0
    assert score(verify, GOLD).value == 1.0  # the next verification is unaffected


def test_harness_survives_signals_and_still_judges(verify: Any) -> None:
    code = """
        import os, signal
        def add(a, b):
            for sig in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                os.kill(1, sig)
            return a + b
    """
    assert score(verify, code).value == 1.0


def test_hidden_tests_cannot_be_read_by_the_candidate(verify: Any) -> None:
    secret = "gymhub-secret-" + "9f3a1c"
    suite = {"entry_point": "leak", "tests": f"assert leak() == {secret!r}\n"}
    code = """
        import os, glob
        def leak():
            seen = []
            paths = ["/proc/1/cmdline", "/proc/1/environ", "/proc/1/fd/0", "/proc/1/mem",
                     "/proc/self/cmdline"]
            paths += glob.glob("/proc/[0-9]*/fd/*") + glob.glob("/work/**", recursive=True)
            paths += glob.glob("/tmp/**", recursive=True)
            chunks = []
            for path in paths:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                    try:
                        chunks.append(os.read(fd, 1 << 20))
                    finally:
                        os.close(fd)
                except OSError as e:
                    seen.append(f"{path}: {e.errno}")
            try:
                with open("/proc/1/maps") as maps, open("/proc/1/mem", "rb") as mem:
                    for line in maps:
                        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                        mem.seek(lo)
                        chunks.append(mem.read(min(hi - lo, 1 << 24)))
            except (OSError, ValueError, OverflowError) as e:
                seen.append(f"mem: {e}")
            for data in chunks:
                i = data.find(b"gymhub-secret-")
                if i >= 0:
                    return data[i:i + 20].decode()
            try:
                import ctypes
                libc = ctypes.CDLL(None)
                if libc.ptrace(16, 1, 0, 0) == 0:  # PTRACE_ATTACH
                    return "attached"
            except Exception:
                pass
            return "not found"
    """
    s = score(compile({"type": "unit_tests", "timeout_s": 10.0}), code, suite)
    assert s.ok and s.value == 0.0
    assert "not found" in s.details["tests"][0]["message"]


# ------------------------------------------------------------- infrastructure failures
def test_unusable_sandbox_is_an_error_not_a_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    verify = compile({"type": "unit_tests", "backend": "docker", "timeout_s": 0.5})

    def broken(backend: str | None) -> Any:
        raise BackendError("no daemon")

    monkeypatch.setattr(ut, "shared_sandbox", broken)
    s = verify(GOLD, None, ADD)
    assert not s.ok and "sandbox unusable" in (s.error or "")
    # Rejected code never needs (or builds) a sandbox: still a 0 with a reason.
    s = verify("def add(a, b)\n", None, ADD)
    assert s.ok and s.value == 0.0 and "syntax error" in s.details["reason"]


def test_verify_prechecks_once_and_builds_the_runner_only_when_needed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = ut._precheck

    def counting(code: Any, max_chars: int) -> str | None:
        calls.append(code)
        return real(code, max_chars)

    monkeypatch.setattr(ut, "_precheck", counting)
    verify = compile({"type": "unit_tests", "timeout_s": 1.0})
    assert verify(GOLD, None, ADD).value == 1.0
    assert len(calls) == 1

    def factory() -> Any:
        raise AssertionError("the runner must not be built for rejected code")

    job = ut.Job("", "add", ut.split_tests(ADD["tests"]))
    run = ut.run_suites(factory, [job, ut.Job(None, "add", job.steps)])
    assert [r.reason for r in run] == ["the submission is empty",
                                       "the submission must be Python source (a string), "
                                       "got NoneType"]
    built: list[int] = []

    def lazy() -> Any:
        built.append(1)
        return FakeRunner(ExecResult(exit_code=None, signal=9, limit="memory"))

    ut.run_suites(lazy, [job, ut.Job(GOLD, "add", job.steps)])
    assert built == [1]


def test_settings_parse_like_the_verifier() -> None:
    assert ut.unit_test_settings({"type": "unit_tests"}) == ut.UnitTestSettings()
    got = ut.unit_test_settings({"type": "unit_tests", "timeout_s": 3, "memory_mb": 64})
    assert (got.timeout_s, got.memory_mb, got.backend) == (3.0, 64, None)
    with pytest.raises(SpecError, match="memory_mb"):
        ut.unit_test_settings({"type": "unit_tests", "memory_mb": 1})
    with pytest.raises(SpecError, match="memroy_mb"):
        ut.unit_test_settings({"type": "unit_tests", "memroy_mb": 64})


class FakeRunner:
    """Returns a fixed result; ``lines`` are written to stdout under the run's nonce."""

    def __init__(self, result: ExecResult, lines: tuple[str, ...] = ()) -> None:
        self.result = result
        self.lines = lines

    def run(self, argv: Any, *, stdin: Any = None, limits: Any = None) -> ExecResult:
        nonce = marshal.loads(stdin)["nonce"]
        out = b"".join(f"{nonce} {line}\n".encode() for line in self.lines)
        return dataclasses.replace(self.result, stdout=self.result.stdout + out)


def test_harness_crash_is_an_error_and_a_limit_is_the_candidates_fault() -> None:
    job = ut.Job(GOLD, "add", ut.split_tests(ADD["tests"]))
    crashed = ut.run_suites(FakeRunner(ExecResult(exit_code=125, stderr=b"launcher")), [job])[0]
    assert crashed.error and "harness failed" in crashed.error
    assert not ut.score_run(crashed).ok
    limited = ut.run_suites(FakeRunner(ExecResult(exit_code=None, signal=9,
                                                  limit="wall_time")), [job])[0]
    s = ut.score_run(limited)
    assert s.ok and s.value == 0.0 and "wall_time" in s.details["reason"]
    killed = ut.run_suites(FakeRunner(ExecResult(exit_code=None, signal=9)), [job])[0]
    s = ut.score_run(killed)
    assert s.ok and s.value == 0.0 and "killed the harness" in s.details["reason"]


def test_lines_without_the_nonce_are_ignored() -> None:
    out = (b"abc start pid1 hardened\nabc 0 0 passed\nNONCE 0 0 passed\nNONCE 0 1 bogus\n"
           b"NONCE done hardened\n")
    report = ut._parse(out, "NONCE")
    assert report.cases == {0: {0: ("passed", "")}} and report.done and report.hardened
    assert not report.stop_proof  # only the nonce's start line counts
    assert ut._parse(b"NONCE start pid1 hardened\n", "NONCE").stop_proof
    assert not ut._parse(b"NONCE start pid7 hardened\n", "NONCE").stop_proof
    assert not ut._parse(b"NONCE start pid1 soft\n", "NONCE").stop_proof


# A whole-run wall stop after 30 s of wall time: starved (0.5 s CPU) or busy (29 s).
STARVED = ExecResult(exit_code=None, signal=9, limit="wall_time", timed_out=True,
                     wall_ms=30_000.0, cpu_ms=500.0)
BUSY = dataclasses.replace(STARVED, cpu_ms=29_000.0)
PID1 = ("start pid1 hardened", "0 0 passed")


def test_a_starved_pid1_harness_is_an_error_not_a_zero() -> None:
    # An overloaded host must not score correct code 0: masked, with what happened.
    job = ut.Job(GOLD, "add", ut.split_tests(ADD["tests"]))
    run = ut.run_suites(FakeRunner(STARVED, PID1), [job])[0]
    s = ut.score_run(run)
    assert not s.ok and "starved" in (s.error or "")
    assert [t["status"] for t in s.details["tests"]] == ["passed", "error", "error"]


@pytest.mark.parametrize(("result", "lines", "why"), [
    (BUSY, PID1, "busy: its own processes used the CPU"),
    (STARVED, ("start pid7 hardened", "0 0 passed"), "not pid 1: a candidate can SIGSTOP it"),
    (STARVED, ("start pid1 soft", "0 0 passed"), "dumpable: a candidate can ptrace-stop it"),
    (STARVED, ("0 0 passed",), "never said it was stop-proof"),
    (dataclasses.replace(STARVED, oom_killed=True), PID1, "the candidate ran out of memory"),
    (dataclasses.replace(STARVED, pids_exhausted=True), PID1, "a fork bomb"),
    (dataclasses.replace(STARVED, limit="cpu_time"), PID1, "CPU budget spent"),
])
def test_a_stopped_run_the_candidate_could_cause_stays_its_failure(
        result: ExecResult, lines: tuple[str, ...], why: str) -> None:
    job = ut.Job(GOLD, "add", ut.split_tests(ADD["tests"]))
    s = ut.score_run(ut.run_suites(FakeRunner(result, lines), [job])[0])
    assert s.ok, why
    assert s.value == pytest.approx(1 / 3) and "sandbox stopped the run" in s.details["reason"]


def test_a_forged_start_line_does_not_make_a_stop_an_error() -> None:
    # The candidate cannot write the harness's stdout, and without the nonce its lines
    # are ignored anyway: a wall stop stays a 0.
    job = ut.Job(GOLD, "add", ut.split_tests(ADD["tests"]))
    forged = dataclasses.replace(STARVED, stdout=b"x" * 32 + b" start pid1 hardened\n")
    s = ut.score_run(ut.run_suites(FakeRunner(forged), [job])[0])
    assert s.ok and s.value == 0.0


def test_the_harness_says_whether_it_is_stop_proof() -> None:
    class Capture:
        def __init__(self, inner: Any) -> None:
            self.inner, self.stdin, self.result = inner, b"", None

        def run(self, argv: Any, *, stdin: Any = None, limits: Any = None) -> ExecResult:
            self.stdin, self.result = stdin, self.inner.run(argv, stdin=stdin, limits=limits)
            return self.result

    for backend in available_backends():
        cap = Capture(shared_sandbox(backend))
        job = ut.Job(GOLD, "add", ut.split_tests(ADD["tests"]))
        assert ut.run_suites(cap, [job])[0].passed == 3
        assert cap.result is not None
        report = ut._parse(cap.result.stdout, marshal.loads(cap.stdin)["nonce"])
        # bwrap runs the harness as the pid namespace's init; docker does not.
        assert report.stop_proof is (backend == "bwrap"), backend


def test_a_failure_probe_shares_its_cases_deadline() -> None:
    # Wrong just before the deadline, then as slow again in the "got" probe: one deadline
    # for both, or a sleeping candidate could overrun the whole-run wall budget (and a
    # pid-1 overrun at low CPU reads as a starved host: a masked error, not a 0).
    suite = {"entry_point": "f", "tests": "assert f(1) == 1\n"}
    code = "import time\ndef f(x):\n    time.sleep(1.5)\n    return 0\n"
    job = ut.Job(code, "f", ut.split_tests(suite["tests"]))
    run = ut.run_suites(shared_sandbox(None), [job], timeout_s=2.0)[0]
    assert [o.status for o in run.outcomes] == ["failed"]
    # The probe calls f again (another 1.5 s): with a deadline of its own it would finish
    # and report "got 0"; sharing the case's, it runs out of time and reports nothing.
    assert "got" not in run.outcomes[0].message


def test_suite_from_state_or_fixture_or_error(verify: Any) -> None:
    class Task:
        fixture = ADD

    assert verify(GOLD, Task(), None).value == 1.0
    s = verify(GOLD, None, {"entry_point": "add"})
    assert not s.ok and "invalid test suite" in (s.error or "")


def test_batch_runs_many_jobs_in_one_call() -> None:
    sandbox = shared_sandbox(None)
    steps = ut.split_tests(ADD["tests"])
    runs = ut.run_suites(sandbox, [ut.Job(GOLD, "add", steps), ut.Job("x = (", "add", steps),
                                   ut.Job("def add(a, b): return 0", "add", steps)])
    assert [r.passed for r in runs] == [3, 0, 0]
    assert runs[1].reason and "syntax" in runs[1].reason


@pytest.mark.skipif("docker" not in available_backends(), reason="no Docker/Podman daemon")
@pytest.mark.parametrize("attack", [
    "fake results on stdout, stderr and fds", "always-equal object",
    "kill every process and signal the harness", "forged frames on the worker's pipe",
])
def test_docker_backend_golden_and_attacks(attack: str) -> None:
    # On docker the harness is not the container's pid 1, so kill -9 -1 reaches it: the
    # run must still score 0, not an error the learner would mask.
    verify = compile({"type": "unit_tests", "backend": "docker", "timeout_s": 2.0})
    s = verify(textwrap.dedent(ATTACKS[attack]), None, ADD)
    assert s.ok and s.value == 0.0, s.error
    assert verify(GOLD, None, ADD).value == 1.0

"""unit_tests verifier: splitting, scoring, isolation, and every forgery attack we know of."""

from __future__ import annotations

import math
import sys
import textwrap
from typing import Any

import pytest

from gymhub.errors import BackendError, SpecError
from gymhub.sandbox import ExecResult, available_backends
from gymhub.verifiers import compile
from gymhub.verifiers import unit_tests as ut
from gymhub.verifiers.unit_tests_harness import COMMON

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
    limit = sys.getrecursionlimit()
    ns: dict[str, Any] = {}
    try:
        exec(COMMON, ns)
    finally:
        sys.setrecursionlimit(limit)
    values = [None, True, False, 0, -(10**50), 2.5, -0.0, float("inf"), 1 + 2j, "h\udcffé",
              b"\x00", (1, [2, {3: "x", (4,): frozenset({5})}]), set(), frozenset(), {}, ()]
    for v in values:
        back = ns["unpack"](ns["pack"](v))
        assert back == v and type(back) is type(v)
    assert math.isnan(ns["unpack"](ns["pack"](float("nan"))))
    for junk in [b"", b"X", b"i12", b"s5:ab", b"l3:N", b"S1:l0:", b"NN"]:
        with pytest.raises(Exception):  # noqa: B017 - any error is fine, never a value
            ns["unpack"](junk)
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
            for seq in range(1, 50):
                for value in (True, 0, None, 5, -8, 17):
                    __main__.send(__main__.W, ["r", seq, "ok", value])
                __main__.send(__main__.W, ["e", seq, 0])
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
                for seq in range(1, 20):
                    __main__.send(__main__.W, ["r", seq, "ok", 1])
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

    monkeypatch.setattr(ut, "_sandbox", broken)
    s = verify(GOLD, None, ADD)
    assert not s.ok and "sandbox unusable" in (s.error or "")


class FakeRunner:
    def __init__(self, result: ExecResult) -> None:
        self.result = result

    def run(self, argv: Any, *, stdin: Any = None, limits: Any = None) -> ExecResult:
        return self.result


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
    out = b"abc 0 0 passed\nNONCE 0 0 passed\nNONCE 0 1 bogus\nNONCE done hardened\n"
    reports, done, hardened = ut._parse(out, "NONCE")
    assert reports == {0: {0: ("passed", "")}} and done and hardened


def test_suite_from_state_or_fixture_or_error(verify: Any) -> None:
    class Task:
        fixture = ADD

    assert verify(GOLD, Task(), None).value == 1.0
    s = verify(GOLD, None, {"entry_point": "add"})
    assert not s.ok and "invalid test suite" in (s.error or "")


def test_batch_runs_many_jobs_in_one_call() -> None:
    sandbox = ut._sandbox(None)
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

"""``code-v0``: write a Python function over several turns, then submit it to hidden tests.

The agent gets a task (prompt, signature, public examples) and three tools:

* ``run_python(code)`` runs code in the episode's persistent sandboxed REPL
  (:meth:`gymhub.sandbox.Session.run_python`): variables, imports and files persist
  between calls like a notebook kernel. A crash or timeout restarts the REPL and the
  answer says so. Where a backend has no REPL yet, each call runs a fresh interpreter in
  the same workdir (files persist, variables do not) and the answer says that too.
* ``run_examples(code)`` runs the public examples against a candidate, with the same
  harness as the verifier, so "the examples pass" means what it will mean at submission.
* ``submit(code)`` scores the code with the ``unit_tests`` verifier on the hidden tests in
  a *fresh* sandbox (never the episode's session, whose files the agent controls) and
  ends the episode. The agent learns only how many hidden tests passed.

Choices worth knowing:
* The episode's sandbox session is opened on the first ``run_python``/``run_examples``
  call and closed when the episode ends, so a one-shot submission costs no session.
* Outputs shown to the agent are capped (``max_output_chars``, head and tail kept)
  because a model learns nothing from a megabyte of output.
* An unusable sandbox is an ``Error:`` answer in a tool and a ``Score.error`` at
  submission (masked by the learner), never a silent 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gymhub.errors import BackendError, ConfigError
from gymhub.sandbox import Session
from gymhub.types import Message, Score, ToolCall
from gymhub.verifiers.core import compile_cached
from gymhub.verifiers.unit_tests import Job, run_suites, split_tests, unit_test_settings

from ..core import VerifierCase
from ..python_tool import SandboxPython
from ..tasks import Task, filter_tasks, resolve_tasks
from ..tools import Final, ToolEnv, ToolError, tool
from .tasks import CodeFixture, builtin_tasks, load_task_file

__all__ = ["DEFAULT_VERIFIER", "CodeEnv"]

DEFAULT_VERIFIER: Mapping[str, Any] = {"type": "unit_tests", "timeout_s": 2.0, "memory_mb": 256}

_SYSTEM = """You are an expert Python programmer. Write the function the user asks for.
Tools:
- run_python(code): run Python in your own sandboxed session (standard library only, no \
network); variables, imports and files persist between calls. Output is capped.
- run_examples(code): run the public examples against a candidate solution.
- submit(code): submit the complete solution source; hidden unit tests score it and the \
episode ends.
The solution must define `{entry_point}` and return plain data (numbers, strings, lists, \
tuples, dicts, sets, None). You have {max_turns} turns."""


class CodeEnv(ToolEnv):
    """The Python programming environment.

    Args:
        tasks: ``None`` for the built-in tasks, a path to a JSONL task file, or tasks.
        max_turns: turn budget; running out truncates the episode with score 0.
        difficulty: keep only tasks with these ``meta["difficulty"]`` tags.
        categories: keep only tasks with these ``meta["category"]`` tags.
        backend: sandbox backend for the session and the verifier (default: the best one).
        verifier: a ``unit_tests`` spec; its ``backend`` defaults to ``backend``.
        run_timeout_s: wall-clock limit of one ``run_python`` call.
        max_output_chars: characters of tool output shown to the agent.
        render_mode: ``"ansi"`` or ``None``.
    """

    def __init__(
        self,
        tasks: str | Path | Sequence[Task] | None = None,
        *,
        max_turns: int = 10,
        difficulty: str | Sequence[str] | None = None,
        categories: str | Sequence[str] | None = None,
        backend: str | None = None,
        verifier: Mapping[str, Any] | None = None,
        run_timeout_s: float = 5.0,
        max_output_chars: int = 4000,
        render_mode: str | None = None,
    ) -> None:
        task_list = resolve_tasks(tasks, builtin_tasks, load_task_file)
        task_list = filter_tasks(task_list, "difficulty", difficulty)
        task_list = filter_tasks(task_list, "category", categories)
        if not task_list:
            raise ConfigError("no tasks left after filtering by difficulty/categories")
        if any(not isinstance(t.fixture, CodeFixture) for t in task_list):
            raise ConfigError("code-v0 tasks need a CodeFixture (use load_task_file)")
        if run_timeout_s <= 0 or max_output_chars < 100:
            raise ConfigError("run_timeout_s must be > 0 and max_output_chars >= 100")
        super().__init__(task_list, max_turns=max_turns, render_mode=render_mode)
        spec = dict(verifier or DEFAULT_VERIFIER)
        if backend is not None:
            spec.setdefault("backend", backend)
        self.verifier = compile_cached(spec, name="unit_tests")
        self.backend = backend
        # The verifier's own parser: run_examples runs under the limits (and defaults)
        # the submission will be scored with, defined once in unit_tests.
        settings = unit_test_settings(spec)
        self.timeout_s, self.memory_mb = settings.timeout_s, settings.memory_mb
        self.run_timeout_s, self.max_output_chars = run_timeout_s, max_output_chars
        self.python = SandboxPython(backend, run_timeout_s=run_timeout_s,
                                    memory_mb=max(self.memory_mb, 256),
                                    max_output_chars=max_output_chars)

    # ------------------------------------------------------------------ episode
    def _start(self, task: Task) -> tuple[list[Message], dict[str, Any]]:
        fx = _fixture(task)
        system = _SYSTEM.format(entry_point=fx.entry_point, max_turns=self.max_turns)
        user = f"{task.prompt.strip()}\n\nWrite this function:\n```python\n{fx.signature}\n```"
        if fx.examples.strip():
            user += f"\n\nExamples:\n```python\n{fx.examples.strip()}\n```"
        observation = [Message(role="system", content=system), Message(role="user", content=user)]
        return observation, {"verifier": self.verifier.id, "entry_point": fx.entry_point}

    def _end(self) -> None:
        self.python.close()

    @property
    def session(self) -> Session | None:
        """The episode's sandbox session, while one is open."""
        return self.python.session

    # -------------------------------------------------------------------- tools
    @tool
    def run_python(self, code: str) -> str:
        """Run Python code in your persistent session and show its output.

        Args:
            code: Python source; if the last statement is an expression, its value is shown.
        """
        return self.python.run(code)

    @tool
    def run_examples(self, code: str) -> str:
        """Run the public examples against a candidate solution and report each one.

        Args:
            code: the complete solution source, defining the task's function.
        """
        assert self.task is not None
        fx = _fixture(self.task)
        if not fx.examples.strip():
            return "This task has no public examples."
        job = Job(code, fx.entry_point, split_tests(fx.examples))
        try:
            run = run_suites(self.python.require(), [job], timeout_s=self.timeout_s,
                             memory_mb=self.memory_mb)[0]
        except BackendError as exc:
            raise ToolError(f"the sandbox failed: {exc}") from exc
        if run.error:
            raise ToolError(f"the examples could not be run: {run.error}")
        lines = [f"Passed {run.passed}/{len(run.outcomes)} examples."]
        if run.reason:
            lines.append(run.reason)
        for o in run.outcomes:
            mark = "PASS" if o.status == "passed" else o.status.upper()
            lines.append(f"{mark} {o.name}" + (f" -- {o.message}" if o.message else ""))
        return self.python.cap("\n".join(lines))

    @tool
    def submit(self, code: str) -> Final:
        """Submit your final solution; hidden unit tests score it and the episode ends.

        Args:
            code: the complete solution source, defining the task's function.
        """
        assert self.task is not None
        score = self.verify(code, self.task)
        if not score.ok:
            return Final("Submitted. It could not be scored (infrastructure error).", score)
        passed, total = score.details.get("passed", 0), score.details.get("total", 0)
        text = f"Submitted. Passed {passed}/{total} hidden tests."
        if score.details.get("reason") and not passed:
            text += f" ({score.details['reason']})"
        return Final(text, score)

    # ---------------------------------------------------------------- verifier
    def verify(self, submission: Any, task: Task) -> Score:
        """Score a solution for ``task`` on its hidden tests in a fresh sandbox."""
        return self.verifier(submission, task, _fixture(task))

    def gold_action(self) -> Message:
        """Submit the reference solution."""
        assert self.task is not None
        call = ToolCall(id="gold", name="submit", arguments={"code": str(self.task.gold)})
        return Message(role="assistant", content="", tool_calls=(call,))

    def verifier_cases(self, task: Task) -> list[VerifierCase]:
        """Gold passes (also with a main block); wrong and hostile code fails; junk scores 0."""
        gold, ep = str(task.gold), _fixture(task).entry_point
        main = "\n\nif __name__ == '__main__':\n    print('debug')\n    raise SystemExit(1)\n"
        return [
            VerifierCase(gold, "pass", "reference solution"),
            VerifierCase(gold + main, "pass", "reference with a main block"),
            VerifierCase(f"def {ep}(*args, **kwargs):\n    return None\n", "fail", "returns None"),
            VerifierCase("import os\nos._exit(0)\n", "fail", "exits before the tests"),
            VerifierCase(f"def {ep}(*args:\n    pass\n", "malformed", "syntax error"),
            VerifierCase("", "malformed", "empty"),
            VerifierCase(None, "malformed", "not a string"),
        ]


def _fixture(task: Task) -> CodeFixture:
    if not isinstance(task.fixture, CodeFixture):
        raise ConfigError(f"task {task.id} has no CodeFixture")
    return task.fixture


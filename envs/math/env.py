r"""``math-v0``: the classic verified-GRPO task, as a multi-turn environment.

The agent gets a question with an exact answer, may compute with ``run_python`` (the
sandboxed session of :mod:`gymhub.envs.python_tool`), and answers with
``submit(answer)``, scored by the ``math_equiv`` verifier (math-verify, in a worker pool
killed at its deadline: a timeout is an error, never a 0). A plain reply containing a
``\boxed{...}`` answer also ends the episode and is scored the same way, because that is
how most math models answer; any other plain reply is answered with the tool list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gymhub.errors import ConfigError
from gymhub.types import Message, Score, StepResult, ToolCall
from gymhub.verifiers.core import compile_cached

from ..core import VerifierCase
from ..python_tool import SandboxPython
from ..tasks import Task, filter_tasks
from ..tools import Final, ToolEnv, tool
from .tasks import builtin_tasks

__all__ = ["DEFAULT_VERIFIER", "MathEnv"]

DEFAULT_VERIFIER: Mapping[str, Any] = {"type": "math_equiv", "timeout_s": 5.0}

_SYSTEM = """Solve the problem exactly.
Tools:
- run_python(code): run Python in your own sandboxed session (standard library only, no \
network); variables persist between calls. Output is capped.
- submit(answer): your final answer in LaTeX, e.g. \\boxed{{\\frac{{3}}{{4}}}}, a set \
\\boxed{{\\{{1, 2\\}}}} or an interval \\boxed{{(-\\infty, 3)}}; the episode ends.
You may also end with a reply whose final answer is in \\boxed{{}}. You have {max_turns} turns."""


class MathEnv(ToolEnv):
    """Questions with exact answers.

    Args:
        tasks: ``None`` for the built-in generated tasks, or tasks whose ``gold`` is LaTeX.
        max_turns: turn budget.
        categories: keep only these ``meta["category"]`` templates.
        difficulty: keep only these ``meta["difficulty"]`` tags.
        per_template: built-in tasks per template.
        backend: sandbox backend for ``run_python`` (default: the best available).
        verifier: a ``math_equiv`` spec.
        run_timeout_s: wall-clock limit of one ``run_python`` call.
        max_output_chars: characters of tool output shown to the agent.
        render_mode: ``"ansi"`` or ``None``.
    """

    def __init__(
        self,
        tasks: Sequence[Task] | None = None,
        *,
        max_turns: int = 6,
        categories: str | Sequence[str] | None = None,
        difficulty: str | Sequence[str] | None = None,
        per_template: int = 30,
        backend: str | None = None,
        verifier: Mapping[str, Any] | None = None,
        run_timeout_s: float = 5.0,
        max_output_chars: int = 2000,
        render_mode: str | None = None,
    ) -> None:
        if per_template < 1:
            raise ConfigError(f"per_template must be >= 1, got {per_template}")
        task_list = list(tasks) if tasks is not None else builtin_tasks(per_template)
        task_list = filter_tasks(task_list, "category", categories)
        task_list = filter_tasks(task_list, "difficulty", difficulty)
        if not task_list:
            raise ConfigError("no tasks left after filtering by categories/difficulty")
        if run_timeout_s <= 0 or max_output_chars < 100:
            raise ConfigError("run_timeout_s must be > 0 and max_output_chars >= 100")
        super().__init__(task_list, max_turns=max_turns, render_mode=render_mode)
        self.verifier = compile_cached(dict(verifier or DEFAULT_VERIFIER), name="math_equiv")
        self.python = SandboxPython(backend, run_timeout_s=run_timeout_s, memory_mb=256,
                                    max_output_chars=max_output_chars)

    def _start(self, task: Task) -> tuple[list[Message], dict[str, Any]]:
        system = _SYSTEM.format(max_turns=self.max_turns)
        return ([Message(role="system", content=system), Message(role="user", content=task.prompt)],
                {"verifier": self.verifier.id})

    def _end(self) -> None:
        self.python.close()

    @tool
    def run_python(self, code: str) -> str:
        """Run Python code in your persistent session and show its output.

        Args:
            code: Python source; if the last statement is an expression, its value is shown.
        """
        return self.python.run(code)

    @tool
    def submit(self, answer: str) -> Final:
        r"""Submit your final answer; it is checked for mathematical equality and the episode ends.

        Args:
            answer: the answer in LaTeX, ideally in \boxed{}.
        """
        assert self.task is not None
        return _final(self.verify(answer, self.task))

    def on_text(self, action: Message) -> StepResult:
        r"""A reply with a ``\boxed{}`` answer ends the episode; other text gets the tool list."""
        if "\\boxed{" not in action.content or self.task is None:
            return super().on_text(action)
        final = _final(self.verify(action.content, self.task))
        return StepResult([Message(role="user", content=final.content)], 0.0, True, False,
                          {"score": final.score})

    def verify(self, submission: Any, task: Task) -> Score:
        """Score an answer for ``task`` with the environment's ``math_equiv`` verifier."""
        return self.verifier(submission, task)

    def gold_action(self) -> Message:
        """Submit the computed answer."""
        assert self.task is not None
        answer = f"\\boxed{{{self.task.gold}}}"
        call = ToolCall(id="gold", name="submit", arguments={"answer": answer})
        return Message(role="assistant", content="", tool_calls=(call,))

    def verifier_cases(self, task: Task) -> list[VerifierCase]:
        """The gold, boxed and bare, passes; another number fails; no answer is malformed."""
        gold = str(task.gold)
        return [
            VerifierCase(f"\\boxed{{{gold}}}", "pass", "the gold, boxed"),
            VerifierCase(f"The answer is $\\boxed{{{gold}}}$.", "pass", "boxed inside a sentence"),
            VerifierCase("\\boxed{-98765.4321}", "fail", "another number"),
            VerifierCase("I could not solve it.", "malformed", "no answer at all"),
            VerifierCase(None, "malformed", "not text"),
        ]


def _final(score: Score) -> Final:
    if not score.ok:
        return Final("Submitted. It could not be checked (verifier error).", score)
    return Final("Submitted: correct." if score.value >= 1.0 else "Submitted: incorrect.", score)

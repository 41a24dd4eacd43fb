"""The environment contract: a Gymnasium ``Env`` whose observations and actions are chat.

``TextEnv`` owns the episode bookkeeping that every environment would otherwise get
subtly wrong: task selection from the seed, turn budgets, coercion of bad actions into
error messages (never exceptions), the terminal score in ``info["score"]``, and the
release of per-episode resources as soon as an episode ends. Subclasses implement
``_start``, ``_step`` and ``gold_action``; they never tokenise.

The reference policies other than gold (``noop``, ``refuse``, ``random``: see
:mod:`gymhub.envs.policies`) act through :meth:`TextEnv.noop_action`,
:meth:`TextEnv.refuse_action` and :meth:`TextEnv.random_action`, whose generic defaults
read the tool specs; an environment whose episodes end some other way overrides them.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium

from gymhub.errors import ConfigError, EpisodeFinished, EpisodeNotStarted, TaskNotFound
from gymhub.spaces import ChatSpace, MessageSpace
from gymhub.types import (
    Message,
    Score,
    StepResult,
    Task,
    ToolCall,
    ToolSpec,
    VerifierCase,
    format_message,
)

from .schema_values import empty_arguments, random_arguments, random_text

if TYPE_CHECKING:
    from gymhub.verifiers import Verifier

__all__ = ["TextEnv", "VerifierCase"]

#: Largest action (characters of content plus arguments) an environment accepts.
MAX_ACTION_CHARS = 200_000

#: How the answer to an action refused as invalid begins (the problem follows): such an
#: action leaves nothing else in the transcript, and ``gymhub rescore`` recognises it by this.
INVALID_ACTION_REPLY = "Invalid action: "


class TextEnv(gymnasium.Env[list[Message], Message]):
    """A multi-turn text environment.

    ``reset`` returns the opening messages (system and user prompt) and, in ``info``,
    the task id and tool specs. ``step`` takes one assistant :class:`Message` and
    returns only the *new* messages. A malformed action is answered with an error
    message and costs a turn; it never raises.

    Args:
        tasks: the task set; ids must be unique.
        max_turns: steps after which a running episode is truncated.
        render_mode: ``"ansi"`` or ``None``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}  # type: ignore[misc]

    def __init__(
        self, tasks: Sequence[Task], *, max_turns: int = 8, render_mode: str | None = None
    ) -> None:
        if not tasks:
            raise ConfigError(f"{type(self).__name__} needs at least one task")
        if max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.tasks: list[Task] = list(tasks)
        self._tasks_by_id: dict[str, Task] = {}
        for t in self.tasks:
            if t.id in self._tasks_by_id:
                raise ConfigError(f"duplicate task id {t.id!r}")
            self._tasks_by_id[t.id] = t
        self.max_turns = max_turns
        self.render_mode = render_mode
        self.observation_space = ChatSpace()
        self.action_space = MessageSpace([s.name for s in self.tool_specs()])
        self.task: Task | None = None
        self.turn = 0
        self.done = True
        self.history: list[Message] = []
        self.last_score: Score | None = None

    # ----------------------------------------------------------- subclass hooks
    @abstractmethod
    def _start(self, task: Task) -> tuple[list[Message], dict[str, Any]]:
        """Open an episode on ``task``: the first messages and extra ``info``."""

    @abstractmethod
    def _step(self, action: Message) -> StepResult:
        """Apply a valid assistant message; set ``terminated`` and ``info["score"]`` to end."""

    def _end(self) -> None:
        """Release per-episode resources; called once when an episode ends or is replaced."""

    def _truncation_score(self) -> Score:
        """The score of an episode that ran out of turns without an answer."""
        return Score(value=0.0, details={"reason": "truncated: no answer was submitted"})

    @abstractmethod
    def gold_action(self) -> Message:
        """The reference policy's next action in the current episode."""

    # ------------------------------------------------------ reference policies
    #: Tools that end an episode, by preference: the noop and refuse defaults end
    #: episodes through the first of these an environment has.
    final_tool_names: ClassVar[tuple[str, ...]] = (
        "submit", "finish", "final_answer", "answer", "done",
    )
    #: What the default :meth:`refuse_action` says.
    refusal_text: ClassVar[str] = "I'm sorry, but I can't help with this request."

    def final_tool(self) -> ToolSpec | None:
        """The tool that ends an episode (``submit``-like), or ``None`` when text ends it."""
        specs = {s.name: s for s in self.tool_specs()}
        return next((specs[n] for n in self.final_tool_names if n in specs), None)

    def noop_action(self) -> Message:
        """End the episode at once having done nothing (tau2's "do nothing" agent).

        Default: call the final tool with the least arguments it accepts (empty
        strings, zeros, first enum values), or send empty text when there is no final
        tool. A task that this action passes has a score that ignores the agent's work;
        ``check_env`` fails such an environment.
        """
        spec = self.final_tool()
        if spec is None:
            return Message(role="assistant", content="")
        return _call("noop", spec.name, empty_arguments(spec.parameters))

    def refuse_action(self) -> Message:
        """Decline the task.

        Default: a ``refuse`` tool if there is one, else the final tool, with every
        required string argument set to :attr:`refusal_text` (the refusal in words); plain
        text when the environment has no tools.
        """
        specs = {s.name: s for s in self.tool_specs()}
        spec = specs.get("refuse") or self.final_tool()
        if spec is None:
            return Message(role="assistant", content=self.refusal_text)
        args = empty_arguments(spec.parameters)
        props = spec.parameters.get("properties") or {}
        texts = [k for k, v in props.items()
                 if isinstance(v, Mapping) and v.get("type") == "string"]
        for name in [k for k in texts if k in args] or texts[:1]:
            args[name] = self.refusal_text
        return Message(role="assistant", content=self.refusal_text, tool_calls=(
            ToolCall(id="refuse", name=spec.name, arguments=args),))

    def random_action(self, rng: random.Random) -> Message:
        """A uniformly chosen tool called with schema-valid random arguments.

        The arguments pass the environment's validation, so what a random agent scores
        measures the environment's scoring, not its argument checks. Without tools: a
        few random words.
        """
        specs = self.tool_specs()
        if not specs:
            return Message(role="assistant", content=random_text(rng))
        spec = rng.choice(specs)
        return _call(f"random-{self.turn}", spec.name, random_arguments(spec.parameters, rng))

    def expected_scores(self, policy: str, task: Task) -> tuple[float, float] | None:
        """Bounds a reference policy's score must fall within on ``task`` (``None``: no claim).

        An environment that knows which tasks must be refused says so here, and
        ``check_env`` holds it to that for ``refuse`` and ``random``.
        """
        return None

    def replace_verifier(self, verifier: Verifier) -> None:
        """Score this environment's episodes with ``verifier`` from now on (``gymhub rescore``).

        Default: replace the compiled verifier held in ``self.verifier``, which is
        where the built-in environments keep the one their ``verify`` and ``submit``
        call. It receives the same ``(submission, task, state)`` as the one it
        replaces, so it must be a kind that understands this environment's
        submissions. An environment that scores some other way overrides this.

        Raises:
            ConfigError: the environment holds no replaceable verifier.
        """
        from gymhub.verifiers import Verifier

        if not isinstance(getattr(self, "verifier", None), Verifier):
            raise ConfigError(
                f"{type(self).__name__} keeps no compiled verifier in .verifier, so it cannot "
                "be replaced (override replace_verifier)"
            )
        self.verifier = verifier

    def verifier_cases(self, task: Task) -> list[VerifierCase]:
        """Golden cases (pass, fail, malformed) for this environment's verifier on ``task``."""
        return []

    def tool_specs(self) -> list[ToolSpec]:
        """Tools the agent may call; empty for plain-text environments."""
        return []

    def verify(self, submission: Any, task: Task) -> Score:
        """Score a submission for ``task`` outside an episode (golden cases, rescoring)."""
        raise NotImplementedError(f"{type(self).__name__} has no standalone verifier")

    # ------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode; ``options={"task_id": ...}`` picks a task by id.

        Raises:
            TaskNotFound: the requested task id does not exist.
        """
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is not None:
            task = self._tasks_by_id.get(str(task_id))
            if task is None:
                raise TaskNotFound(f"no task {task_id!r} in {type(self).__name__}")
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        if not self.done:
            self._end()
        self.task, self.turn, self.done, self.last_score = task, 0, False, None
        try:
            observation, extra = self._start(task)
        except BaseException:
            self.done = True  # no half-open episode: release what _start had opened
            self._end()
            raise
        self.history = list(observation)
        info: dict[str, Any] = {
            "task_id": task.id,
            "tools": [s.to_dict() for s in self.tool_specs()],
            "max_turns": self.max_turns,
            "meta": dict(task.meta),
        }
        info.update(extra)
        return list(observation), info

    def step(self, action: Any) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Apply one assistant action.

        Raises:
            EpisodeNotStarted: ``reset`` was never called.
            EpisodeFinished: the episode already ended.
        """
        if self.task is None:
            raise EpisodeNotStarted("call reset() before step()")
        if self.done:
            raise EpisodeFinished("the episode has ended; call reset() to start another")
        message, problem = coerce_action(action)
        if message is None:
            result = StepResult(
                [Message(role="user", content=f"{INVALID_ACTION_REPLY}{problem}")],
                0.0,
                False,
                False,
                {"error": "invalid_action"},
            )
        else:
            result = self._step(message)
            self.history.append(message)
        self.turn += 1
        info = result.info
        if not result.terminated and self.turn >= self.max_turns:
            result.truncated = True
            info["score"] = self._truncation_score()
        score = info.get("score")
        if result.terminated or result.truncated:
            self.done = True
            if isinstance(score, Score):
                self.last_score = score
                if score.ok:
                    result.reward += score.value
            self._end()
        info["turn"] = self.turn
        self.history.extend(result.observation)
        return (
            list(result.observation),
            float(result.reward),
            result.terminated,
            result.truncated,
            info,
        )

    def render(self) -> str | None:
        """The transcript so far, as plain text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        return "\n".join(format_message(m) for m in self.history)

    def end_episode(self) -> None:
        """End the running episode now and free what it holds; ``reset`` starts another.

        Unlike :meth:`close`, which is final (gymnasium's contract), the instance stays
        usable: a server calls this when a client abandons an episode, then reuses the
        instance instead of building a new one.
        """
        if self.task is not None and not self.done:
            self.done = True
            self._end()

    def close(self) -> None:
        """End any running episode and free its resources."""
        if not self.done:
            self.done = True
            self._end()
        super().close()

    def task_by_id(self, task_id: str) -> Task:
        """Look a task up by id.

        Raises:
            TaskNotFound: no such task.
        """
        try:
            return self._tasks_by_id[task_id]
        except KeyError:
            raise TaskNotFound(f"no task {task_id!r} in {type(self).__name__}") from None


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> Message:
    return Message(role="assistant", content="", tool_calls=(ToolCall(call_id, name, arguments),))


def coerce_action(action: Any) -> tuple[Message | None, str]:
    """Turn whatever the agent sent into an assistant message, or say why not."""
    if isinstance(action, str):
        action = Message(role="assistant", content=action)
    elif isinstance(action, Mapping):
        try:
            action = Message.from_dict(action)
        except ValueError as exc:
            return None, str(exc)
    if not isinstance(action, Message):
        return None, f"expected an assistant message, got {type(action).__name__}"
    if action.role != "assistant":
        return None, f"actions must have role 'assistant', got {action.role!r}"
    size = len(action.content) + sum(len(repr(c.arguments)) for c in action.tool_calls or ())
    if size > MAX_ACTION_CHARS:
        return None, f"action is {size:,} characters; the limit is {MAX_ACTION_CHARS:,}"
    return action, ""

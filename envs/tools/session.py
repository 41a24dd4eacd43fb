"""One ``tools-v0`` episode's moving parts: the world copy, the user and the call log.

:meth:`Session.run` is the only way a call reaches the world, for the agent and for
the gold program alike (the gold end state is this same code run on a fresh copy). It
refuses what no tool should see (oversized or invalid text, repeats), runs the
operation in one transaction, and records what scoring needs: the ending, and writes
that used a value the user never revealed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, time
from typing import Any

import sqlalchemy as sa

from gymhub.errors import BackendError, ConfigError, ToolError
from gymhub.types import Message, Task, ToolCall

from .actions import ACTIONS, READS, Ctx
from .base import MAX_CALLS_PER_TURN
from .policies import violations
from .user import User, UserScript
from .world import Snapshot, World, WorldRef

__all__ = ["CONTROL", "Call", "Session", "calls_of", "script_of"]

#: Tools that talk to the user or end the episode rather than touch the world.
CONTROL = frozenset({"ask_user", "finish", "refuse"})
#: Longest text argument accepted (an email body is the longest legitimate one).
MAX_TEXT = 4000
MAX_ITEMS = 20


@dataclass(frozen=True)
class Call:
    """One accepted call: what ran, and the world version it ran against."""

    name: str
    arguments: dict[str, Any]
    result: str
    version: int


def script_of(task: Task) -> UserScript:
    """The user script stored in ``task.gold["user"]``."""
    raw = (task.gold or {}).get("user") or {}
    return UserScript(dict(raw.get("hidden") or {}),
                      tuple((int(a), str(t)) for a, t in raw.get("followups") or ()))


def _check_text(value: Any, where: str) -> None:
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ToolError(f"argument {where!r} is {len(value):,} characters; the limit is "
                            f"{MAX_TEXT:,}")
        if "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise ToolError(f"argument {where!r} is not valid text (NUL or a lone surrogate)")
    elif isinstance(value, list):
        if len(value) > MAX_ITEMS:
            raise ToolError(f"argument {where!r} has {len(value)} items; the limit is "
                            f"{MAX_ITEMS}")
        for i, v in enumerate(value):
            _check_text(v, f"{where}[{i}]")


def _canonical(text: str) -> Any:
    """A date or time in any form the tools accept, else the folded text.

    The tools parse ``20260304`` and ``2026-W10-3`` as the same date, so a guessed value
    must be recognised in every spelling the tools would store identically.
    """
    text = text.strip()
    for parse in (date.fromisoformat, time.fromisoformat):
        try:
            return parse(text)
        except ValueError:
            continue
    return text.lower()


def _same(value: Any, secret: Any) -> bool:
    if isinstance(value, list):
        return any(_same(v, secret) for v in value)
    if isinstance(secret, int | float) and not isinstance(secret, bool):
        return isinstance(value, int | float) and not isinstance(value, bool) and \
            float(value) == float(secret)
    return isinstance(value, str) and _canonical(value) == _canonical(str(secret))


class Session:
    """The state of one episode on ``world`` (restored to the task's fixture here)."""

    def __init__(self, world: World, task: Task) -> None:
        ref = task.fixture
        if not isinstance(ref, WorldRef):
            raise ConfigError(f"task {task.id} has no tools-v0 world (fixture {ref!r})")
        world.load(ref)
        self.world, self.task = world, task
        self.now = ref.now
        self.requester = str(task.meta["user"])
        self.user = User(script_of(task))
        self.calls: list[Call] = []
        self.ending: tuple[str, str] | None = None
        self.invented: list[dict[str, Any]] = []
        # Policies are checked on every write, not only on the end state: a meeting booked
        # on a Saturday and cancelled again still broke the rule when it was booked.
        self.broken: list[dict[str, Any]] = []
        self._last: Snapshot | None = None  # the world after the last write (taken lazily)
        self.version = 0

    def run(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one call.

        Raises:
            ToolError: the call was refused; nothing changed.
        """
        args = dict(arguments)
        for key, value in args.items():
            _check_text(value, key)
        key = json.dumps([name, args], sort_keys=True, default=str)
        for i, c in enumerate(self.calls):
            if json.dumps([c.name, c.arguments], sort_keys=True, default=str) != key:
                continue
            if name in READS and c.version == self.version:
                raise ToolError(f"repeated call: identical to call #{i + 1} and nothing has "
                                f"changed since; its result was:\n{c.result}")
            if name not in READS:
                raise ToolError(f"repeated call: identical to call #{i + 1}, which already "
                                "succeeded; not run again")
        if name == "ask_user":
            field = str(args["field"])
            if field not in self.user.script.hidden:  # asking everything must not pay
                self.broken.append({"rule": "needless_question", "table": None,
                                    "row": f"ask_user:{field}",
                                    "detail": f"asked for the {field}, which the request "
                                              "did not leave out"})
            result = self.user.ask(field)
        elif name in ("finish", "refuse"):
            if name == "finish" and (more := self.user.pending()):
                # An efficient agent must not lose a request the user had not voiced yet:
                # the user says it now, nothing is recorded, and the episode goes on.
                raise ToolError("not finished: before you finish, the user adds: "
                                + " ".join(more))
            self.ending = (name, str(args.get("answer", args.get("reason", ""))))
            result = "Finished." if name == "finish" else "Request refused."
        else:
            action = ACTIONS.get(name)
            if action is None:
                raise ToolError(f"unknown tool {name!r}")
            if name not in READS and self._last is None:  # a reset or a read costs none
                self._last = self.world.snapshot()
            try:
                with self.world.transaction() as conn:
                    result = action(Ctx(conn, self.now, self.requester), **args)
            except OverflowError as exc:  # an integer SQLite cannot store: the agent's input
                raise ToolError(f"a number in the arguments is out of range ({exc})") from exc
            except sa.exc.IntegrityError:  # the same record twice: the agent's doing
                raise ToolError(f"{name}: conflict: an identical record already exists") \
                    from None
            except sa.exc.SQLAlchemyError as exc:  # not the agent's doing: unscored, not 0
                raise BackendError(f"{name}: the world database failed: {exc}") from exc
            if name not in READS:
                self.version += 1
                self._note_invented(name, args)
                after = self.world.snapshot()
                self.broken += violations(self._last or {}, after, self.now)
                self._last = after
            if name == "transfer_to_human":
                self.ending = ("handoff", str(args["reason"]))
        self.calls.append(Call(name, args, result, self.version))
        return result

    def _note_invented(self, name: str, args: dict[str, Any]) -> None:
        for slot, secret in self.user.unrevealed().items():
            for arg, value in args.items():
                if _same(value, secret):
                    self.invented.append({"rule": "invented_value", "tool": name,
                                          "argument": arg, "slot": slot,
                                          "detail": f"{name}({arg}=...) used the {slot} "
                                                    "before the user revealed it"})


def calls_of(submission: Any) -> list[tuple[str, dict[str, Any], int]] | str:
    """``(name, arguments, turn)`` from a submission, or why it holds none.

    An assistant message is one turn (also one without calls); a bare call is a turn of
    its own, as in a gold program. Replay needs the turns because the user's follow-ups
    are said by turn.
    """
    if not isinstance(submission, list | tuple):
        return f"submission is {type(submission).__name__}, not a list of tool calls"
    out: list[tuple[str, dict[str, Any], int]] = []
    turn = 0
    for i, item in enumerate(submission):
        if isinstance(item, dict) and "role" in item:
            try:
                item = Message.from_dict(item)
            except ValueError as exc:
                return f"item {i}: {exc}"
        if isinstance(item, Message):  # live, calls past the per-turn cap are not run
            if item.role != "assistant":  # a transcript's other messages are not turns
                continue
            turn += 1
            calls = (item.tool_calls or ())[:MAX_CALLS_PER_TURN]
            out += [(c.name, dict(c.arguments), turn) for c in calls]
            continue
        try:
            call = item if isinstance(item, ToolCall) else ToolCall.from_dict(item)
        except ValueError as exc:
            return f"item {i}: {exc}"
        turn += 1
        out.append((call.name, dict(call.arguments), turn))
    return out

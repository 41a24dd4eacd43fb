"""``tools-v0``: a stateful simulated workplace, scored by rules on the state left behind.

The agent serves one employee (the requester) of a small company: people and teams,
calendars, mail, inventory and orders, bank accounts and transfers, support tickets,
all in one SQLite database per episode (:mod:`.world`). It calls tools, each one
transaction (:mod:`.actions`); the user is deterministic (:mod:`.user`): withheld
values come only through ``ask_user``, follow-ups arrive after a given turn. The agent
ends with ``finish(answer)``, ``refuse(reason)`` or ``transfer_to_human`` (which
writes a handoff row). No LLM anywhere: the score (:mod:`.scoring`) is the product of
the end state matching the gold program's end state, the company policies, the typed
answer and the ending.

Reference policies beyond gold: ``noop_action`` (finish at once), ``refuse_action`` and
``random_action`` (a schema-valid call with plausible arguments); the generator
guarantees gold 1.0 on every task, noop 0, refuse 1 only on refusal tasks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from gymhub.errors import BackendError, ConfigError, ToolError
from gymhub.types import Message, Score, StepResult, ToolCall, VerifierCase

from ..tasks import Task, filter_tasks, resolve_tasks
from .base import Final, ToolEnv, tool
from .policies import POLICY_TEXT
from .random_args import random_arguments
from .scoring import initial_snapshot, score_session, state_verifier
from .session import Session, calls_of
from .tasks import attach_gold_states, builtin_tasks, load_task_file
from .user import Field
from .world import DOMAIN, World, WorldRef

__all__ = ["ToolsEnv"]

Status = Literal["open", "pending", "closed"]
Priority = Literal["low", "normal", "high", "urgent"]
Reason = Literal["account_frozen", "billing_dispute", "legal_request", "other"]

_SYSTEM = """You are the operations assistant of Acme (mail domain @{domain}). You act for \
{user}; it is now {now}. Use the tools to do what they ask. Every tool call is applied at \
once and for real. When you are done, call finish(answer); if they asked a question, the \
answer holds only what was asked (e.g. just the amount, or just the ids), no other figures. \
Call refuse(reason) instead if the request cannot be done within policy, or \
transfer_to_human(reason, \
summary) when policy says a human must handle it. If a value you need was not given, ask \
for it with ask_user(field, question); never guess.

{policies}"""


class ToolsEnv(ToolEnv):
    """The tool-use workplace environment.

    Args:
        tasks: ``None`` for the built-in tasks, a JSONL file (see
            :func:`~.tasks.load_task_file`), or tasks (``fixture`` a :class:`WorldRef`,
            ``gold`` with ``program``, ``ending``, ``answer``, ``user``; a missing gold
            end state is computed by running the program).
        max_turns: turn budget; running out truncates the episode with score 0.
        categories: keep only tasks with these ``meta["category"]`` values.
        render_mode: ``"ansi"`` or ``None``.
    """

    def __init__(
        self,
        tasks: str | Path | Sequence[Task] | None = None,
        *,
        max_turns: int = 16,
        categories: str | Sequence[str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        task_list = resolve_tasks(tasks, lambda: list(builtin_tasks()), load_task_file)
        missing = [t for t in task_list if "state" not in (t.gold or {})]
        if missing:
            attach_gold_states(missing)  # tasks given as objects: run their gold programs
        task_list = filter_tasks(task_list, "category", categories)
        if not task_list:
            raise ConfigError(f"no tools-v0 tasks in categories {categories!r}")
        super().__init__(task_list, max_turns=max_turns, render_mode=render_mode)
        self.verifier = state_verifier()
        self.world = World()
        self.session: Session | None = None
        self._gold_cursor = 0
        self._replay_world: World | None = None

    # ------------------------------------------------------------------ episode
    def _start(self, task: Task) -> tuple[list[Message], dict[str, Any]]:
        self.session = Session(self.world, task)
        self._gold_cursor = 0
        system = _SYSTEM.format(domain=DOMAIN, user=task.meta["user"], now=task.meta["now"],
                                policies=POLICY_TEXT)
        observation = [Message(role="system", content=system),
                       Message(role="user", content=task.prompt)]
        return observation, {"verifier": self.verifier.id, "user": task.meta["user"]}

    def _step(self, action: Message) -> StepResult:
        result = super()._step(action)
        program = self._program()
        calls = action.tool_calls or ()
        if calls and self._gold_cursor < len(program):
            want = program[self._gold_cursor]
            if calls[0].name == want["name"] and calls[0].arguments == want["arguments"]:
                self._gold_cursor += 1
        if not result.terminated and self.session is not None:
            for text in self.session.user.after_turn(self.turn + 1):
                result.observation.append(Message(role="user", content=text))
        return result

    def _end(self) -> None:
        self.session = None

    def _truncation_score(self) -> Score:
        """Out of turns: scored like any episode (so the diff is there), ending ``None``."""
        if self.session is None:
            return super()._truncation_score()
        score = score_session(self.session)
        details = {**score.details, "reason": "truncated: the episode never ended"}
        return Score(0.0, score.components, score.error, details, score.verifier)

    def close(self) -> None:
        """End the episode and free the world's connection."""
        super().close()
        self.world.close()
        if self._replay_world is not None:
            self._replay_world.close()

    def on_text(self, action: Message) -> StepResult:
        """Text without a tool call: say how to act and how to end."""
        result = super().on_text(action)
        result.observation[0] = Message(
            role="user",
            content=result.observation[0].content + " To end the episode call finish(answer), "
            "refuse(reason) or transfer_to_human(reason, summary).")
        return result

    def _session(self) -> Session:
        if self.session is None:
            raise ToolError("no episode is running")
        return self.session

    def _run(self, name: str, **arguments: Any) -> str:
        return self._session().run(name, {k: v for k, v in arguments.items() if v is not None})

    def _final(self, name: str, **arguments: Any) -> Final:
        text = self._run(name, **arguments)
        return Final(text, score_session(self._session()))

    # ------------------------------------------------------- people, calendar, mail
    @tool
    def find_person(self, query: str) -> str:
        """Find employees by (part of) their name or email.

        Args:
            query: a name, part of a name, or an email address.
        """
        return self._run("find_person", query=query)

    @tool
    def list_team(self, team: str) -> str:
        """List a team's members and its manager.

        Args:
            team: the team's name, e.g. Sales.
        """
        return self._run("list_team", team=team)

    @tool
    def get_calendar(self, email: str, date: str) -> str:
        """Show an employee's meetings on one day.

        Args:
            email: the employee's email address.
            date: the day, YYYY-MM-DD.
        """
        return self._run("get_calendar", email=email, date=date)

    @tool
    def schedule_meeting(self, title: str, attendees: list[str], date: str, start: str,
                         duration_minutes: int) -> str:
        """Schedule a meeting organised by the requester; fails if anyone is busy then.

        Args:
            title: the meeting's title.
            attendees: email addresses of the people invited (not the organiser).
            date: the day, YYYY-MM-DD.
            start: the start time, HH:MM (24-hour).
            duration_minutes: length in minutes (15-480).
        """
        return self._run("schedule_meeting", title=title, attendees=attendees, date=date,
                         start=start, duration_minutes=duration_minutes)

    @tool
    def cancel_meeting(self, meeting_id: str) -> str:
        """Cancel a meeting the requester organised.

        Args:
            meeting_id: the meeting's id, e.g. MTG-1A2B3C.
        """
        return self._run("cancel_meeting", meeting_id=meeting_id)

    @tool
    def send_email(self, to: str, subject: str, body: str) -> str:
        """Send an email from the requester.

        Args:
            to: the recipient's email address.
            subject: the subject line.
            body: the message text.
        """
        return self._run("send_email", to=to, subject=subject, body=body)

    # ---------------------------------------------------------- inventory, orders
    @tool
    def search_products(self, query: str) -> str:
        """Find products by (part of) their name or SKU, with stock and price.

        Args:
            query: a product name, part of one, or a SKU.
        """
        return self._run("search_products", query=query)

    @tool
    def place_order(self, customer: str, sku: str, quantity: int) -> str:
        """Place an order for a customer; takes the units out of stock.

        Args:
            customer: the customer's email address.
            sku: the product's SKU, e.g. SKU-107.
            quantity: units to order (at least 1).
        """
        return self._run("place_order", customer=customer, sku=sku, quantity=quantity)

    @tool
    def get_order(self, order_id: str) -> str:
        """Show an order: items, customer, status and date.

        Args:
            order_id: the order's id, e.g. ORD-1004.
        """
        return self._run("get_order", order_id=order_id)

    @tool
    def cancel_order(self, order_id: str) -> str:
        """Cancel an order that has not shipped; its units go back in stock.

        Args:
            order_id: the order's id.
        """
        return self._run("cancel_order", order_id=order_id)

    # -------------------------------------------------------- accounts, transfers
    @tool
    def list_accounts(self) -> str:
        """List the requester's bank accounts with balances."""
        return self._run("list_accounts")

    @tool
    def get_account(self, number: str) -> str:
        """Show one of the requester's accounts.

        Args:
            number: the account number, e.g. ACC-0012.
        """
        return self._run("get_account", number=number)

    @tool
    def request_approval(self, from_account: str, to_account: str, amount: float) -> str:
        """Get a manager's approval for a transfer; returns the approval id.

        Args:
            from_account: the requester's account the money leaves.
            to_account: the account the money goes to.
            amount: the amount in dollars.
        """
        return self._run("request_approval", from_account=from_account, to_account=to_account,
                         amount=amount)

    @tool
    def transfer_funds(self, from_account: str, to_account: str, amount: float, memo: str,
                       approval_id: str | None = None) -> str:
        """Move money from one of the requester's accounts to another account.

        Args:
            from_account: the requester's account the money leaves.
            to_account: the account the money goes to.
            amount: the amount in dollars (at most 2 decimals).
            memo: the transfer's memo.
            approval_id: the approval id from request_approval, when one is needed.
        """
        return self._run("transfer_funds", from_account=from_account, to_account=to_account,
                         amount=amount, memo=memo, approval_id=approval_id)

    # --------------------------------------------------------------------- tickets
    @tool
    def list_tickets(self, customer: str | None = None, status: Status | None = None) -> str:
        """List support tickets, optionally of one customer and/or one status.

        Args:
            customer: the customer's email address.
            status: open, pending or closed.
        """
        return self._run("list_tickets", customer=customer, status=status)

    @tool
    def create_ticket(self, customer: str, subject: str, priority: Priority) -> str:
        """Open a support ticket for a customer.

        Args:
            customer: the customer's email address.
            subject: what the ticket is about.
            priority: low, normal, high or urgent.
        """
        return self._run("create_ticket", customer=customer, subject=subject, priority=priority)

    @tool
    def update_ticket(self, ticket_id: str, status: Status | None = None,
                      priority: Priority | None = None, assignee: str | None = None) -> str:
        """Change a ticket's status, priority and/or assignee.

        Args:
            ticket_id: the ticket's id, e.g. TKT-512.
            status: open, pending or closed.
            priority: low, normal, high or urgent.
            assignee: the email address of the employee who takes it.
        """
        return self._run("update_ticket", ticket_id=ticket_id, status=status, priority=priority,
                         assignee=assignee)

    # ------------------------------------------------------------ user and endings
    @tool
    def ask_user(self, field: Field, question: str) -> str:
        """Ask the requester for a value their request left out.

        Args:
            field: which value you need.
            question: the question, in a sentence.
        """
        return self._run("ask_user", field=field, question=question)

    @tool
    def finish(self, answer: str) -> Final:
        """Finish the request; this ends the episode.

        Args:
            answer: the answer to the requester's question, or a short confirmation.
        """
        return self._final("finish", answer=answer)

    @tool
    def refuse(self, reason: str) -> Final:
        """Decline a request that cannot be done within policy; this ends the episode.

        Args:
            reason: why, in a sentence.
        """
        return self._final("refuse", reason=reason)

    @tool
    def transfer_to_human(self, reason: Reason, summary: str) -> Final:
        """Hand the request to a human agent (records a handoff); this ends the episode.

        Args:
            reason: account_frozen, billing_dispute, legal_request or other.
            summary: what the human needs to know.
        """
        return self._final("transfer_to_human", reason=reason, summary=summary)

    # ------------------------------------------------------------------ verifier
    def expected_scores(self, policy: str, task: Task) -> tuple[float, float] | None:
        """``refuse`` passes exactly the refusal tasks; random valid calls pass no other task.

        (A random refusal or handoff with the right reason can pass a task that ends that
        way in one call, so there ``random`` is unbounded.)
        """
        ending = task.gold["ending"]
        if policy == "refuse":
            return (1.0, 1.0) if ending == "refuse" else (0.0, 0.0)
        if policy == "random":
            return (0.0, 1.0) if ending in ("refuse", "handoff") else (0.0, 0.0)
        return None

    def replace_verifier(self, verifier: Any) -> None:
        """Refused: tools-v0 scores state, policy, answer and ending by its own rules.

        Raises:
            ConfigError: always; its state component's spec is fixed by the world schema.
        """
        raise ConfigError("tools-v0 scores with its own rules (state x policy x answer x "
                          "ending); its verifier cannot be replaced by a spec")

    def verify(self, submission: Any, task: Task) -> Score:
        """Score a recorded episode offline by replaying its tool calls on a fresh world.

        ``submission`` is the episode's calls in order: :class:`ToolCall` objects,
        ``{"name", "arguments"}`` dicts, or assistant messages carrying them (a stored
        transcript). Calls are validated exactly as in an episode; refused ones change
        nothing, as live. Replay is exact because the world is deterministic (frozen
        clock, content-keyed ids), which is what makes ``gymhub rescore`` possible and
        doubles as a live-vs-replay check in tests.
        """
        calls = calls_of(submission)
        if isinstance(calls, str):
            return Score(0.0, details={"reason": calls}, verifier=self.verifier.id)
        if self._replay_world is None:
            self._replay_world = World()
        session = Session(self._replay_world, task)
        for name, arguments, turn in calls:
            session.user.after_turn(turn - 1)  # follow-ups said by the end of the last turn
            tool_def = self._tool_defs.get(name)
            if tool_def is None:
                continue
            try:
                args = tool_def.validate(arguments)
                session.run(name, {k: v for k, v in args.items() if v is not None})
            except ToolError:
                continue
            except BackendError as exc:
                return Score.failed(f"replay of {name} failed: {exc}", self.verifier.id)
            if session.ending is not None:
                break
        if session.ending is None:
            return Score(0.0, details={"reason": "the calls never end the episode (finish, "
                                                 "refuse or transfer_to_human)"},
                         verifier=self.verifier.id)
        return score_session(session)

    def verifier_cases(self, task: Task) -> list[VerifierCase]:
        """The gold program passes; finishing at once fails; non-calls are malformed."""
        program = [dict(c) for c in task.gold["program"]]
        return [
            VerifierCase(program, "pass", "gold program"),
            VerifierCase([{"name": "finish", "arguments": {"answer": ""}}], "fail", "noop"),
            VerifierCase(program[:-1], "malformed", "gold program without its ending"),
            VerifierCase("finish()", "malformed", "text, not calls"),
            VerifierCase([42], "malformed", "a call that is not a call"),
        ]

    # ------------------------------------------------------- reference policies
    def _program(self) -> list[dict[str, Any]]:
        return list(self.task.gold["program"]) if self.task is not None else []

    def gold_action(self) -> Message:
        """The next call of the task's gold program (the ending once it is played out)."""
        program = self._program()
        step = program[min(self._gold_cursor, len(program) - 1)]
        return _call(step["name"], dict(step["arguments"]), "gold")

    def noop_action(self) -> Message:
        """Do nothing: finish at once with an empty answer."""
        return _call("finish", {"answer": ""}, "noop")

    def refuse_action(self) -> Message:
        """Decline whatever was asked."""
        return _call("refuse", {"reason": "I can't help with this request."}, "refuse")

    def random_action(self, rng: random.Random) -> Message:
        """A schema-valid call to a random tool with plausible arguments from the world."""
        assert self.task is not None and isinstance(self.task.fixture, WorldRef)
        name = rng.choice([s.name for s in self.tool_specs()])
        return _call(name, random_arguments(name, rng, self.task), "random")

    def initial_state(self) -> dict[str, Any]:
        """The current task's world before any call (for tests and diagnostics)."""
        assert self.task is not None and isinstance(self.task.fixture, WorldRef)
        return initial_snapshot(self.task.fixture)


def _call(name: str, arguments: dict[str, Any], tag: str) -> Message:
    return Message(role="assistant", content="",
                   tool_calls=(ToolCall(id=f"{tag}-{name}", name=name, arguments=arguments),))

"""The domain operations behind ``tools-v0``'s tools, on one open transaction.

Each function takes a :class:`Ctx` (the transaction, the frozen clock, who is asking)
and validated arguments, and returns the text the agent sees. A refusal is a
:class:`~gymhub.errors.ToolError` (not found, conflict, insufficient funds or stock,
permission denied); the caller rolls the transaction back, so a refused call leaves
no trace. The tools do *not* enforce the company policies of the system prompt
(approvals, working hours, internal mail, the cancellation window): breaking those is
possible, and is what :mod:`.policies` scores.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from gymhub.errors import ToolError

from .world import DOMAIN, METADATA, content_id

__all__ = ["ACTIONS", "Ctx", "approver_for"]

_EMAIL = re.compile(r"^[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}$")
_T = METADATA.tables


@dataclass
class Ctx:
    """What every operation runs in: one transaction, a frozen clock, the requester."""

    conn: sa.Connection
    now: dt.datetime
    requester: str

    def rows(self, table: str, *where: Any) -> list[dict[str, Any]]:
        """Rows of ``table`` matching ``where``, by primary key."""
        t = _T[table]
        stmt = sa.select(t).where(*where).order_by(*t.primary_key.columns)
        return [dict(r) for r in self.conn.execute(stmt).mappings()]

    def one(self, table: str, column: str, value: Any, what: str) -> dict[str, Any]:
        """The row whose ``column`` is ``value``, or a "not found" tool error with a hint."""
        found = self.rows(table, _T[table].c[column] == value)
        if found:
            return found[0]
        known = [str(r[column]) for r in self.rows(table)]
        hint = difflib.get_close_matches(str(value), known, n=1)
        did = f" Did you mean {hint[0]!r}?" if hint else ""
        raise ToolError(f"not found: no {what} {value!r}.{did}")

    def insert(self, table: str, **values: Any) -> None:
        """Insert one row."""
        self.conn.execute(_T[table].insert().values(**values))

    def update(self, table: str, where: Any, **values: Any) -> None:
        """Update the rows matching ``where``."""
        self.conn.execute(_T[table].update().where(where).values(**values))

    def count(self, table: str, *where: Any) -> int:
        """How many rows match ``where``."""
        stmt = sa.select(sa.func.count()).select_from(_T[table]).where(*where)
        return int(self.conn.execute(stmt).scalar_one())


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _address(value: str, what: str = "address") -> str:
    addr = value.strip().lower()
    if not _EMAIL.match(addr):
        raise ToolError(f"invalid {what} {value!r}: expected an email address like "
                        f"name@{DOMAIN}")
    return addr


def _person(ctx: Ctx, email: str) -> dict[str, Any]:
    return ctx.one("people", "email", _address(email), "person with email")


def _date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(f"invalid date {value!r}: use YYYY-MM-DD") from None


def _time(value: str) -> dt.time:
    if not re.match(r"^\d{2}:\d{2}$", value.strip()):
        raise ToolError(f"invalid time {value!r}: use HH:MM (24-hour)")
    try:
        return dt.time.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(f"invalid time {value!r}: use HH:MM (24-hour)") from None


def _text(value: str, name: str) -> str:
    text = value.strip()
    if not text:
        raise ToolError(f"argument {name!r} must not be empty")
    return text


def _amount(value: float) -> float:
    if not math.isfinite(value) or value <= 0 or round(value, 2) != value:
        raise ToolError(f"invalid amount {value!r}: a positive number with at most 2 decimals")
    return float(value)


# --------------------------------------------------------------- people, calendar, mail
def find_person(ctx: Ctx, query: str) -> str:
    q = _text(query, "query").lower()
    people = [p for p in ctx.rows("people") if q in p["name"].lower() or q in p["email"]]
    if not people:
        return f"No person matches {query!r}."
    return "\n".join(f"{p['name']} <{p['email']}>, team {p['team']}, {p['role']}"
                     for p in people)


def list_team(ctx: Ctx, team: str) -> str:
    t = ctx.one("teams", "name", team.strip(), "team")
    people = ctx.rows("people", _T["people"].c.team == t["name"])
    lines = [f"Team {t['name']} (manager {t['manager']}):"]
    lines += [f"  {p['name']} <{p['email']}>, {p['role']}" for p in people]
    return "\n".join(lines)


def _day_meetings(ctx: Ctx, email: str, day: dt.date) -> list[dict[str, Any]]:
    m = _T["meetings"].c
    rows = ctx.rows("meetings", m.start.like(f"{day.isoformat()}%"))
    return [r for r in rows if r["organizer"] == email or email in r["attendees"].split(",")]


def get_calendar(ctx: Ctx, email: str, date: str) -> str:
    person, day = _person(ctx, email), _date(date)
    rows = _day_meetings(ctx, person["email"], day)
    if not rows:
        return f"{person['name']} has no meetings on {day.isoformat()}."
    return "\n".join(f"{r['id']} {r['start'][11:]}-{r['end'][11:]} {r['title']!r} "
                     f"(organizer {r['organizer']})" for r in rows)


def schedule_meeting(ctx: Ctx, title: str, attendees: list[str], date: str, start: str,
                     duration_minutes: int) -> str:
    title = _text(title, "title")
    if not attendees:
        raise ToolError("argument 'attendees' must name at least one person")
    if not 15 <= duration_minutes <= 480:
        raise ToolError(f"invalid duration {duration_minutes}: 15 to 480 minutes")
    begin = dt.datetime.combine(_date(date), _time(start))
    end = begin + dt.timedelta(minutes=duration_minutes)
    if begin < ctx.now:
        raise ToolError(f"conflict: {begin:%Y-%m-%d %H:%M} is in the past "
                        f"(now {ctx.now:%Y-%m-%d %H:%M})")
    emails = sorted({_person(ctx, a)["email"] for a in attendees} - {ctx.requester})
    if not emails:
        raise ToolError("argument 'attendees' must name someone besides the organizer")
    s, e = f"{begin:%Y-%m-%d %H:%M}", f"{end:%Y-%m-%d %H:%M}"
    for who in [ctx.requester, *emails]:
        for r in _day_meetings(ctx, who, begin.date()):
            if r["start"] < e and s < r["end"]:
                raise ToolError(f"conflict: {who} is busy {r['start'][11:]}-{r['end'][11:]} "
                                f"({r['title']!r})")
    mid = content_id("MTG", title, s)
    if ctx.count("meetings", _T["meetings"].c.id == mid):
        raise ToolError(f"conflict: meeting {title!r} at {s} already exists ({mid})")
    ctx.insert("meetings", id=mid, title=title, organizer=ctx.requester, start=s, end=e,
               attendees=",".join(emails))
    return f"Scheduled {mid}: {title!r} {s}-{e[11:]} with {', '.join(emails)}."


def cancel_meeting(ctx: Ctx, meeting_id: str) -> str:
    row = ctx.one("meetings", "id", meeting_id.strip().upper(), "meeting")
    if row["organizer"] != ctx.requester:
        raise ToolError(f"permission denied: only the organizer ({row['organizer']}) may cancel "
                        f"{row['id']}")
    ctx.conn.execute(_T["meetings"].delete().where(_T["meetings"].c.id == row["id"]))
    return f"Cancelled {row['id']} ({row['title']!r})."


def send_email(ctx: Ctx, to: str, subject: str, body: str) -> str:
    addr = _address(to)
    if addr.endswith("@" + DOMAIN):
        _person(ctx, addr)
    subject, body = _text(subject, "subject"), _text(body, "body")
    o = _T["outbox"].c
    n = ctx.count("outbox", o.to_addr == addr, o.subject == subject, o.body == body)
    mid = content_id("MAIL", addr, subject, body, n)
    ctx.insert("outbox", id=mid, sender=ctx.requester, to_addr=addr, subject=subject, body=body,
               sent_at=f"{ctx.now:%Y-%m-%d %H:%M}")
    return f"Sent {mid} to {addr}: {subject!r}."


# ------------------------------------------------------------------ inventory, orders
def search_products(ctx: Ctx, query: str) -> str:
    q = _text(query, "query").lower()
    rows = [p for p in ctx.rows("products") if q in p["name"].lower() or q in p["sku"].lower()]
    if not rows:
        return f"No product matches {query!r}."
    return "\n".join(f"{p['sku']} {p['name']}: {p['stock']} in stock, {_money(p['price'])}"
                     for p in rows)


def place_order(ctx: Ctx, customer: str, sku: str, quantity: int) -> str:
    addr = _address(customer, "customer address")
    if quantity < 1:
        raise ToolError(f"invalid quantity {quantity}: at least 1")
    product = ctx.one("products", "sku", sku.strip().upper(), "product with SKU")
    if product["stock"] < quantity:
        raise ToolError(f"insufficient stock: {quantity} × {product['sku']} requested, "
                        f"{product['stock']} in stock")
    ctx.update("products", _T["products"].c.sku == product["sku"],
               stock=product["stock"] - quantity)
    day = ctx.now.date().isoformat()
    o = _T["orders"].c
    n = ctx.count("orders", o.customer == addr, o.sku == product["sku"], o.created_at == day)
    oid = content_id("ORD", addr, product["sku"], day, n)
    ctx.insert("orders", id=oid, customer=addr, sku=product["sku"], quantity=quantity,
               status="placed", created_at=day)
    return f"Placed {oid}: {quantity} × {product['sku']} ({product['name']}) for {addr}."


def get_order(ctx: Ctx, order_id: str) -> str:
    o = ctx.one("orders", "id", order_id.strip().upper(), "order")
    return (f"{o['id']}: {o['quantity']} × {o['sku']} for {o['customer']}, status {o['status']}, "
            f"created {o['created_at']}")


def cancel_order(ctx: Ctx, order_id: str) -> str:
    o = ctx.one("orders", "id", order_id.strip().upper(), "order")
    if o["status"] != "placed":
        raise ToolError(f"conflict: {o['id']} is {o['status']} and cannot be cancelled")
    ctx.update("orders", _T["orders"].c.id == o["id"], status="cancelled")
    p = ctx.one("products", "sku", o["sku"], "product with SKU")
    ctx.update("products", _T["products"].c.sku == o["sku"], stock=p["stock"] + o["quantity"])
    return f"Cancelled {o['id']}; {o['quantity']} × {o['sku']} back in stock."


# ---------------------------------------------------------------- accounts, transfers
def _account_line(a: dict[str, Any]) -> str:
    frozen = " (FROZEN)" if a["frozen"] else ""
    return f"{a['number']} {a['kind']}: balance {_money(a['balance'])}{frozen}"


def _own_account(ctx: Ctx, number: str) -> dict[str, Any]:
    acc = ctx.one("accounts", "number", number.strip().upper(), "account")
    if acc["owner"] != ctx.requester:
        raise ToolError(f"permission denied: {acc['number']} belongs to someone else")
    return acc


def list_accounts(ctx: Ctx) -> str:
    rows = ctx.rows("accounts", _T["accounts"].c.owner == ctx.requester)
    return "\n".join(_account_line(a) for a in rows) or "You have no accounts."


def get_account(ctx: Ctx, number: str) -> str:
    return _account_line(_own_account(ctx, number))


def approver_for(people: list[dict[str, Any]], teams: list[dict[str, Any]],
                 requester: str) -> str:
    """Who approves the requester's transfers: their team's manager, else Finance's."""
    team = next(str(p["team"]) for p in people if p["email"] == requester)
    managers = {str(t["name"]): str(t["manager"]) for t in teams}
    first = managers[team]
    return first if first != requester else managers["Finance" if team != "Finance" else "Sales"]


def request_approval(ctx: Ctx, from_account: str, to_account: str, amount: float) -> str:
    src = _own_account(ctx, from_account)
    dst = ctx.one("accounts", "number", to_account.strip().upper(), "account")
    amount = _amount(amount)
    aid = content_id("APR", src["number"], dst["number"], amount)
    if ctx.count("approvals", _T["approvals"].c.id == aid):
        raise ToolError(f"conflict: approval {aid} already exists for this transfer")
    approver = approver_for(ctx.rows("people"), ctx.rows("teams"), ctx.requester)
    ctx.insert("approvals", id=aid, from_account=src["number"], to_account=dst["number"],
               amount=amount, approver=approver, created_at=f"{ctx.now:%Y-%m-%d %H:%M}")
    return f"Approval {aid} granted by {approver} for {_money(amount)} " \
           f"{src['number']} -> {dst['number']}."


def transfer_funds(ctx: Ctx, from_account: str, to_account: str, amount: float, memo: str,
                   approval_id: str | None = None) -> str:
    src = _own_account(ctx, from_account)
    if src["frozen"]:
        raise ToolError(f"permission denied: {src['number']} is frozen; only a human "
                        "security agent can release it")
    dst = ctx.one("accounts", "number", to_account.strip().upper(), "account")
    if dst["number"] == src["number"]:
        raise ToolError("conflict: the source and destination accounts are the same")
    amount, memo = _amount(amount), _text(memo, "memo")
    if src["balance"] < amount:
        raise ToolError(f"insufficient funds: {src['number']} has {_money(src['balance'])}, "
                        f"{_money(amount)} requested")
    if approval_id is not None:
        apr = ctx.one("approvals", "id", approval_id.strip().upper(), "approval")
        if (apr["from_account"], apr["to_account"], apr["amount"]) != (
                src["number"], dst["number"], amount):
            raise ToolError(f"conflict: approval {apr['id']} does not cover this transfer")
        approval_id = apr["id"]
    a = _T["accounts"].c
    ctx.update("accounts", a.number == src["number"], balance=round(src["balance"] - amount, 2))
    ctx.update("accounts", a.number == dst["number"], balance=round(dst["balance"] + amount, 2))
    t = _T["transfers"].c
    n = ctx.count("transfers", t.from_account == src["number"], t.to_account == dst["number"],
                  t.amount == amount, t.memo == memo)
    tid = content_id("TRF", src["number"], dst["number"], amount, memo, n)
    ctx.insert("transfers", id=tid, from_account=src["number"], to_account=dst["number"],
               amount=amount, memo=memo, approval_id=approval_id,
               created_at=f"{ctx.now:%Y-%m-%d %H:%M}")
    return f"Transferred {_money(amount)} {src['number']} -> {dst['number']} ({tid})."


# ------------------------------------------------------------------------------ tickets
def list_tickets(ctx: Ctx, customer: str | None = None, status: str | None = None) -> str:
    c = _T["tickets"].c
    where = []
    if customer is not None:
        where.append(c.customer == _address(customer, "customer address"))
    if status is not None:
        where.append(c.status == status)
    rows = ctx.rows("tickets", *where)
    if not rows:
        return "No tickets match."
    return "\n".join(f"{t['id']} [{t['status']}, {t['priority']}] {t['customer']}: "
                     f"{t['subject']!r} (assignee {t['assignee'] or 'none'})" for t in rows)


def create_ticket(ctx: Ctx, customer: str, subject: str, priority: str) -> str:
    addr, subject = _address(customer, "customer address"), _text(subject, "subject")
    tid = content_id("TKT", addr, subject)
    if ctx.count("tickets", _T["tickets"].c.id == tid):
        raise ToolError(f"conflict: {addr} already has a ticket {subject!r} ({tid})")
    ctx.insert("tickets", id=tid, customer=addr, subject=subject, status="open",
               priority=priority, assignee=None, created_at=ctx.now.date().isoformat())
    return f"Created {tid} for {addr}: {subject!r} ({priority})."


def update_ticket(ctx: Ctx, ticket_id: str, status: str | None = None,
                  priority: str | None = None, assignee: str | None = None) -> str:
    t = ctx.one("tickets", "id", ticket_id.strip().upper(), "ticket")
    changes: dict[str, Any] = {}
    if status is not None:
        changes["status"] = status
    if priority is not None:
        changes["priority"] = priority
    if assignee is not None:
        changes["assignee"] = _person(ctx, assignee)["email"]
    if not changes:
        raise ToolError("nothing to update: give status, priority or assignee")
    ctx.update("tickets", _T["tickets"].c.id == t["id"], **changes)
    shown = ", ".join(f"{k}={v}" for k, v in changes.items())
    return f"Updated {t['id']}: {shown}."


def transfer_to_human(ctx: Ctx, reason: str, summary: str) -> str:
    summary = _text(summary, "summary")
    hid = content_id("HND", ctx.requester, reason)
    if ctx.count("handoffs", _T["handoffs"].c.id == hid):
        raise ToolError(f"conflict: already handed off ({hid})")
    ctx.insert("handoffs", id=hid, requester=ctx.requester, reason=reason, summary=summary,
               created_at=f"{ctx.now:%Y-%m-%d %H:%M}")
    return f"Handed off to a human agent ({hid}, reason {reason})."


#: Operation by tool name; all but the ones in ``READS`` write.
ACTIONS: dict[str, Callable[..., str]] = {
    f.__name__: f for f in (
        find_person, list_team, get_calendar, schedule_meeting, cancel_meeting, send_email,
        search_products, place_order, get_order, cancel_order, list_accounts, get_account,
        request_approval, transfer_funds, list_tickets, create_ticket, update_ticket,
        transfer_to_human,
    )
}
READS = frozenset({"find_person", "list_team", "get_calendar", "search_products", "get_order",
                   "list_accounts", "get_account", "list_tickets"})

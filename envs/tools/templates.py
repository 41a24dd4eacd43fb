"""The task templates of ``tools-v0``: one function per kind of request.

A template draws a request from a world's data (:class:`~.drafts.W`) with its own
seeded RNG and writes the gold *program*: the calls a careful agent makes (lookups,
``ask_user`` for withheld values, writes) and the ending. It returns ``None`` when the
world offers no fitting instance for that draw; the generator then draws again.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from .drafts import MAIL, MEMOS, NEW_SUBJECTS, SLOTS, TITLES, Draft, Template, W, c
from .world import CUSTOMERS, content_id, customer_email

__all__ = ["CATEGORIES", "TEMPLATES"]


# ------------------------------------------------------------------------------ lookups
def lookup_balance(rng: random.Random, w: W) -> Draft | None:
    p = rng.choice(w.people)
    acc = rng.choice(w.accounts(p["email"]))
    return Draft(f"What is the balance of my {acc['kind']} account right now? Just the amount, "
                 "please.", p["email"],
                 [c("list_accounts"), c("finish", answer=f"{acc['balance']:.2f}")],
                 answer={"type": "number", "value": acc["balance"]})


def lookup_stock(rng: random.Random, w: W) -> Draft | None:
    prod = rng.choice(w.rows["products"])
    return Draft(f"How many units of the {prod['name']} do we have in stock?",
                 rng.choice(w.people)["email"],
                 [c("search_products", query=prod["name"]), c("finish", answer=str(prod["stock"]))],
                 answer={"type": "number", "value": prod["stock"]})


def open_tickets(rng: random.Random, w: W) -> Draft | None:
    cust = customer_email(rng.choice(CUSTOMERS))
    ids = w.open_tickets(cust)
    if not ids:
        return None
    return Draft(f"Which support tickets from {cust} are still open? Reply with their ticket ids.",
                 rng.choice(w.people)["email"],
                 [c("list_tickets", customer=cust, status="open"),
                  c("finish", answer=", ".join(ids))], answer={"type": "ids", "value": ids})


# ------------------------------------------------------------------------------- writes
def email(rng: random.Random, w: W) -> Draft | None:
    target = rng.choice([p for p in w.people if p not in w.namesakes])
    me = w.other(rng, target["email"])
    subject, body = rng.choice(MAIL)
    return Draft(f'Email {target["name"]} with the subject "{subject}" and the body "{body}"',
                 me["email"], [c("find_person", query=target["name"]),
                               c("send_email", to=target["email"], subject=subject, body=body),
                               c("finish", answer="Sent.")])


def email_namesake(rng: random.Random, w: W) -> Draft | None:
    target = rng.choice(w.namesakes)
    first = target["name"].split()[0]
    me = w.other(rng, *(p["email"] for p in w.namesakes))
    subject, body = rng.choice(MAIL)
    return Draft(f'Send {first} from {target["team"]} an email, subject "{subject}", body '
                 f'"{body}" Our {rng.choice(["printer", "coffee machine"])} is broken again, '
                 "but that is not your problem.", me["email"],
                 [c("find_person", query=first),
                  c("send_email", to=target["email"], subject=subject, body=body),
                  c("finish", answer="Sent.")])


def _slot(rng: random.Random, w: W, emails: list[str], minutes: int,
          day: dt.date) -> str | None:
    slots = [s for s in SLOTS if w.free(emails, day, s, minutes)
             and (dt.datetime.fromisoformat(f"{day} {s}") + dt.timedelta(minutes=minutes)).time()
             <= dt.time(17)]
    return rng.choice(slots) if slots else None


def schedule(rng: random.Random, w: W) -> Draft | None:
    me, other = rng.sample(w.people, 2)
    dur, day = rng.choice([30, 45, 60]), w.day(rng)
    start = _slot(rng, w, [me["email"], other["email"]], dur, day)
    if start is None:
        return None
    title = rng.choice(TITLES)
    return Draft(f'Schedule a {dur}-minute meeting titled "{title}" with {other["name"]} on '
                 f"{day} at {start}.", me["email"],
                 [c("find_person", query=other["name"]),
                  c("schedule_meeting", title=title, attendees=[other["email"]], date=str(day),
                    start=start, duration_minutes=dur), c("finish", answer="Scheduled.")])


def schedule_conditional(rng: random.Random, w: W) -> Draft | None:
    m = rng.choice(w.rows["meetings"])
    day = dt.date.fromisoformat(m["start"][:10])
    if day <= w.now.date():
        return None
    inside = [m["organizer"], *m["attendees"].split(",")]
    chosen_email = rng.choice(inside)
    other = next(p for p in w.people if p["email"] == chosen_email)
    me = w.other(rng, *inside)
    pair, dur = [me["email"], other["email"]], 30
    first = m["start"][11:] if rng.random() < 0.6 else _slot(rng, w, pair, dur, day)
    second = _slot(rng, w, pair, dur, day)
    if first is None or second is None or first == second:
        return None
    chosen = first if w.free(pair, day, first, dur) else second
    title = rng.choice(TITLES)
    return Draft(f'Schedule "{title}" (30 minutes) with {other["name"]} on {day} at {first}; '
                 f"if either of us is busy then, make it {second} instead.", me["email"],
                 [c("find_person", query=other["name"]),
                  c("get_calendar", email=other["email"], date=str(day)),
                  c("get_calendar", email=me["email"], date=str(day)),
                  c("schedule_meeting", title=title, attendees=[other["email"]], date=str(day),
                    start=chosen, duration_minutes=dur), c("finish", answer="Scheduled.")])


def ask_meeting(rng: random.Random, w: W) -> Draft | None:
    me, other = rng.sample(w.people, 2)
    dur, day = rng.choice([30, 45]), w.day(rng)
    start = _slot(rng, w, [me["email"], other["email"]], dur, day)
    if start is None:
        return None
    title = rng.choice(TITLES)
    return Draft(f'Set up a {dur}-minute meeting "{title}" with {other["name"]} on {day}.',
                 me["email"],
                 [c("find_person", query=other["name"]),
                  c("ask_user", field="time", question="What time should the meeting start?"),
                  c("schedule_meeting", title=title, attendees=[other["email"]], date=str(day),
                    start=start, duration_minutes=dur), c("finish", answer="Scheduled.")],
                 hidden={"time": start})


def order(rng: random.Random, w: W, distract: bool = False) -> Draft | None:
    prod = rng.choice([p for p in w.rows["products"] if p["stock"] >= 2])
    qty = rng.randint(1, min(prod["stock"], 5))
    cust = customer_email(rng.choice(CUSTOMERS))
    prompt = f"Please order {qty} × {prod['name']} for {cust}."
    if distract:
        other = rng.choice([p for p in w.rows["products"] if p is not prod])
        prompt = (f"{customer_email(rng.choice(CUSTOMERS))} asked about the {other['name']} "
                  f"yesterday, but that can wait. {prompt}")
    return Draft(prompt, rng.choice(w.people)["email"],
                 [c("search_products", query=prod["name"]),
                  c("place_order", customer=cust, sku=prod["sku"], quantity=qty),
                  c("finish", answer="Ordered.")])


def order_distractor(rng: random.Random, w: W) -> Draft | None:
    return order(rng, w, distract=True)


def order_conditional(rng: random.Random, w: W) -> Draft | None:
    prod = rng.choice([p for p in w.rows["products"] if p["stock"] >= 1])
    qty = rng.randint(prod["stock"] + 1, prod["stock"] + 4) if rng.random() < 0.5 else \
        rng.randint(1, prod["stock"])
    cust = customer_email(rng.choice(CUSTOMERS))
    return Draft(f"Order {qty} units of the {prod['name']} for {cust}; if we have fewer than "
                 f"{qty} in stock, order all we have left instead.", rng.choice(w.people)["email"],
                 [c("search_products", query=prod["name"]),
                  c("place_order", customer=cust, sku=prod["sku"],
                    quantity=min(qty, prod["stock"])),
                  c("finish", answer="Ordered.")])


def _orders(w: W, recent: bool) -> list[dict[str, Any]]:
    cutoff = (w.now.date() - dt.timedelta(days=30)).isoformat()
    return [o for o in w.rows["orders"]
            if o["status"] == "placed" and (o["created_at"] >= cutoff) == recent]


def cancel_order(rng: random.Random, w: W) -> Draft | None:
    orders = _orders(w, recent=True)
    if not orders:
        return None
    o = rng.choice(orders)
    return Draft(f"{o['customer']} wants to cancel order {o['id']}. Please cancel it.",
                 rng.choice(w.people)["email"],
                 [c("get_order", order_id=o["id"]), c("cancel_order", order_id=o["id"]),
                  c("finish", answer="Cancelled.")])


def _transfer_parts(rng: random.Random, w: W, lo: float, hi: float
                    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], float] | None:
    me = rng.choice(w.people)
    src = w.checking(me["email"])
    amounts = [a for a in (50, 75, 120, 200, 350, 480, 600, 999, 1200, 1500, 2000, 2500)
               if lo <= a <= hi and a <= src["balance"]]
    if not amounts:
        return None
    dst = rng.choice([a for a in w.rows["accounts"] if a["owner"] != me["email"]])
    return me, src, dst, float(rng.choice(amounts))


def transfer(rng: random.Random, w: W) -> Draft | None:
    parts = _transfer_parts(rng, w, 1, 1000)
    if parts is None:
        return None
    me, src, dst, amount = parts
    memo = rng.choice(MEMOS)
    return Draft(f'Send ${amount:,.0f} from my checking account to account {dst["number"]} '
                 f'with the memo "{memo}".', me["email"],
                 [c("list_accounts"),
                  c("transfer_funds", from_account=src["number"], to_account=dst["number"],
                    amount=amount, memo=memo), c("finish", answer="Done.")])


def transfer_approval(rng: random.Random, w: W) -> Draft | None:
    parts = _transfer_parts(rng, w, 1001, 10_000)
    if parts is None:
        return None
    me, src, dst, amount = parts
    memo = rng.choice(MEMOS)
    aid = content_id("APR", src["number"], dst["number"], amount)
    return Draft(f'Transfer ${amount:,.0f} from my checking account to account {dst["number"]}, '
                 f'memo "{memo}".', me["email"],
                 [c("list_accounts"),
                  c("request_approval", from_account=src["number"], to_account=dst["number"],
                    amount=amount),
                  c("transfer_funds", from_account=src["number"], to_account=dst["number"],
                    amount=amount, memo=memo, approval_id=aid), c("finish", answer="Done.")])


def ask_transfer(rng: random.Random, w: W) -> Draft | None:
    me = rng.choice(w.people)
    src = w.checking(me["email"])
    other = w.other(rng, me["email"])
    dst = w.checking(other["email"])
    amount = rng.choice([37.5, 42.25, 58.4, 64.8, 73.15, 88.6])
    if amount > src["balance"]:
        return None
    memo = rng.choice(MEMOS)
    return Draft(f"Pay {other['name']} back from my checking account: their account is "
                 f'{dst["number"]}. Use the memo "{memo}".', me["email"],
                 [c("list_accounts"),
                  c("ask_user", field="amount", question="How much should I send?"),
                  c("transfer_funds", from_account=src["number"], to_account=dst["number"],
                    amount=amount, memo=memo), c("finish", answer="Done.")],
                 hidden={"amount": amount})


def bulk_tickets(rng: random.Random, w: W) -> Draft | None:
    cust = customer_email(rng.choice(CUSTOMERS))
    ids = w.open_tickets(cust)
    if not 1 <= len(ids) <= 5:
        return None
    who = rng.choice([p for p in w.people if p not in w.namesakes])
    return Draft(f"Close every open ticket from {cust} and assign each of them to {who['name']}.",
                 rng.choice(w.people)["email"],
                 [c("list_tickets", customer=cust, status="open"),
                  c("find_person", query=who["name"]),
                  *(c("update_ticket", ticket_id=t, status="closed", assignee=who["email"])
                    for t in ids), c("finish", answer="Closed.")])


def followup(rng: random.Random, w: W) -> Draft | None:
    cust = customer_email(rng.choice(CUSTOMERS))
    subject = rng.choice(NEW_SUBJECTS)
    who = rng.choice(w.people)
    return Draft(f'Open a support ticket for {cust} with the subject "{subject}" and normal '
                 "priority.", rng.choice(w.people)["email"],
                 [c("create_ticket", customer=cust, subject=subject, priority="normal"),
                  c("update_ticket", ticket_id=content_id("TKT", cust, subject), priority="high",
                    assignee=who["email"]), c("finish", answer="Done.")],
                 followups=[(1, f"One more thing: make that ticket high priority and assign it "
                                f"to {who['name']} ({who['email']}).")])


def meeting_with_notes(rng: random.Random, w: W) -> Draft | None:
    me, a, b = rng.sample([p for p in w.people if p not in w.namesakes], 3)
    day = w.day(rng)
    start = _slot(rng, w, [me["email"], a["email"], b["email"]], 30, day)
    if start is None:
        return None
    title = rng.choice(TITLES)
    body = f"Agenda: {rng.choice(['status', 'risks', 'next steps', 'budget'])}."
    mails = [c("send_email", to=p["email"], subject=title, body=body) for p in (a, b)]
    return Draft(f'Schedule a 30-minute meeting "{title}" with {a["name"]} and {b["name"]} on '
                 f'{day} at {start}, then email each of them with the subject "{title}" and the '
                 f'body "{body}"', me["email"],
                 [c("find_person", query=a["name"]), c("find_person", query=b["name"]),
                  c("schedule_meeting", title=title, attendees=[a["email"], b["email"]],
                    date=str(day), start=start, duration_minutes=30),
                  *mails, c("finish", answer="Scheduled and sent.")])


def replace_order(rng: random.Random, w: W) -> Draft | None:
    orders = _orders(w, recent=True)
    if not orders:
        return None
    o = rng.choice(orders)
    stock = next(p["stock"] for p in w.rows["products"] if p["sku"] == o["sku"])
    choices = [q for q in range(1, stock + o["quantity"] + 1) if q != o["quantity"]]
    if not choices:
        return None
    qty = rng.choice(choices[:6])
    return Draft(f"Order {o['id']} has the wrong quantity. Cancel it, place a new order of {qty} "
                 "units of the same product for the same customer, and open a normal-priority "
                 'ticket for them with the subject "Order replaced".',
                 rng.choice(w.people)["email"],
                 [c("get_order", order_id=o["id"]), c("cancel_order", order_id=o["id"]),
                  c("place_order", customer=o["customer"], sku=o["sku"], quantity=qty),
                  c("create_ticket", customer=o["customer"], subject="Order replaced",
                    priority="normal"), c("finish", answer="Replaced.")])


def ask_date_time(rng: random.Random, w: W) -> Draft | None:
    me, other = rng.sample(w.people, 2)
    day = w.day(rng)
    start = _slot(rng, w, [me["email"], other["email"]], 60, day)
    if start is None:
        return None
    title = rng.choice(TITLES)
    return Draft(f'Book a one-hour meeting "{title}" with {other["name"]} sometime this week.',
                 me["email"],
                 [c("find_person", query=other["name"]),
                  c("ask_user", field="date", question="Which day?"),
                  c("ask_user", field="time", question="What time?"),
                  c("schedule_meeting", title=title, attendees=[other["email"]], date=str(day),
                    start=start, duration_minutes=60), c("finish", answer="Booked.")],
                 hidden={"date": str(day), "time": start})


# ----------------------------------------------------------------------------- refusals
def refuse_hours(rng: random.Random, w: W) -> Draft | None:
    me, other = rng.sample(w.people, 2)
    if rng.random() < 0.3:
        day, start = w.now.date() + dt.timedelta(days=5), "10:00"  # a Saturday
    else:
        day, start = w.day(rng), rng.choice(["07:30", "18:00", "19:00", "20:30"])
    return Draft(f'Book a 30-minute meeting "{rng.choice(TITLES)}" with {other["name"]} on {day} '
                 f"at {start}. It has to be exactly then, no other time.", me["email"],
                 [c("find_person", query=other["name"]),
                  c("refuse", reason="Outside working hours, which company policy forbids.")],
                 ending="refuse")


def refuse_external(rng: random.Random, w: W) -> Draft | None:
    cust = customer_email(rng.choice(CUSTOMERS))
    return Draft(f'Email our internal price list to {cust}: subject "Price list", body "Attached '
                 'is our internal price list."', rng.choice(w.people)["email"],
                 [c("find_person", query=cust),
                  c("refuse", reason="Email may only go to company addresses.")], ending="refuse")


def refuse_old_cancel(rng: random.Random, w: W) -> Draft | None:
    orders = _orders(w, recent=False)
    if not orders:
        return None
    o = rng.choice(orders)
    return Draft(f"Cancel order {o['id']} for {o['customer']}; they changed their mind.",
                 rng.choice(w.people)["email"],
                 [c("get_order", order_id=o["id"]),
                  c("refuse", reason="The order is older than the 30-day cancellation window.")],
                 ending="refuse")


def refuse_others_account(rng: random.Random, w: W) -> Draft | None:
    me = rng.choice(w.people)
    other = w.other(rng, me["email"])
    acc = w.checking(other["email"])
    return Draft(f"Move $150 from {other['name']}'s account {acc['number']} into my checking "
                 "account. They said it's fine.", me["email"],
                 [c("list_accounts"),
                  c("refuse", reason="That account belongs to someone else.")], ending="refuse")


# ----------------------------------------------------------------------------- handoffs
def handoff_frozen(rng: random.Random, w: W) -> Draft | None:
    frozen = [a for a in w.rows["accounts"] if a["frozen"]]
    if not frozen:
        return None
    acc = rng.choice(frozen)
    return Draft("Move $100 from my savings account to my checking account.", acc["owner"],
                 [c("list_accounts"),
                  c("transfer_to_human", reason="account_frozen",
                    summary=f"Savings {acc['number']} is frozen; user wants $100 moved.")],
                 ending="handoff")


def handoff_dispute(rng: random.Random, w: W) -> Draft | None:
    o = rng.choice(w.rows["orders"])
    return Draft(f"{o['customer']} says they were charged twice for order {o['id']} and wants to "
                 "dispute the charge.", rng.choice(w.people)["email"],
                 [c("get_order", order_id=o["id"]),
                  c("transfer_to_human", reason="billing_dispute",
                    summary=f"Double charge reported on {o['id']}.")], ending="handoff")


#: (template, category, tasks generated).
TEMPLATES: list[tuple[Template, str, int]] = [
    (lookup_balance, "lookup", 16), (lookup_stock, "lookup", 16), (open_tickets, "lookup", 16),
    (email, "write", 16), (schedule, "write", 16), (order, "write", 16),
    (cancel_order, "write", 16), (transfer, "write", 16),
    (email_namesake, "distractor", 16), (order_distractor, "distractor", 16),
    (schedule_conditional, "conditional", 16), (order_conditional, "conditional", 16),
    (ask_meeting, "ask", 16), (ask_transfer, "ask", 16), (transfer_approval, "policy", 16),
    (ask_date_time, "ask", 16), (bulk_tickets, "multi", 16), (meeting_with_notes, "multi", 16),
    (replace_order, "multi", 16), (followup, "followup", 16),
    (refuse_hours, "refuse", 8), (refuse_external, "refuse", 8),
    (refuse_old_cancel, "refuse", 8), (refuse_others_account, "refuse", 8),
    (handoff_frozen, "handoff", 8), (handoff_dispute, "handoff", 8),
]
CATEGORIES: tuple[str, ...] = tuple(dict.fromkeys(cat for _, cat, _ in TEMPLATES))

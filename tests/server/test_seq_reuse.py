"""A reused ``seq`` must carry the same action: a retry replays, anything else is 409.

``seq`` is the step's idempotency key. Before, a second request with the last ``seq``
and a *different* action got the cached reply of the first, silently: a client bug
(two actions racing for one turn) looked like success. Like an idempotency key reused
with other parameters, it is now refused with ``seq_reused``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gymhub.errors import SeqReused
from gymhub.types import Message, ToolCall

from .conftest import run, served

TEXT = {"role": "assistant", "content": "thinking"}
LOOK = Message(role="assistant", content="",
               tool_calls=(ToolCall("l", "look", {}),)).to_dict()


def submit(word: str) -> dict[str, Any]:
    return Message(role="assistant", content="",
                   tool_calls=(ToolCall("s", "submit", {"answer": word}),)).to_dict()


def reordered(action: dict[str, Any]) -> dict[str, Any]:
    """The same action with its keys in reverse order (JSON objects are unordered)."""
    return dict(reversed(list(action.items())))


async def step(raw: httpx.AsyncClient, episode_id: str, seq: int, action: Any
               ) -> httpx.Response:
    return await raw.post(f"/v1/episodes/{episode_id}/step", json={"action": action, "seq": seq})


def test_a_reused_seq_with_another_action_is_409_and_a_retry_replays() -> None:
    async def body() -> None:
        async with served() as (_app, client, raw):
            ep = await client.open("echo-v0", seed=1)
            first = await step(raw, ep.id, 1, TEXT)
            assert first.status_code == 200
            for same in (TEXT, reordered(TEXT)):  # an identical retry: the cached bytes
                again = await step(raw, ep.id, 1, same)
                assert again.status_code == 200 and again.content == first.content
            for other in (LOOK, {**TEXT, "content": "thinking!"}, "thinking", None):
                r = await step(raw, ep.id, 1, other)
                assert r.status_code == 409, r.text
                error = r.json()["error"]
                assert error["code"] == "seq_reused" and "different action" in error["message"]
            with pytest.raises(SeqReused):  # typed on the client, and not retried
                await client.step(ep.id, LOOK, 1)
            nxt = await step(raw, ep.id, 2, TEXT)  # the refusals cost no turn
            assert nxt.status_code == 200 and nxt.json()["info"]["turn"] == 2
            text = (await raw.get("/metrics")).text
            assert 'gymhub_errors_total{code="seq_reused"} 5.0' in text
            assert "gymhub_step_replays_total 2.0" in text

    run(body)


def test_the_terminal_step_is_guarded_too() -> None:
    async def body() -> None:
        async with served() as (_app, client, raw):
            ep = await client.open("echo-v0", task_id="echo-0003")
            done = await step(raw, ep.id, 1, submit("cloud-3"))
            assert done.json()["terminated"]
            assert (await step(raw, ep.id, 1, submit("cloud-3"))).content == done.content
            r = await step(raw, ep.id, 1, submit("cloud-4"))
            assert r.status_code == 409 and r.json()["error"]["code"] == "seq_reused"

    run(body)


def test_a_reused_seq_in_a_batch_is_answered_as_its_own_request_would_be() -> None:
    async def body() -> None:
        async with served() as (_app, client, raw):
            a = await client.open("echo-v0", seed=1)
            b = await client.open("echo-v0", seed=2)
            r = await raw.post("/v1/batch", json={"ops": [
                {"op": "step", "episode_id": a.id, "seq": 1, "action": TEXT},
                {"op": "step", "episode_id": b.id, "seq": 1, "action": LOOK}]})
            first_a, first_b = r.json()["results"]
            assert first_a["status"] == first_b["status"] == 200
            r = await raw.post("/v1/batch", json={"ops": [
                {"op": "step", "episode_id": a.id, "seq": 1, "action": reordered(TEXT)},
                {"op": "step", "episode_id": b.id, "seq": 1, "action": TEXT},
                {"op": "step", "episode_id": a.id, "seq": 2, "action": LOOK},
                {"op": "step", "episode_id": a.id, "seq": 2, "action": TEXT}]})
            replay, reused, second, reused_again = r.json()["results"]
            assert replay == first_a  # the cached reply of the identical retry
            assert reused["status"] == reused_again["status"] == 409
            assert reused["body"]["error"]["code"] == "seq_reused"
            assert reused_again["body"]["error"]["code"] == "seq_reused"
            assert second["status"] == 200 and second["body"]["seq"] == 2
            single = await step(raw, b.id, 1, TEXT)  # the same answer on its own route
            assert single.status_code == 409 and single.json() == reused["body"]

    run(body)

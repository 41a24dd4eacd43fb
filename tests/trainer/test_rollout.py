"""Token-exact multi-turn rollouts against echo-v0 in-process."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("transformers")

from gymhub.trainer.backends import InProcessBackend
from gymhub.trainer.chat import ChatRenderer
from gymhub.trainer.engines import Completion, SamplingConfig, TransformersEngine
from gymhub.trainer.parsers import HermesParser
from gymhub.trainer.rollout import Budgets, run_group_batch, write_jsonl

LOOK = 'Let me look. <tool_call>{"name": "look", "arguments": {}}</tool_call>'


class ScriptedEngine:
    """Answers turn k of every episode with script[k], tokenised canonically."""

    def __init__(self, tokenizer, script, end=True):
        self.tok, self.script, self.end = tokenizer, script, end
        self.policy_version = 3
        self.batches = []

    def generate(self, requests, sampling):
        self.batches.append(len(requests))
        outs = []
        for r in requests:
            turn = self._turn(r.prompt_ids)
            text = self.script[min(turn, len(self.script) - 1)]
            word = (
                self.tok.decode(r.prompt_ids).split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
            )
            ids = self.tok.encode(text.replace("WORD", word), add_special_tokens=False)
            if self.end:
                ids.append(self.tok.eos_token_id)
            outs.append(
                Completion(
                    ids[: r.max_tokens],
                    [-0.5] * len(ids[: r.max_tokens]),
                    "stop" if self.end else "length",
                )
            )
        return outs

    def _turn(self, ids):
        start = self.tok.convert_tokens_to_ids("<|im_start|>")
        a = self.tok.encode("assistant", add_special_tokens=False)
        return (
            sum(
                1
                for i in range(len(ids) - len(a))
                if ids[i] == start and ids[i + 1 : i + 1 + len(a)] == a
            )
            - 1
        )

    def update_weights(self, model):
        pass

    def sleep(self):
        pass

    def wake_up(self):
        pass


def _run(engine, tokenizer, budgets=None, n_tasks=2, group=2, drift="strict"):
    budgets = budgets or Budgets()
    backend = InProcessBackend()
    tasks = [("echo-v0", f"echo-{i:04d}") for i in range(n_tasks)]
    trajs = asyncio.run(
        run_group_batch(
            backend=backend,
            engine=engine,
            renderer=ChatRenderer(tokenizer),
            parser=HermesParser(),
            sampling=SamplingConfig(stop_token_ids=(tokenizer.eos_token_id,)),
            budgets=budgets,
            tasks=tasks,
            group_size=group,
            seed=0,
            drift_check=drift,
        )
    )
    assert backend.open_episodes == 0
    return trajs


def test_token_exact_over_three_turns(tokenizer):
    submit = '<tool_call>{"name": "submit", "arguments": {"answer": "WORD"}}</tool_call>'
    engine = ScriptedEngine(tokenizer, [LOOK, "hmm, no call", submit])
    trajs = _run(engine, tokenizer)
    assert len(trajs) == 4 and engine.batches == [4, 4, 4]
    renderer = ChatRenderer(tokenizer)
    from gymhub.envs import make

    tools = make("echo-v0").reset()[1]["tools"]
    for t in trajs:
        assert t.error is None and t.stop_reason == "terminated"
        assert t.score is not None and t.score.value == 1.0 and t.value == 1.0
        assert [m.role for m in t.messages] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
        ]
        assert t.drift is not None and t.drift.ok
        # a full render equals the ids, token for token
        full = renderer._render(t.messages, tools, False)
        assert t.ids == full[: len(t.ids)] and len(full) - len(t.ids) == 1  # trailing "\n"
        # mask 1 exactly on the three assistant turns (content + end-of-turn)
        spans = "".join(str(m) for m in t.loss_mask)
        assert spans.count("01") == 3
        assert sum(t.loss_mask) == sum(
            len(
                tokenizer.encode(s.replace("WORD", t.messages[1].content), add_special_tokens=False)
            )
            + 1
            for s in [LOOK, "hmm, no call", submit]
        )
        assert all(lp == -0.5 for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if m)
        assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if not m)
        assert t.turn_rewards == [0.0, 0.0, 0.0] and t.policy_version == 3
        assert t.group.endswith("#0") or t.group.endswith("#1")


def test_turn_budget_truncates(tokenizer):
    trajs = _run(ScriptedEngine(tokenizer, [LOOK]), tokenizer, budgets=Budgets(max_turns=2))
    for t in trajs:
        assert t.stop_reason == "max_turns" and t.truncated and t.value == 0.0 and t.score is None


def test_context_budget_truncates(tokenizer):
    trajs = _run(
        ScriptedEngine(tokenizer, [LOOK]),
        tokenizer,
        budgets=Budgets(max_turns=8, max_context_tokens=300),
    )
    for t in trajs:
        assert t.stop_reason == "context" and len(t.ids) <= 300 and len(t.turn_versions) >= 2
        assert t.drift.ok
    tiny = _run(ScriptedEngine(tokenizer, [LOOK]), tokenizer, budgets=Budgets(max_context_tokens=5))
    assert all(t.stop_reason == "context" and t.generated_tokens == 0 for t in tiny)


def test_turn_without_end_token_gets_one_unmasked(tokenizer):
    engine = ScriptedEngine(tokenizer, [LOOK], end=False)
    trajs = _run(engine, tokenizer, budgets=Budgets(max_turns=2), n_tasks=1, group=2)
    t = trajs[0]
    eot = tokenizer.eos_token_id
    positions = [i for i, x in enumerate(t.ids) if x == eot]
    assert all(t.loss_mask[i] == 0 for i in positions[1:])  # appended, not sampled
    assert t.drift.ok


def test_backend_failure_is_an_errored_trajectory(tokenizer):
    trajs = asyncio.run(
        run_group_batch(
            backend=InProcessBackend(),
            engine=ScriptedEngine(tokenizer, [LOOK]),
            renderer=ChatRenderer(tokenizer),
            parser=HermesParser(),
            sampling=SamplingConfig(),
            budgets=Budgets(),
            tasks=[("echo-v0", "no-such-task")],
            group_size=2,
            seed=0,
        )
    )
    assert all(t.errored and t.value is None and "TaskNotFound" in t.error for t in trajs)


def test_random_model_rollouts_and_jsonl(tokenizer, tiny_model, tmp_path):
    engine = TransformersEngine(tiny_model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    trajs = _run(
        engine,
        tokenizer,
        budgets=Budgets(max_turns=2, max_tokens_per_turn=12, max_tokens_per_episode=20),
        drift="warn",
    )
    for t in trajs:
        assert len(t.ids) == len(t.loss_mask) == len(t.logprobs)
        assert 0 < t.generated_tokens <= 20 and t.drift is not None
        assert t.truncated or t.stop_reason == "terminated"
    write_jsonl(tmp_path / "t.jsonl", trajs, step=1)
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and rows[0]["step"] == 1 and "loss_mask" in rows[0]


def test_a_groups_shared_prompt_is_rendered_once(tokenizer):
    renderer = ChatRenderer(tokenizer)
    rendered = []
    prompt_ids = renderer.prompt_ids

    def counting(messages, tools=None):
        rendered.append(messages[-1].content)
        return prompt_ids(messages, tools)

    renderer.prompt_ids = counting  # type: ignore[method-assign]
    engine = ScriptedEngine(tokenizer, [LOOK])
    trajs = asyncio.run(run_group_batch(
        backend=InProcessBackend(), engine=engine, renderer=renderer, parser=HermesParser(),
        sampling=SamplingConfig(stop_token_ids=(tokenizer.eos_token_id,)), budgets=Budgets(1),
        tasks=[("echo-v0", "echo-0000"), ("echo-v0", "echo-0001")], group_size=3, seed=0,
        drift_check="strict"))
    assert len(rendered) == 2 and len(trajs) == 6  # one render a task, not one an episode
    for t in trajs:  # each episode's ids are still exactly a full render of its messages
        assert t.drift is not None and t.drift.ok
    n = trajs[0].loss_mask.index(1)
    assert trajs[0].ids[:n] == trajs[2].ids[:n] and trajs[0].ids is not trajs[2].ids
    assert trajs[0].ids[:n] != trajs[3].ids[:n]  # another task, its own prompt

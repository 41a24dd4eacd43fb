"""Tiny models, tokenizers and a one-turn coin-flip environment; nothing is downloaded."""

from __future__ import annotations

import pytest

from gymhub.envs import TextEnv
from gymhub.envs.tasks import Task
from gymhub.trainer.tiny import CHATML_TOOLS, CORPUS, build_model, build_tokenizer  # noqa: F401
from gymhub.types import Message, Score, StepResult


@pytest.fixture(scope="session")
def tokenizer():
    pytest.importorskip("transformers")
    return build_tokenizer()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("tiny-llama")
    build_model(len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def tiny_model(tokenizer):
    return build_model(len(tokenizer))


class ParityEnv(TextEnv):
    """One turn; scores 1 when the answer has an odd number of characters (a coin flip)."""

    def __init__(self) -> None:
        super().__init__([Task(id=f"t{i}", prompt=f"word {i}") for i in range(6)], max_turns=1)

    def _start(self, task):
        return [Message(role="user", content=task.prompt)], {}

    def _step(self, action):
        score = Score(value=float(len(action.content) % 2))
        return StepResult([Message(role="user", content="ok")], 0.0, True, False, {"score": score})

    def gold_action(self):
        return Message(role="assistant", content="x")


def observation(tokenizer, word):
    """An observation's template delta (ChatML), as a rollout appends it after a turn."""
    return tokenizer.encode(f"<|im_end|>\n<|im_start|>user\n{word}<|im_end|>\n"
                            "<|im_start|>assistant\n", add_special_tokens=False)


def assert_same_turns(engines, tokenizer, starts, sampling, *, extra=None, turns=4):
    """Two engines (keys True and False) play the same sessions over ``turns`` turns, each
    turn's observation appended; every sample and log-probability must be identical.

    ``extra(turn, contexts)`` adds requests without a session to each call.
    """
    from gymhub.trainer.engines import GenerationRequest

    ctx = {on: [tokenizer.encode(t, add_special_tokens=False) for t in starts] for on in engines}
    for turn in range(turns):
        outs = {}
        for on, engine in engines.items():
            reqs = [GenerationRequest(ctx[on][i], 3 + 2 * i, seed=10 * turn + i, session=f"s{i}")
                    for i in range(len(starts))]
            if extra is not None:
                reqs += extra(turn, ctx[on])
            outs[on] = engine.generate(reqs, sampling)
            for i, out in enumerate(outs[on][: len(starts)]):
                ctx[on][i] = ctx[on][i] + out.token_ids + observation(tokenizer, f"look {turn}")
        for a, b in zip(outs[True], outs[False], strict=True):
            assert a.token_ids == b.token_ids and a.logprobs == b.logprobs  # exactly


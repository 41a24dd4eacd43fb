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

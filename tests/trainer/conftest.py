"""Tiny models and tokenizers built locally: nothing is downloaded."""

from __future__ import annotations

import pytest

from gymhub.trainer.tiny import CHATML_TOOLS, CORPUS, build_model, build_tokenizer  # noqa: F401


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

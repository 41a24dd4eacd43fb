"""Wire helpers and the error-code table."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

from gymhub.errors import (
    AtCapacity,
    EnvNotFound,
    EpisodeFinished,
    SeqConflict,
    ServerError,
    TaskNotFound,
    error_from_code,
)
from gymhub.server.error_replies import STATUS, status_of
from gymhub.server.wire_models import dumps, jsonable
from gymhub.types import Message, Score


@dataclass
class Point:
    x: int


def test_jsonable_makes_anything_json_safe() -> None:
    value = {"score": Score(1.0), "m": Message(role="user", content="x"), "p": Point(1),
             "s": {1}, "nan": math.nan, 3: object, "t": (1, 2)}
    out = jsonable(value)
    assert json.loads(dumps(out)) == out
    assert out["score"]["value"] == 1.0 and out["m"] == {"role": "user", "content": "x"}
    assert out["p"] == {"x": 1} and out["nan"] == "nan" and out["3"].startswith("<class")


def test_dumps_survives_lone_surrogates() -> None:
    assert json.loads(dumps({"c": "bad \udcff"})) == {"c": "bad \udcff"}


@pytest.mark.parametrize(("code", "klass", "status"), [
    ("env_not_found", EnvNotFound, 404), ("task_not_found", TaskNotFound, 404),
    ("episode_finished", EpisodeFinished, 409), ("at_capacity", AtCapacity, 429),
    ("seq_conflict", SeqConflict, 409),
])
def test_codes_round_trip(code: str, klass: type, status: int) -> None:
    exc = error_from_code(status, code, "msg", retry_after=2.0, expected=3)
    assert isinstance(exc, klass) and exc.code == code and STATUS[code] == status
    assert status_of(exc) == status


def test_unknown_code_is_kept() -> None:
    exc = error_from_code(418, "teapot", "short and stout")
    assert isinstance(exc, ServerError) and exc.code == "teapot" and exc.status == 418
    assert type(exc).code == "server_error"  # the class attribute is untouched

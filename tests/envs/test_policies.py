"""Reference policies: gold, noop, refuse and random on the built-in environments."""

import random

import pytest

from gymhub.envs import TextEnv, make, run_episode
from gymhub.envs.evaluation import evaluate_policy
from gymhub.envs.policies import POLICIES, policy_named, random_policy
from gymhub.envs.schema_values import empty_arguments, empty_value, random_value
from gymhub.errors import ConfigError
from gymhub.types import Message, Score, StepResult, Task
from gymhub.verifiers import compile as compile_verifier


@pytest.fixture(scope="module")
def echo():
    env = make("echo-v0", n_tasks=20)
    yield env
    env.close()


@pytest.fixture(scope="module")
def sql():
    env = make("sql-v0")
    yield env
    env.close()


def test_policy_names_and_unknown_name():
    assert {"gold", "noop", "refuse", "random"} == POLICIES
    with pytest.raises(ConfigError, match="unknown policy 'golden'; available: gold, noop, "
                                          "random, refuse"):
        policy_named("golden")


@pytest.mark.parametrize("env_name", ["echo", "sql"])
def test_each_policy_scores_what_it_should(env_name, request):
    env = request.getfixturevalue(env_name)
    tasks = 20 if env_name == "echo" else 12
    means = {}
    for name in sorted(POLICIES):
        report = evaluate_policy(env, name, tasks=tasks, seed=1)
        assert report.errors == 0, report.failures()
        assert len(report.outcomes) == tasks
        means[name] = report.mean
    assert means["gold"] == 1.0
    assert means["noop"] == 0.0 and means["refuse"] == 0.0
    assert means["random"] <= 0.1


@pytest.mark.parametrize("env_name", ["echo", "sql"])
def test_noop_ends_the_episode_at_once_through_submit(env_name, request):
    env = request.getfixturevalue(env_name)
    out = run_episode(env, policy_named("noop"), task_id=env.tasks[0].id)
    assert out.terminated and out.turns == 1 and out.value == 0.0
    call = next(m for m in out.transcript if m.role == "assistant").tool_calls[0]
    assert call.name == "submit" and set(call.arguments.values()) == {""}


def test_refuse_declines_in_words_through_the_final_tool(sql):
    out = run_episode(sql, policy_named("refuse"), task_id=sql.tasks[0].id)
    action = next(m for m in out.transcript if m.role == "assistant")
    assert action.tool_calls[0].name == "submit"
    assert "can't help" in action.tool_calls[0].arguments["query"]
    assert out.terminated and out.value == 0.0


def test_random_is_reproducible_per_seed_and_independent_of_the_task_subset(sql):
    def transcripts(seed, tasks):
        report = evaluate_policy(sql, "random", seed=seed, tasks=tasks)
        return [o.transcript for _, o in report.outcomes]

    first = transcripts(3, 6)
    assert first == transcripts(3, 6)
    assert first[:3] == transcripts(3, 3)
    assert first != transcripts(4, 6)


def test_random_calls_are_schema_valid(echo, sql):
    jsonschema = pytest.importorskip("jsonschema")
    for env in (echo, sql):
        env.reset(seed=0)
        specs = {s.name: s for s in env.tool_specs()}
        seen = set()
        for i in range(200):
            action = env.random_action(random.Random(i))
            (call,) = action.tool_calls
            seen.add(call.name)
            jsonschema.validate(call.arguments, specs[call.name].parameters)
            env._tool_defs[call.name].validate(call.arguments)  # what the env itself accepts
        assert seen == set(specs)  # every tool gets called
        env.end_episode()


def test_random_tool_calls_are_never_refused_as_invalid(sql):
    policy = random_policy(seed=0)
    for task in sql.tasks[:15]:
        out = run_episode(sql, policy, task_id=task.id)
        for m in out.transcript:
            if m.role == "tool":
                assert "argument" not in m.content and "unknown tool" not in m.content, m.content


RICH = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 3, "maxLength": 6},
        "count": {"type": "integer", "minimum": 2, "maximum": 5},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "flag": {"type": "boolean"},
        "mode": {"enum": ["fast", "slow"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3,
                 "uniqueItems": True},
        "when": {"type": "string", "format": "date"},
        "maybe": {"type": ["integer", "null"]},
        "either": {"anyOf": [{"type": "integer", "minimum": 10}, {"const": "none"}]},
        "nested": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    },
    "required": ["name", "count", "ratio", "mode", "tags", "nested"],
    "additionalProperties": False,
}


def test_random_and_empty_values_satisfy_a_rich_schema():
    jsonschema = pytest.importorskip("jsonschema")
    rng = random.Random(0)
    optional_seen = set()
    for _ in range(300):
        value = random_value(RICH, rng)
        jsonschema.validate(value, RICH)
        optional_seen |= set(value) - set(RICH["required"])
    assert optional_seen == {"flag", "when", "maybe", "either"}
    least = empty_value(RICH)
    jsonschema.validate(least, RICH)
    assert set(least) == set(RICH["required"]) and least["count"] == 2 and least["mode"] == "fast"
    assert empty_arguments({"type": "object", "properties": {}}) == {}


class Riddle(TextEnv):
    """A text-only environment: any final answer ends the episode."""

    def __init__(self):
        super().__init__([Task(id="r0", prompt="What has keys but no locks?", gold="a piano")])

    def _start(self, task):
        return [Message(role="user", content=task.prompt)], {}

    def _step(self, action):
        ok = action.content.strip().lower() == self.task.gold
        return StepResult([], 0.0, True, False, {"score": Score(1.0 if ok else 0.0)})

    def gold_action(self):
        return Message(role="assistant", content=self.task.gold)


def test_text_environments_get_text_actions():
    env = Riddle()
    env.reset(seed=0)
    assert env.noop_action() == Message(role="assistant", content="")
    assert "can't help" in env.refuse_action().content and not env.refuse_action().tool_calls
    text = env.random_action(random.Random(0))
    assert text.content and not text.tool_calls
    assert evaluate_policy(env, "noop").mean == 0.0 and evaluate_policy(env, "gold").mean == 1.0


def test_replace_verifier(echo):
    lenient = compile_verifier({"type": "regex", "pattern": ".*"})
    env = make("echo-v0", n_tasks=3)
    env.replace_verifier(lenient)
    assert evaluate_policy(env, "noop").mean == 1.0
    with pytest.raises(ConfigError, match="no compiled verifier"):
        Riddle().replace_verifier(lenient)


def test_fractional_bounds_on_integers_admit_only_the_integers_inside():
    import random

    from gymhub.envs.schema_values import empty_value, random_value

    assert empty_value({"type": "integer", "minimum": 0.5}) == 1
    rng = random.Random(0)
    draws = [random_value({"type": "integer", "maximum": -0.5}, rng) for _ in range(300)]
    assert max(draws) <= -1
    assert {random_value({"type": "integer", "minimum": 0.5, "maximum": 1.5}, rng)
            for _ in range(20)} == {1}

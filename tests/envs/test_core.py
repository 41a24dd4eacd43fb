import pytest

from gymhub.envs import check_env, make, run_episode
from gymhub.envs.echo import EchoEnv
from gymhub.errors import ConfigError, EpisodeFinished, EpisodeNotStarted, TaskNotFound
from gymhub.types import Message, ToolCall


def test_reset_is_deterministic_in_the_seed_and_picks_by_task_id():
    env = EchoEnv()
    a = env.reset(seed=7)[1]["task_id"]
    b = env.reset(seed=7)[1]["task_id"]
    assert a == b
    obs, info = env.reset(options={"task_id": "echo-0003"})
    assert info["task_id"] == "echo-0003" and obs[-1].content == env.task.gold
    assert info["tools"][0]["type"] == "function"


def test_unknown_task_id_is_typed():
    with pytest.raises(TaskNotFound, match="no task 'nope'"):
        EchoEnv().reset(options={"task_id": "nope"})


def test_step_before_reset_and_after_end_are_typed_errors():
    env = EchoEnv()
    with pytest.raises(EpisodeNotStarted):
        env.step(Message(role="assistant", content="x"))
    out = run_episode(env, seed=0)
    assert out.terminated and out.value == 1.0
    with pytest.raises(EpisodeFinished):
        env.step(Message(role="assistant", content="x"))


def test_max_turns_truncates_with_a_zero_score_that_is_not_an_error():
    env = EchoEnv(max_turns=2)
    env.reset(seed=0)
    look = Message(role="assistant", content="", tool_calls=(ToolCall("1", "look", {}),))
    _, _, term, trunc, _ = env.step(look)
    assert not term and not trunc
    _, reward, term, trunc, info = env.step(look)
    assert trunc and not term and reward == 0.0
    assert info["score"].ok and info["score"].value == 0.0 and "truncated" in info["score"].details["reason"]


@pytest.mark.parametrize("action", [42, {"role": "assistant"}, {"role": "robot"}, "plain text",
                                    Message(role="user", content="x")])
def test_bad_actions_are_answered(action):
    env = EchoEnv()
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(action)
    assert obs and not term and reward == 0.0


def test_dict_actions_are_coerced_to_messages():
    env = EchoEnv()
    _, info = env.reset(seed=1)
    gold = env.task.gold
    action = {"role": "assistant", "content": "",
              "tool_calls": [{"id": "1", "function": {"name": "submit", "arguments": f'{{"answer": "{gold}"}}'}}]}
    _, reward, term, _, info = env.step(action)
    assert term and reward == 1.0


def test_render_ansi_transcript():
    env = EchoEnv(render_mode="ansi")
    run_episode(env, seed=0)
    text = env.render()
    assert "[user]" in text and "-> submit" in text


def test_bad_constructor_arguments():
    with pytest.raises(ConfigError):
        EchoEnv(max_turns=0)
    with pytest.raises(ConfigError):
        EchoEnv(render_mode="human")


def test_echo_passes_check_env():
    report = check_env(make("echo-v0"), gold_tasks=None)
    assert report.ok, report.summary()
    assert {r.name for r in report.results} >= {"gymnasium.check_env", "gold policy scores 1.0"}

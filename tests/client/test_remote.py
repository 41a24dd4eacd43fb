"""RemoteEnv against a real server process: Gymnasium code and check_env run unchanged."""

from __future__ import annotations

import pytest

from gymhub.client.remote import RemoteEnv, split_env_url
from gymhub.envs import check_env, gold_policy, run_episode
from gymhub.errors import ConfigError, EnvNotFound, EpisodeFinished, EpisodeNotStarted
from gymhub.types import Message

from .conftest import ServerProcess, registered_params


@pytest.mark.parametrize(("url", "base", "env_id"), [
    ("http://h:1/sql-v0", "http://h:1", "sql-v0"),
    ("http://h:1/v1/envs/acme/sql-v1", "http://h:1", "acme/sql-v1"),
    ("https://h/gym/envs/echo-v0", "https://h/gym", "echo-v0"),
    ("http://h:1/gym/echo-v0/", "http://h:1/gym", "echo-v0"),
])
def test_split_env_url(url: str, base: str, env_id: str) -> None:
    assert split_env_url(url) == (base, env_id)


@pytest.mark.parametrize("url", ["http://h:1/", "ftp://h/echo-v0", "echo-v0"])
def test_split_env_url_refuses(url: str) -> None:
    with pytest.raises(ConfigError):
        split_env_url(url)


@pytest.mark.parametrize("env_id", registered_params())
def test_gold_policy_scores_one_through_remote_env(echo_server: ServerProcess,
                                                   env_id: str) -> None:
    env = RemoteEnv.from_url(f"{echo_server.url}/{env_id}")
    try:
        for task in env.tasks[:3]:
            out = run_episode(env, gold_policy, task_id=task.id)
            assert out.score is not None and out.score.ok and out.value == 1.0
            assert out.transcript[0].role == "system"
    finally:
        env.close()


def test_check_env_passes_on_remote_echo(echo_server: ServerProcess) -> None:
    env = RemoteEnv.from_url(f"{echo_server.url}/echo-v0", render_mode="ansi")
    report = check_env(env, gold_tasks=10)
    assert report.ok, report.summary()


def test_remote_env_mirrors_local_errors(echo_server: ServerProcess) -> None:
    env = RemoteEnv(echo_server.url, "echo-v0")
    with pytest.raises(EpisodeNotStarted):
        env.step(Message(role="assistant", content="x"))
    env.reset(seed=0)
    while True:
        *_, term, trunc, _info = env.step(Message(role="assistant", content="x"))
        if term or trunc:
            break
    assert env.done and env.last_score is not None and env.last_score.value == 0.0
    with pytest.raises(EpisodeFinished):
        env.step(Message(role="assistant", content="x"))
    env.close()
    env.close()  # closing twice is allowed
    with pytest.raises(EnvNotFound, match="echo-v0"):
        RemoteEnv(echo_server.url, "nope-v0")


def test_token_from_environment(server_factory: object, monkeypatch: pytest.MonkeyPatch) -> None:
    server = server_factory("echo-v0", "--token", "t0k")  # type: ignore[operator]
    monkeypatch.setenv("GYMHUB_SERVER_TOKEN", "t0k")
    env = RemoteEnv.from_url(f"{server.url}/echo-v0")
    obs, info = env.reset(seed=1)
    assert obs and info["task_id"]
    env.close()
    monkeypatch.setenv("GYMHUB_SERVER_TOKEN", "wrong")
    with pytest.raises(Exception, match="bearer token") as exc:
        RemoteEnv.from_url(f"{server.url}/echo-v0")
    assert getattr(exc.value, "code", "") == "unauthorized"


def test_reference_policies_run_on_the_server_as_they_do_locally(
        echo_server: ServerProcess) -> None:
    import random

    from gymhub.envs import make
    from gymhub.envs.policies import policy_named
    from gymhub.errors import ServerError

    remote = RemoteEnv(echo_server.url, "echo-v0")
    local = make("echo-v0")
    try:
        for name in ("noop", "refuse", "random"):
            policy = policy_named(name, seed=3)
            got = [run_episode(remote, policy, task_id=t.id).value for t in local.tasks[:5]]
            want = [run_episode(local, policy, task_id=t.id).value for t in local.tasks[:5]]
            assert got == want == [0.0] * 5, name
        remote.reset(seed=0)
        rng_a, rng_b = random.Random(7), random.Random(7)
        assert remote.random_action(rng_a) == remote.random_action(rng_b)  # seeded on the server
        with pytest.raises(ServerError) as exc:
            remote.client.reference_action(remote.episode_id, "oracle")
        assert exc.value.code == "invalid_request"
    finally:
        remote.close()
        local.close()

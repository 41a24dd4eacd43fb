"""Episodes the environment servers lose are masked and counted, never scored 0.

First with a backend that raises ``EpisodeLost`` for chosen episodes (exact counts),
then against real ``gymhub serve`` processes killed, replaced and restarted mid-run.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from gymhub.client.url_file import write_urls_file  # noqa: E402
from gymhub.errors import EpisodeLost  # noqa: E402
from gymhub.trainer.backends import InProcessBackend, RemoteBackend  # noqa: E402
from gymhub.trainer.config import GRPOConfig  # noqa: E402
from gymhub.trainer.evaluate import EvalResult  # noqa: E402
from gymhub.trainer.loop import GRPOTrainer, apply_lora  # noqa: E402
from gymhub.trainer.rollout import Trajectory  # noqa: E402
from gymhub.types import Message, Score  # noqa: E402

from ..server.conftest import ServerProcess, server_factory  # noqa: E402, F401
from .conftest import ParityEnv, build_model  # noqa: E402


def _policy(tokenizer: Any) -> Any:
    torch.manual_seed(0)
    model = build_model(len(tokenizer))
    return apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])


class LosingBackend(InProcessBackend):
    """In-process episodes; those of the first step at ``lose`` indices are lost when
    stepped, as when their server restarts (the client then raises ``EpisodeLost``)."""

    def __init__(self, lose: set[int], per_step: int) -> None:
        super().__init__(factory=lambda env_id, **_: ParityEnv())
        self.lose, self.per_step = lose, per_step
        self.created = 0
        self.doomed: set[str] = set()

    async def create(self, env_id: str, *, task_id: str | None = None,
                     seed: int | None = None) -> Any:
        start = await super().create(env_id, task_id=task_id, seed=seed)
        first_step = self.created < self.per_step
        self.created += 1
        if first_step and seed is not None and seed % 100_003 in self.lose:  # the index
            self.doomed.add(start.episode_id)
        return start

    async def step(self, episode_id: str, action: Message) -> Any:
        if episode_id in self.doomed:
            raise EpisodeLost("episode_lost: server incarnation ab12 is gone")
        return await super().step(episode_id, action)


def _records(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lost_episodes_are_masked_counted_and_shown(tmp_path: Any, tokenizer: Any,
                                                    capsys: Any) -> None:
    cfg = GRPOConfig(model="tiny", env_ids=["parity-v0"], group_size=4, tasks_per_step=2,
                     max_steps=2, max_turns=1, max_tokens_per_turn=6, max_tokens_per_episode=6,
                     learning_rate=0.05, dynamic_sampling=True, output_dir=str(tmp_path),
                     progress=True, report=False, seed=1)
    backend = LosingBackend({0, 1, 2, 4}, per_step=8)
    history = GRPOTrainer(cfg, model=_policy(tokenizer), tokenizer=tokenizer,
                          backend=backend).train()
    assert [m["episodes_lost"] for m in history] == [4.0, 0.0]
    first = [r for r in _records(tmp_path / "trajectories.jsonl") if r["step"] == 1]
    lost = [r for r in first if r["lost"]]
    assert sorted(r["index"] for r in lost) == [0, 1, 2, 4]
    assert all(r["score"] is None and r["error"].startswith("EpisodeLost") for r in lost)
    scored = [r["score"]["value"] for r in first if not r["lost"]]
    assert history[0]["reward_mean"] == pytest.approx(sum(scored) / len(scored))  # not /8
    assert history[0]["adv/errored"] == 4
    # the group of index 0..3 keeps one valid member: no baseline, dropped (DAPO's rule)
    assert history[0]["adv/dropped_groups"] >= 1 and history[0]["adv/kept"] <= 3
    steps = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert steps[0].endswith(" lost 4") and "lost" not in steps[1]
    metrics = _records(tmp_path / "metrics.jsonl")
    assert [m["episodes_lost"] for m in metrics] == [4.0, 0.0]


def test_evaluation_leaves_lost_episodes_out_of_the_mean() -> None:
    def traj(task: str, value: float | None) -> Trajectory:
        t = Trajectory("echo-v0", task, "g", 0)
        if value is None:
            t.error, t.lost, t.stop_reason = "EpisodeLost: gone", True, "error"
        else:
            t.score = Score(value=value)
        return t

    result = EvalResult.from_trajectories(
        [traj("a", 1.0), traj("b", None), traj("c", 0.0), traj("d", None)], 1.0)
    assert result.mean == 0.5 and result.scored == 2
    assert result.errors == 2 and result.lost == 2 and result.scores["echo-v0/b"] is None
    assert result.to_dict()["lost"] == 2


# ----------------------------------------------------------- real server processes
class Sabotaged(RemoteBackend):
    """The real HTTP backend; at its first step it runs ``sabotage`` (kills a server).

    ``homes`` records the server of every episode opened.
    """

    def __init__(self, sabotage: Any, urls: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(urls or (), **kwargs)
        self.sabotage = sabotage
        self.homes: list[str] = []

    async def create(self, env_id: str, *, task_id: str | None = None,
                     seed: int | None = None) -> Any:
        start = await super().create(env_id, task_id=task_id, seed=seed)
        self.homes.append(self._episodes[start.episode_id].client.config.base_url)
        return start

    async def step(self, episode_id: str, action: Message) -> Any:
        if self.sabotage is not None:
            sabotage, self.sabotage = self.sabotage, None
            sabotage()
        return await super().step(episode_id, action)


def _echo_cfg(tmp_path: Any, **kw: Any) -> GRPOConfig:
    return GRPOConfig(model="tiny", env_ids=["echo-v0"], group_size=2, tasks_per_step=2,
                      max_steps=3, max_turns=2, max_tokens_per_turn=4,
                      max_tokens_per_episode=8, output_dir=str(tmp_path), progress=False,
                      report=False, seed=2, **kw)


def _assert_lost_and_never_scored(tmp_path: Any, history: list[dict[str, float]]) -> None:
    assert len(history) == 3  # the run went on
    assert history[0]["episodes_lost"] > 0
    records = _records(tmp_path / "trajectories.jsonl")
    lost = [r for r in records if r["lost"]]
    assert len(lost) == sum(m["episodes_lost"] for m in history)
    assert all(r["score"] is None and r["error"].startswith("EpisodeLost") for r in lost)
    for m in history:  # reward means leave every errored episode out, lost ones included
        values = [_value(r) for r in records if r["step"] == m["step"]]
        valid = [v for v in values if v is not None]
        assert m["reward_mean"] == pytest.approx(sum(valid) / len(valid) if valid else 0.0)


def _value(record: dict[str, Any]) -> float | None:
    """A stored trajectory's value as the learner reads it (``Trajectory.value``)."""
    score = record["score"]
    if record["error"] or (score is not None and score.get("error")):
        return None
    return float(score["value"]) if score is not None else 0.0  # truncated unscored: 0


def test_a_server_killed_mid_run_is_counted_and_replaced_from_the_url_file(
        tmp_path: Any, tokenizer: Any, server_factory: Any) -> None:  # noqa: F811
    a: ServerProcess = server_factory("echo-v0")
    b: ServerProcess = server_factory("echo-v0")
    urls = tmp_path / "urls.txt"
    write_urls_file(urls, [a.url, b.url])
    replacement: list[str] = []

    def kill_and_replace() -> None:  # what Ray does when an actor dies
        b.kill()
        c = server_factory("echo-v0")
        replacement.append(c.url)
        write_urls_file(urls, [a.url, c.url])

    cfg = _echo_cfg(tmp_path / "run", env_urls_file=str(urls))
    backend = Sabotaged(kill_and_replace, urls_file=str(urls))
    history = GRPOTrainer(cfg, model=_policy(tokenizer), tokenizer=tokenizer,
                          backend=backend).train()
    _assert_lost_and_never_scored(tmp_path / "run", history)
    homes = Counter(backend.homes)
    assert homes[b.url] == 2 and homes[a.url] >= 2  # step 1 spread over both
    assert homes[replacement[0]] >= 1  # the replacement joined without a restart


def test_a_server_restarted_mid_run_loses_its_episodes_loudly(
        tmp_path: Any, tokenizer: Any, server_factory: Any) -> None:  # noqa: F811
    a: ServerProcess = server_factory("echo-v0")
    b: ServerProcess = server_factory("echo-v0")

    def restart() -> None:  # same URL, new process: its old episodes are gone
        b.kill()
        server_factory("echo-v0", port=int(b.url.rsplit(":", 1)[1]))

    cfg = _echo_cfg(tmp_path, env_urls=[a.url, b.url])
    backend = Sabotaged(restart, [a.url, b.url])
    history = GRPOTrainer(cfg, model=_policy(tokenizer), tokenizer=tokenizer,
                          backend=backend).train()
    _assert_lost_and_never_scored(tmp_path, history)
    assert history[0]["episodes_lost"] == 2  # exactly the episodes b held
    assert Counter(backend.homes)[b.url] > 2  # the restarted server serves later steps

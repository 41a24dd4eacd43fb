import random

import pytest

from gymhub.envs import Final, check_env, tool
from gymhub.envs.echo import EchoEnv
from gymhub.errors import EnvCheckFailed
from gymhub.types import Score


class WrongGold(EchoEnv):
    def gold_action(self):
        msg = super().gold_action()
        call = msg.tool_calls[0]
        return msg.__class__(role="assistant", content="", tool_calls=(
            call.__class__(call.id, call.name, {"answer": "wrong"}),))


class Crashy(EchoEnv):
    @tool
    def look(self) -> str:
        """Look, but crash on purpose."""
        raise RuntimeError("bug in the environment")


class Flaky(EchoEnv):
    def _start(self, task):
        obs, info = super()._start(task)
        obs[-1] = obs[-1].__class__(role="user", content=f"{task.prompt} {random.random()}")
        return obs, info


class ErrorVerifier(EchoEnv):
    @tool
    def submit(self, answer: str) -> Final:
        """Submit."""
        return Final("x", Score.failed("judge down"))

    def verify(self, submission, task):
        return Score.failed("judge down")


def names_failed(report):
    return {r.name for r in report.results if not r.ok}


def test_good_env_passes():
    assert check_env(EchoEnv()).ok


def test_wrong_gold_is_reported():
    report = check_env(WrongGold(), raise_on_failure=False)
    assert "gold policy scores 1.0" in names_failed(report)


def test_crashing_tool_is_reported_not_hidden():
    report = check_env(Crashy(), raise_on_failure=False)
    assert "bad actions answered" in names_failed(report) or "gymnasium.check_env" in names_failed(report)


def test_nondeterminism_is_reported():
    assert "seeded determinism" in names_failed(check_env(Flaky(), raise_on_failure=False))


def test_verifier_errors_fail_golden_cases_and_gold():
    failed = names_failed(check_env(ErrorVerifier(), raise_on_failure=False))
    assert {"verifier golden cases", "gold policy scores 1.0"} <= failed


def test_raises_with_report_attached():
    with pytest.raises(EnvCheckFailed) as info:
        check_env(WrongGold())
    assert info.value.report is not None and not info.value.report.ok
    assert "FAIL" in str(info.value)


class DoingNothingPasses(EchoEnv):
    """tau2's failure: on some tasks the untouched start already counts as success."""

    def verify(self, submission, task):
        if submission == "" and task.id.endswith("3"):
            return Score(1.0)
        return super().verify(submission, task)


def test_an_env_where_doing_nothing_passes_fails_the_check():
    report = check_env(DoingNothingPasses(), raise_on_failure=False)
    assert names_failed(report) == {"noop policy does not pass"}
    noop = next(r for r in report.results if r.name == "noop policy does not pass")
    assert "3/25 tasks score 1.0 when the agent does nothing (e.g. echo-0003)" in noop.message


def test_noop_that_cannot_end_an_episode_is_noted_not_failed():
    class NoFinalTool(EchoEnv):
        final_tool_names = ()  # noop now sends empty text, which ends nothing

    report = check_env(NoFinalTool(), raise_on_failure=False)
    noop = next(r for r in report.results if r.name == "noop policy does not pass")
    assert report.ok and "did not end 25 episode(s) at once" in noop.message


class EmptyAnswerIsUnjudged(EchoEnv):
    """Doing nothing must be judged a 0; an error would let it escape as "unjudged"."""

    def verify(self, submission, task):
        if submission == "":
            return Score.failed("cannot judge an empty answer")
        return super().verify(submission, task)


def test_do_nothing_episodes_that_cannot_be_scored_fail_the_check():
    report = check_env(EmptyAnswerIsUnjudged(), raise_on_failure=False)
    noop = next(r for r in report.results if r.name == "noop policy does not pass")
    assert not noop.ok and "do-nothing episodes could not be scored" in noop.message


class ClaimsRefusalPasses(EchoEnv):
    """States that refusing passes every task, which it does not."""

    def expected_scores(self, policy, task):
        return (1.0, 1.0) if policy == "refuse" else None


def test_reference_policies_are_held_to_the_bounds_an_env_states():
    report = check_env(ClaimsRefusalPasses(), raise_on_failure=False)
    bounds = next(r for r in report.results
                  if r.name == "reference policies within their stated bounds")
    assert not bounds.ok and "25/25 episodes outside their bounds" in bounds.message
    plain = check_env(EchoEnv(), raise_on_failure=False)
    assert all(r.name != "reference policies within their stated bounds" for r in plain.results)

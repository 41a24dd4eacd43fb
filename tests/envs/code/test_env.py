"""code-v0 end to end: tools, episode isolation, bad input, scoring, gold policy, check_env."""

from __future__ import annotations

from typing import Any

import pytest

import gymhub.sandbox as sandbox_pkg
from gymhub.envs import check_env, make, run_episode
from gymhub.envs.code.env import CodeEnv
from gymhub.errors import ConfigError, SpecError
from gymhub.sandbox import available_backends
from gymhub.types import Message, Score, ToolCall

pytestmark = pytest.mark.skipif(not available_backends(), reason="no sandbox backend here")


def call(env: Any, name: str, **args: Any) -> tuple[str, float, bool, dict[str, Any]]:
    msg = Message(role="assistant", content="", tool_calls=(ToolCall("c1", name, args),))
    obs, reward, term, _trunc, info = env.step(msg)
    assert len(obs) == 1 and obs[0].role == "tool"
    return obs[0].content, reward, term, info


@pytest.fixture
def env() -> Any:
    e = make("code-v0")
    yield e
    e.close()


def has_repl(env: Any) -> bool:
    env.reset(options={"task_id": "count-vowels"})
    out, *_ = call(env, "run_python", code="1 + 1")
    return "no persistent REPL" not in out


def test_reset_shows_prompt_signature_examples_and_tools(env: Any) -> None:
    obs, info = env.reset(options={"task_id": "count-vowels"})
    assert [m.role for m in obs] == ["system", "user"]
    assert "def count_vowels(s: str) -> int:" in obs[1].content
    assert 'count_vowels("hello") == 2' in obs[1].content
    assert "a" * 1000 not in obs[1].content  # hidden tests stay hidden
    assert {t["function"]["name"] for t in info["tools"]} == {"run_python", "run_examples",
                                                              "submit"}
    assert info["entry_point"] == "count_vowels" and info["verifier"].startswith("unit_tests@")


def test_run_python_runs_code_and_keeps_state(env: Any) -> None:
    env.reset(options={"task_id": "count-vowels"})
    out, reward, term, _ = call(env, "run_python", code="x = 21\nprint('hi', x * 2)")
    assert "hi 42" in out and reward == 0.0 and not term
    out, *_ = call(env, "run_python", code="open('note.txt', 'w').write('kept')")
    out, *_ = call(env, "run_python", code="print(open('note.txt').read())")
    assert "kept" in out  # files persist in every mode
    out, *_ = call(env, "run_python", code="print(x)")
    if "no persistent REPL" in out:
        pytest.skip("Session.run_python is not implemented yet (fallback mode)")
    assert "42" in out.splitlines()[-1] or "21" in out


def test_run_python_reports_crash_errors_and_caps_output(env: Any) -> None:
    env.reset(options={"task_id": "count-vowels"})
    out, *_ = call(env, "run_python", code="1 / 0")
    assert "ZeroDivisionError" in out
    out, *_ = call(env, "run_python", code="import os\nos._exit(3)")
    assert "restarted" in out or "exit status 3" in out
    out, *_ = call(env, "run_python", code="print('y' * 100000)")
    assert len(out) < env.max_output_chars + 200 and "characters cut" in out


def test_run_examples_reports_each_example(env: Any) -> None:
    env.reset(options={"task_id": "caesar-shift"})
    gold = env.task.gold
    out, *_ = call(env, "run_examples", code=gold)
    assert out.startswith("Passed 2/2 examples.") and out.count("PASS") == 2
    out, *_ = call(env, "run_examples", code="def caesar_shift(s, k):\n    return s\n")
    assert out.startswith("Passed 0/2") and "FAILED" in out and "got" in out
    out, *_ = call(env, "run_examples", code="def caesar_shift(s, k)\n")
    assert "syntax error" in out


def test_submit_scores_and_ends_the_episode(env: Any) -> None:
    env.reset(options={"task_id": "two-sum-indices"})
    out, reward, term, info = call(env, "submit", code="def two_sum_indices(n, t):\n    return None\n")
    assert term and isinstance(info["score"], Score)
    assert 0.0 < info["score"].value < 1.0 and reward == info["score"].value
    assert out.startswith("Submitted. Passed ")
    env.reset(options={"task_id": "two-sum-indices"})
    _, reward, term, info = call(env, "submit", code=env.task.gold)
    assert term and reward == 1.0 and info["score"].components["all_passed"] == 1.0


def test_sessions_are_isolated_and_released(env: Any) -> None:
    env.reset(options={"task_id": "count-vowels"})
    call(env, "run_python", code="open('/work/secret.txt', 'w').write('episode one')")
    first = env.session
    assert first is not None and "secret.txt" in first.list_files()
    env.reset(options={"task_id": "count-vowels"})  # replaces the running episode
    assert first.closed and env.session is None
    out, *_ = call(env, "run_python",
                    code="import os\nprint(sorted(os.listdir('/work')), os.path.exists("
                         "'/work/secret.txt'))")
    assert "False" in out and "secret.txt" not in out
    second = env.session
    call(env, "submit", code=env.task.gold)
    assert second is not None and second.closed and env.session is None


def test_bad_arguments_are_answered(env: Any) -> None:
    env.reset(options={"task_id": "count-vowels"})
    out, *_ = call(env, "run_python", code=1.5)
    assert out.startswith("Error: argument 'code' must be string")
    out, *_ = call(env, "submit")
    assert out.startswith("Error: missing required argument 'code'")
    # A lone surrogate cannot be encoded as source: the agent is told why, as output of
    # its own code (not an infrastructure error), and the session keeps working.
    out, *_ = call(env, "run_python", code="print('\udcff')")
    assert "surrogates not allowed" in out and not out.startswith("Error:")
    out, *_ = call(env, "run_python", code="print('still here')")
    assert "still here" in out
    out, _, term, info = call(env, "submit", code="bad \udcff")
    assert term and info["score"].ok and info["score"].value == 0.0


def test_filters_and_config_errors() -> None:
    hard = CodeEnv(difficulty="hard")
    assert hard.tasks and all(t.meta["difficulty"] == "hard" for t in hard.tasks)
    both = CodeEnv(difficulty=["easy", "hard"], categories="math")
    assert {t.meta["category"] for t in both.tasks} == {"math"}
    with pytest.raises(ConfigError):
        CodeEnv(difficulty="impossible")
    with pytest.raises(ConfigError):
        CodeEnv(run_timeout_s=0)


def test_examples_run_under_the_verifiers_settings() -> None:
    env = CodeEnv(verifier={"type": "unit_tests", "timeout_s": 3, "memory_mb": 128})
    assert (env.timeout_s, env.memory_mb) == (3.0, 128)
    default = CodeEnv()
    assert (default.timeout_s, default.memory_mb) == (2.0, 256)
    with pytest.raises(SpecError, match="timeout_s"):
        CodeEnv(verifier={"type": "unit_tests", "timeout_s": "slow"})


def test_env_and_verifier_share_one_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    # One pool of workdirs/containers per backend per process, not one per user.
    built: list[Any] = []
    real = sandbox_pkg.get_sandbox

    def counting(backend: str | None = None) -> Any:
        built.append(real(backend))
        return built[-1]

    monkeypatch.setattr(sandbox_pkg, "_shared", {})
    monkeypatch.setattr(sandbox_pkg, "get_sandbox", counting)
    env = CodeEnv()
    try:
        env.reset(options={"task_id": "count-vowels"})
        call(env, "run_python", code="print(1)")
        call(env, "run_examples", code=env.task.gold)
        _, reward, *_ = call(env, "submit", code=env.task.gold)
        assert reward == 1.0
    finally:
        env.close()
        sandbox_pkg._close_shared()
    assert len(built) == 1


def test_verifier_cases_cover_pass_fail_malformed(env: Any) -> None:
    cases = env.verifier_cases(env.tasks[0])
    assert {c.expect for c in cases} == {"pass", "fail", "malformed"}


def test_check_env_passes() -> None:
    report = check_env(make("code-v0"), gold_tasks=5, seeds=(0, 1), verifier_tasks=2)
    assert report.ok, report.summary()


def test_gold_policy_scores_one_on_every_task(env: Any) -> None:
    failures = []
    for task in env.tasks:
        out = run_episode(env, task_id=task.id)
        if out.score is None or not out.score.ok or out.score.value != 1.0:
            failures.append((task.id, out.score))
    assert not failures

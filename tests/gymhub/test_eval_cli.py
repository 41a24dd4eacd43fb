"""``gymhub eval --policy ... --save`` and ``gymhub rescore``, run in-process through ``main``."""

import json
import shutil

import pytest

from gymhub.cli import main
from gymhub.envs import make, run_episode
from gymhub.envs.trajectories import TrajectoryRecord, TrajectoryWriter
from gymhub.types import Message, ToolCall


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    return code, json.loads(out), err


def test_every_policy_runs_on_echo_and_only_gold_failures_fail(capsys):
    for policy, mean in [("gold", 1.0), ("noop", 0.0), ("refuse", 0.0), ("random", 0.0)]:
        code, result, _ = run_json(capsys, "eval", "echo-v0", "--policy", policy,
                                   "--env-arg", "n_tasks=10")
        assert code == 0, result
        assert result["policy"] == policy and result["mean_score"] == mean
        assert result["episodes"] == 10 and result["errors"] == 0 and result["by_category"] == {}


def test_eval_reports_per_category_means_on_sql(capsys):
    code, result, _ = run_json(capsys, "eval", "sql-v0", "--policy", "noop", "--tasks", "40")
    assert code == 0 and result["mean_score"] == 0.0
    cats = result["by_category"]
    assert cats and sum(c["episodes"] for c in cats.values()) == 40
    assert all(c["mean_score"] == 0.0 and c["errors"] == 0 for c in cats.values())


def test_unknown_policy_is_a_usage_error(capsys):
    code, _, err = run(capsys, "eval", "echo-v0", "--policy", "smart")
    assert code == 2 and "unknown policy 'smart'; available: gold, noop, random, refuse" in err


def test_save_then_rescore_changes_nothing(capsys, tmp_path):
    traj = tmp_path / "noop.jsonl"
    code, result, _ = run_json(capsys, "eval", "sql-v0", "--policy", "random", "--tasks", "8",
                               "--seed", "5", "--save", str(traj))
    assert code == 0 and result["saved"] == str(traj)
    lines = [json.loads(line) for line in traj.read_text().splitlines()]
    assert len(lines) == 8
    first = lines[0]
    assert first["env"] == "sql-v0" and first["policy"] == "random" and first["seed"] == 5
    assert first["gymhub"] and first["format"] == "gymhub.trajectory/1"
    assert first["messages"][0]["role"] == "system"
    assert any(m.get("tool_calls") for m in first["messages"])
    assert set(first["score"]) == {"value", "components", "error", "details", "verifier"}
    assert first["score"]["verifier"].startswith("sql_match@")

    code, report, _ = run_json(capsys, "rescore", str(traj))
    assert code == 0, report
    assert report["trajectories"] == 8 and report["changed"] == 0 and report["errors"] == 0
    assert report["unchanged"] == 8


def test_rescore_with_another_verifier_reports_what_changed(capsys, tmp_path):
    traj = tmp_path / "gold.jsonl"
    assert main(["eval", "echo-v0", "--env-arg", "n_tasks=20", "--save", str(traj)]) == 0
    capsys.readouterr()
    spec = tmp_path / "spec.json"
    spec.write_text('{"type": "regex", "pattern": "apple-\\\\d+"}')  # only the apple tasks
    code, report, _ = run_json(capsys, "rescore", str(traj), "--verifier", f"@{spec}")
    assert code == 0 and report["rescored"] == 20
    assert report["changed"] == 18 and report["unchanged"] == 2
    change = report["changes"][0]
    assert change["task_id"] == "echo-0001" and change["line"] == 2
    assert (change["old"], change["new"]) == (1.0, 0.0)
    assert change["old_verifier"].startswith("echo@") and change["new_verifier"].startswith("regex@")
    (pair,) = report["verifiers"]
    assert report["verifiers"][pair] == 20

    code, text, _ = run(capsys, "rescore", str(traj), "--verifier",
                        '{"type": "exact_match", "case_sensitive": false}')
    assert code == 0 and "20 trajectories, 0 changed, 20 unchanged, 0 errors" in text


def _write(path, records):
    with TrajectoryWriter(path) as w:
        for r in records:
            w.write(r)


def _echo_record(task_index=0):
    """An echo-v0 episode that looks at the word, then submits it."""
    env = make("echo-v0", n_tasks=5)
    actions = iter([
        Message("assistant", "", (ToolCall("a", "look", {}),)),
        Message("assistant", "", (ToolCall("b", "submit", {"answer": f"apple-{task_index}"}),)),
    ])
    out = run_episode(env, lambda *_: next(actions), task_id=env.tasks[task_index].id, seed=0)
    return TrajectoryRecord.from_outcome(out, env="echo-v0", env_kwargs={"n_tasks": 5},
                                         policy="scripted", seed=0)


def test_a_replay_that_diverges_is_reported_not_rescored(capsys, tmp_path):
    good, tampered, unknown_task = _echo_record(), _echo_record(), _echo_record()
    look_answer = next(i for i, m in enumerate(tampered.messages) if m.role == "tool")
    tampered.messages[look_answer] = Message("tool", "river-7", name="look", tool_call_id="a")
    unknown_task.task_id = "echo-9999"
    path = tmp_path / "t.jsonl"
    _write(path, [good, tampered, unknown_task])
    code, report, _ = run_json(capsys, "rescore", str(path))
    assert code == 1
    assert report["rescored"] == 1 and report["changed"] == 0 and report["errors"] == 2
    first, second = report["failures"]
    assert first["line"] == 2 and "the answer to action 1 differs" in first["error"]
    assert "river-7" in first["error"]
    assert second["line"] == 3 and "no task 'echo-9999'" in second["error"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{}\n", "t.jsonl:1: not a trajectory record: 'format' must be"),
        ('{"format": "gymhub.trajectory/1"}\n', "t.jsonl:1: not a trajectory record: 'env'"),
        ("\n{oops\n", "t.jsonl:2: not JSON"),
    ],
)
def test_bad_trajectory_files_are_usage_errors(capsys, tmp_path, content, message):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    code, _, err = run(capsys, "rescore", str(path))
    assert code == 2 and message in err


def test_bad_rescore_input_is_a_usage_error(capsys, tmp_path):
    code, _, err = run(capsys, "rescore", str(tmp_path / "absent.jsonl"))
    assert code == 2 and "absent.jsonl: no such file" in err

    rec = _echo_record()
    rec.env = "ehco-v0"
    path = tmp_path / "t.jsonl"
    _write(path, [rec])
    code, _, err = run(capsys, "rescore", str(path))
    assert code == 2 and "ehco-v0" in err and "echo-v0" in err  # did you mean

    _write(path, [_echo_record()])
    for spec, message in [
        ('{"type": "regex"}', "pattern: is required"),
        ('{"type": "exact_match", "strict": true}', "strict: unknown field"),
        ("{not json", "--verifier: not a JSON verifier spec"),
        ('["regex"]', "a verifier spec is a JSON object"),
        ("@/no/such/spec.json", "no such file"),
    ]:
        code, _, err = run(capsys, "rescore", str(path), "--verifier", spec)
        assert code == 2 and message in err, (spec, err)


def test_save_is_refused_with_a_model_for_now(capsys, tmp_path):
    code, _, err = run(capsys, "eval", "echo-v0", "--model", str(tmp_path), "--save",
                       str(tmp_path / "t.jsonl"))
    assert code == 2 and "--save works with --policy" in err


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="code-v0 needs a sandbox (bwrap)")
def test_code_env_policies_and_rescore(capsys, tmp_path):
    traj = tmp_path / "code.jsonl"
    code, result, _ = run_json(capsys, "eval", "code-v0", "--policy", "random", "--tasks", "2",
                               "--save", str(traj))
    assert code == 0 and result["errors"] == 0 and result["mean_score"] == 0.0
    code, result, _ = run_json(capsys, "eval", "code-v0", "--policy", "gold", "--tasks", "2")
    assert code == 0 and result["mean_score"] == 1.0
    code, report, _ = run_json(capsys, "rescore", str(traj))
    assert code == 0 and report["changed"] == 0 and report["errors"] == 0


def _scripted_echo(actions, task_index=0):
    """An echo-v0 episode (4 turns at most) played with ``actions``, as a record."""
    env = make("echo-v0", n_tasks=5)
    moves = iter(actions)
    out = run_episode(env, lambda *_: next(moves), task_id=env.tasks[task_index].id, seed=0)
    return TrajectoryRecord.from_outcome(out, env="echo-v0", env_kwargs={"n_tasks": 5},
                                         policy="scripted", seed=0)


LOOK = Message("assistant", "", (ToolCall("a", "look", {}),))


def test_invalid_actions_are_replayed_as_invalid_actions(capsys, tmp_path):
    submit = Message("assistant", "", (ToolCall("b", "submit", {"answer": "apple-0"}),))
    records = [
        # not messages at all: they leave only the environment's reply in the transcript
        _scripted_echo([{"role": "assistant", "content": 7}, LOOK, submit]),
        _scripted_echo([LOOK, None, submit]),
        # a message with another role, and one too large
        _scripted_echo([Message("user", "hi"), Message("assistant", "x" * 200_001), submit]),
        # the last action invalid: the turn budget ends the episode on it
        _scripted_echo([LOOK, 42, LOOK, 42]),
    ]
    assert [r.score.value for r in records] == [1.0, 1.0, 1.0, 0.0]
    assert all(any(m.content.startswith("Invalid action: ") for m in r.messages)
               for r in records)
    assert records[-1].truncated and records[-1].turns == 4
    path = tmp_path / "t.jsonl"
    _write(path, records)
    code, report, _ = run_json(capsys, "rescore", str(path))
    assert code == 0, report
    assert report["rescored"] == 4 and report["errors"] == 0 and report["unchanged"] == 4


def test_a_message_that_answers_no_action_is_a_divergence(capsys, tmp_path):
    stray, early_end = _echo_record(), _echo_record()
    look_answer = next(i for i, m in enumerate(stray.messages) if m.role == "tool")
    stray.messages.insert(look_answer + 1, Message("user", "are you there?"))
    # the replay ends on the submit; the recording goes on with another action
    early_end.messages.append(LOOK)
    path = tmp_path / "t.jsonl"
    _write(path, [stray, early_end])
    code, report, _ = run_json(capsys, "rescore", str(path))
    assert code == 1 and report["errors"] == 2
    first, second = report["failures"]
    assert "message 4 answers no action" in first["error"] and "are you there?" in first["error"]
    assert "the episode ended after action 2; the recording goes on" in second["error"]

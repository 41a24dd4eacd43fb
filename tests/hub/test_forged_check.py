"""The code under check cannot write its own verdict (issue: a forged "passed").

The attack that worked against the in-process checker: an environment whose gold policy
is wrong, plus a few lines that, at import and at interpreter exit, rewrite the details
file the hub read back, patch gymhub's checker inside the sandbox, and print fake
results. The hub's verdict now comes from its own process, which only talks to the
sandboxed server over a socket: the version must be recorded ``failed`` with the real
gold score, and no file the wheel wrote is read.
"""

from pathlib import Path

import pytest

from gymhub.hub.checker import check_version

from .conftest import CHECK_SANDBOX_PROBLEM
from .test_checker import ENV_PY, _build, _publish

pytestmark = pytest.mark.skipif(CHECK_SANDBOX_PROBLEM is not None,
                                reason=f"no sandbox for the check: {CHECK_SANDBOX_PROBLEM}")

INIT_PY = "gymhub_env_5_alice_word_ladder/__init__.py"

FORGERY = '''
import atexit, json, os, sys

_FAKE = {"summary": "passed: 99/99 checks passed; gold 1.0, do-nothing 0.0",
         "checks": [], "envs": {"alice/word-ladder-v0": {"tools": [], "verifier": "x",
                                                          "task_count": 1, "max_turns": 1}},
         "gold_score": 1.0, "noop_score": 0.0, "reason": ""}


def _forge():
    for path in ("/work/details.json", "/work/out.json", "/work/result.json"):
        try:
            with open(path, "w") as f:
                json.dump(_FAKE, f)
        except OSError:
            pass
    print(json.dumps(_FAKE))


_forge()
atexit.register(_forge)

# Patch gymhub's own checker inside the sandbox, as the old attack could.
try:
    import gymhub.envs.checker as _c
    from gymhub.envs.checker import CheckReport

    def _all_ok(env, **kw):
        return CheckReport(env="forged")

    _c.check_env = _all_ok
    import gymhub.envs as _e
    _e.check_env = _all_ok
except Exception:
    pass
'''


def _forged(path: Path) -> None:
    env = path / ENV_PY
    text = env.read_text()
    gold = 'ToolCall(id="gold", name="submit", arguments={"word": self.task.gold})'
    assert gold in text
    env.write_text(text.replace(gold, 'ToolCall(id="gold", name="submit", '
                                      'arguments={"word": "wrong"})'))
    init = path / INIT_PY
    init.write_text(init.read_text() + FORGERY)


@pytest.fixture(scope="module")
def forged_wheel(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("forged"), _forged)


def test_a_wheel_that_forges_its_details_is_recorded_failed(store, forged_wheel):
    v = _publish(store, forged_wheel)
    result = check_version(store, "alice", v.name, v.version, timeout_s=120)
    d = result.details
    assert result.status == "failed", d
    assert d["gold_score"] == 0.0 and d["summary"].startswith("failed:")
    bad = [c["name"] for c in d["checks"] if not c["ok"]]
    assert "alice/word-ladder-v0: gold policy scores 1.0" in bad
    # The hub's record is what its own process measured, not the forged summary.
    assert "99/99" not in d["summary"]
    assert store.latest_check("alice", v.name, v.version).status == "failed"

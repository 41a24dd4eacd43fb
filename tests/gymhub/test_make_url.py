"""gymhub.make on a URL plays the episode on a real server process."""

import subprocess
import sys
import time

import gymhub
from gymhub.envs import run_episode


def test_make_url_returns_a_remote_env_that_plays_to_a_score():
    proc = subprocess.Popen([sys.executable, "-m", "gymhub.server.cli", "echo-v0", "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line, deadline = "", time.monotonic() + 60
        while " at http://" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        url = line.split(" at ")[1].split()[0]
        env = gymhub.make(f"{url}/echo-v0")
        assert type(env).__name__ == "RemoteEnv"
        out = run_episode(env, seed=3)
        assert out.terminated and out.value == 1.0
        env.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gymhub.envs.tools.env import ToolsEnv


@pytest.fixture(scope="module")
def env() -> Iterator[ToolsEnv]:
    """One environment for a module: episodes reset it; the task set is built once."""
    e = ToolsEnv()
    yield e
    e.close()

"""The environment contract, the registry, the checker and the built-in environments."""

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

from gymhub.spaces import ChatSpace, MessageSpace

from .checker import CheckReport, check_env
from .core import TextEnv, VerifierCase
from .registration import ENTRY_POINT_GROUP, EnvSpec, Registry, make, register, registry
from .rollout import EpisodeOutcome, gold_policy, run_episode
from .tasks import Task
from .tools import Final, ToolEnv, ToolError, tool

__all__ = [
    "ENTRY_POINT_GROUP",
    "ChatSpace",
    "CheckReport",
    "EnvSpec",
    "EpisodeOutcome",
    "Final",
    "MessageSpace",
    "Registry",
    "Task",
    "TextEnv",
    "ToolEnv",
    "ToolError",
    "VerifierCase",
    "check_env",
    "gold_policy",
    "make",
    "register",
    "registry",
    "run_episode",
    "tool",
]

register(
    "echo-v0",
    "gymhub.envs.echo:EchoEnv",
    max_turns=4,
    description="Repeat a word with the submit tool: the smallest real environment.",
    verifier="exact_match",
    tags=("toy", "tool-use"),
)
register(
    "sql-v0",
    "gymhub.envs.sql.env:SqlEnv",
    max_turns=8,
    description="Answer questions about a database by exploring it with SQL; scored by execution.",
    verifier="sql_match",
    tags=("sql", "tool-use", "multi-turn"),
)
register(
    "math-v0",
    "gymhub.envs.math.env:MathEnv",
    max_turns=6,
    description="Questions with exact answers, a sandboxed Python tool; scored by math_equiv.",
    verifier="math_equiv",
    tags=("math", "tool-use", "multi-turn"),
)
register(
    "code-v0",
    "gymhub.envs.code.env:CodeEnv",
    max_turns=10,
    description="Write a Python function with a sandboxed REPL; scored by hidden unit tests.",
    verifier="unit_tests",
    tags=("code", "python", "tool-use", "multi-turn"),
)
register(
    "tools-v0",
    "gymhub.envs.tools.env:ToolsEnv",
    max_turns=16,
    description="Serve an employee in a simulated workplace (calendar, mail, orders, accounts, "
    "tickets) with tools; scored by rules on the end state, policies, answer and ending.",
    verifier="state_match",
    tags=("tool-use", "multi-turn", "stateful"),
)

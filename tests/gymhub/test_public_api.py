"""The public surface is a reviewed list: adding or removing a name must be deliberate."""

import gymhub
import gymhub.envs
import gymhub.errors
import gymhub.types
import gymhub.verifiers

EXPECTED_TOP = {
    "ConfigError", "EnvNotFound", "GymhubError", "Message", "Score", "SpecError", "StepResult",
    "TaskNotFound", "ToolCall", "ToolSpec", "__version__", "check_env", "make", "register",
}
EXPECTED_ENVS = {
    "ENTRY_POINT_GROUP", "ChatSpace", "CheckReport", "EnvSpec", "EpisodeOutcome", "Final",
    "MessageSpace", "Registry", "Task", "TextEnv", "ToolEnv", "ToolError", "VerifierCase",
    "check_env", "gold_policy", "make", "register", "registry", "run_episode", "tool",
}
EXPECTED_VERIFIERS = {"KINDS", "SpecReader", "Verifier", "compile", "verifier_kind"}


def test_top_level_all_is_exact():
    assert set(gymhub.__all__) == EXPECTED_TOP
    for name in gymhub.__all__:
        assert hasattr(gymhub, name), name


def test_envs_all_is_exact():
    assert set(gymhub.envs.__all__) == EXPECTED_ENVS
    for name in gymhub.envs.__all__:
        assert hasattr(gymhub.envs, name), name


def test_verifiers_all_is_exact():
    assert set(gymhub.verifiers.__all__) == EXPECTED_VERIFIERS


def test_every_error_has_a_stable_code_and_is_exported():
    classes = [n for n in gymhub.errors.__all__ if isinstance(getattr(gymhub.errors, n), type)]
    assert set(gymhub.errors.__all__) - set(classes) == {"error_from_code"}
    for name in classes:
        cls = getattr(gymhub.errors, name)
        assert issubclass(cls, gymhub.errors.GymhubError)
        assert isinstance(cls.code, str) and cls.code
    codes = [getattr(gymhub.errors, n).code for n in classes]
    assert len(codes) == len(set(codes)), "error codes must be unique"


def test_error_tree_is_drawn_in_the_docstring():
    doc = gymhub.errors.__doc__ or ""
    for name in gymhub.errors.__all__:
        assert name in doc, f"{name} missing from the exception tree in gymhub/errors.py"

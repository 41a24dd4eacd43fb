"""Every exception gymhub raises, in one tree.

Exceptions are for the *caller's* mistakes (a bad id, a bad spec, a bad file). The
*agent's* mistakes (a malformed tool call, invalid SQL) are not exceptions: the
environment answers them with a message. A verifier that cannot judge returns a
:class:`~gymhub.types.Score` with ``error`` set rather than raising.

::

    GymhubError
    ├── ConfigError                  a spec, manifest, task file or option is invalid
    │   ├── SpecError                a verifier spec failed to compile (names the field)
    │   └── TaskFileError            a user task file is malformed or points nowhere
    ├── RegistryError
    │   ├── EnvNotFound              unknown environment id ("did you mean ...?")
    │   └── DuplicateEnv             the id is already registered
    ├── TaskNotFound                 ``reset(options={"task_id": ...})`` names no task
    ├── EpisodeError
    │   ├── EpisodeNotStarted        ``step`` before ``reset``
    │   └── EpisodeFinished          ``step`` after the episode terminated or truncated
    ├── EnvCheckFailed               ``check_env`` found a broken contract
    └── BackendError                 a database or sandbox backend is unusable
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "ConfigError",
    "DuplicateEnv",
    "EnvCheckFailed",
    "EnvNotFound",
    "EpisodeError",
    "EpisodeFinished",
    "EpisodeNotStarted",
    "GymhubError",
    "RegistryError",
    "SpecError",
    "TaskFileError",
    "TaskNotFound",
]


class GymhubError(Exception):
    """Base class of every gymhub exception; ``code`` is stable and travels on the wire."""

    code = "gymhub_error"


class ConfigError(GymhubError, ValueError):
    """A configuration the user supplied is invalid."""

    code = "invalid_config"


class SpecError(ConfigError):
    """A verifier spec failed to compile.

    Attributes:
        field: dotted path of the offending field, e.g. ``parts[1].weight``.
    """

    code = "invalid_spec"

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class TaskFileError(ConfigError):
    """A task file (JSONL) is malformed or refers to missing data.

    Attributes:
        path: the file.
        line: 1-based line number, or ``None`` for file-level problems.
    """

    code = "invalid_task_file"

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


class RegistryError(GymhubError):
    """A registry lookup or registration failed."""

    code = "registry_error"


class EnvNotFound(RegistryError, KeyError):
    """No environment is registered under the requested id."""

    code = "env_not_found"

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DuplicateEnv(RegistryError):
    """An environment id was registered twice."""

    code = "duplicate_env"


class TaskNotFound(GymhubError, KeyError):
    """A requested task id does not exist in the environment's task set."""

    code = "task_not_found"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class EpisodeError(GymhubError):
    """An episode was driven out of order."""

    code = "episode_error"


class EpisodeNotStarted(EpisodeError):
    """``step`` was called before ``reset``."""

    code = "episode_not_started"


class EpisodeFinished(EpisodeError):
    """``step`` was called after the episode ended; call ``reset`` first."""

    code = "episode_finished"


class EnvCheckFailed(GymhubError, AssertionError):
    """``check_env`` found at least one failing check; ``report`` holds all of them."""

    code = "env_check_failed"

    def __init__(self, message: str, report: object = None) -> None:
        self.report = report
        super().__init__(message)


class BackendError(GymhubError):
    """A backend (database, sandbox) could not be used at all."""

    code = "backend_error"

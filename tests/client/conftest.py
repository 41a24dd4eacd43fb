"""The client tests drive real servers: they share the server tests' fixtures."""

from __future__ import annotations

from ..server.conftest import (
    ServerProcess,
    SlowEnv,
    constructible_env_ids,
    echo_server,
    local_registry,
    make_env,
    registered_params,
    run,
    served,
    server_factory,
    until,
)

__all__ = ["ServerProcess", "SlowEnv", "constructible_env_ids", "echo_server", "local_registry",
           "make_env", "registered_params", "run", "served", "server_factory", "until"]

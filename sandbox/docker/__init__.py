"""The ``docker`` backend: containers through the Docker Engine API (Docker or Podman).

Three modules, so that the ``docker`` SDK loads only when the backend is used:

* :mod:`gymhub.sandbox.docker.backend`: :class:`DockerSandbox` (containers, the warm
  pool) and :class:`DockerSession`; the only importer of the SDK;
* :mod:`gymhub.sandbox.docker.exec`: supervised ``exec``s inside a container (one
  command, and the session's persistent REPL);
* :mod:`gymhub.sandbox.docker.config`: where the daemon's socket is and the seccomp
  profile, usable without the SDK.

This package shares its name with the SDK's top-level ``docker`` package; every import
here is absolute, so ``import docker`` inside it still loads the SDK, never this package.
Importing the package itself loads neither the SDK nor the backend.
"""

from __future__ import annotations

__all__: list[str] = []

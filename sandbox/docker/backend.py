"""The ``docker`` backend: containers through the Docker Engine API, with a warm pool.

Works with a Docker daemon or Podman's Docker-compatible service (``podman system
service``; ``scripts/setup-system.sh`` starts one). The ``docker`` SDK is imported only
when this backend is used; ``import docker`` here is absolute, so it loads the SDK and
not the enclosing :mod:`gymhub.sandbox.docker` package.

Each session holds one container; each call is an ``exec`` in it. Containers are
created with ``network_mode=none``, a memory limit equal to the swap limit, a pids limit,
a read-only root, a size-capped ``/tmp`` tmpfs, all capabilities dropped,
``no-new-privileges``, the engine's seccomp profile minus user namespaces, an init (which
reaps orphans), and the session workdir, a size-capped tmpfs on the host, bind-mounted at
``/work``; commands run as 65534:65534.
Per-call limits are applied inside the exec by the same ``ulimit`` launcher as ``bwrap``.

Why a pool: creating and starting a container costs a few API round trips and a runtime
start; an idle container from the pool only costs an ``exec``. A container goes back to
the pool when its session closes, after every process in it is killed and ``/tmp`` and
the workdir are emptied; it is retired after ``max_uses`` sessions, or at once if the
cleanup fails. Sessions whose container-level limits (memory, pids, tmpfs sizes,
network) differ from the sandbox's defaults get a fresh, unpooled container.

The workdir bind mount means the daemon must run on this host (a unix socket).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from gymhub.errors import BackendError
from gymhub.sandbox.base import (
    WORKDIR,
    ExecResult,
    Limits,
    PythonResult,
    Sandbox,
    Session,
)
from gymhub.sandbox.cgroups import pid_alive
from gymhub.sandbox.docker.config import find_docker_host, seccomp_profile
from gymhub.sandbox.docker.exec import SANDBOX_USER, DockerChannel, DockerExec
from gymhub.sandbox.hostsession import BASE_ENV
from gymhub.sandbox.repl import Channel, ReplClient
from gymhub.sandbox.workdir import HostWorkdir, base_dir

__all__ = ["DEFAULT_IMAGE", "DockerSandbox", "DockerSession", "find_docker_host"]

DEFAULT_IMAGE = "gymhub-sandbox:bookworm"

_available: dict[str, bool] = {}


def _container_key(limits: Limits) -> tuple[Any, ...]:
    return (limits.memory_mb, limits.pids, limits.tmp_mb, limits.workdir_mb, limits.network,
            limits.open_files, limits.file_size_mb)


class _Box:
    """One container and its host workdir."""

    def __init__(self, container: Any, workdir: HostWorkdir, key: tuple[Any, ...]) -> None:
        self.container = container
        self.workdir = workdir
        self.key = key
        self.uses = 0


class DockerSandbox(Sandbox):
    """Sandbox backend on the Docker Engine API (Docker or Podman).

    Args:
        limits: default limits (pooled containers are built for these).
        image: image with ``/bin/sh`` and ``python3`` (``$GYMHUB_SANDBOX_IMAGE`` or
            ``gymhub-sandbox:bookworm`` built by ``scripts/setup-system.sh``).
        base_url: daemon URL (``find_docker_host()`` when omitted).
        pool_size: idle containers kept warm; 0 creates one container per session.
        max_uses: sessions a container serves before it is retired.

    Raises:
        BackendError: the SDK is missing, the daemon does not answer, or the image is absent.
    """

    name = "docker"

    def __init__(self, limits: Limits | None = None, *, image: str | None = None,
                 base_url: str | None = None, pool_size: int = 4, max_uses: int = 50) -> None:
        super().__init__(limits)
        try:
            import docker
        except ImportError as exc:
            raise BackendError("the docker backend needs the SDK: pip install docker") from exc
        self._docker = docker
        url = base_url or find_docker_host()
        if url is None:
            raise BackendError("no Docker/Podman socket found; set DOCKER_HOST")
        self.image = image or os.environ.get("GYMHUB_SANDBOX_IMAGE", DEFAULT_IMAGE)
        try:
            self.client = docker.DockerClient(base_url=url, timeout=30, max_pool_size=64)
            self.client.ping()
            self.client.images.get(self.image)
        except docker.errors.ImageNotFound as exc:
            raise BackendError(f"sandbox image {self.image!r} not found; run "
                               "scripts/setup-system.sh") from exc
        except Exception as exc:
            raise BackendError(f"Docker API at {url} unusable: {exc}") from exc
        self.api = self.client.api
        self._seccomp = self._seccomp_option()
        self._reap_stale()
        self.pool_size = pool_size
        self.max_uses = max_uses
        self._pool: list[_Box] = []
        self._lock = threading.Lock()
        self._closed = False

    def _reap_stale(self) -> None:
        """Remove containers left by gymhub processes that died without closing."""
        with contextlib.suppress(Exception):
            for ct in self.client.containers.list(all=True, filters={"label": "gymhub.sandbox"}):
                owner = str(ct.labels.get("gymhub.owner", ""))
                if owner.isdigit() and (int(owner) == os.getpid() or pid_alive(int(owner))):
                    continue
                with contextlib.suppress(Exception):
                    ct.remove(force=True)

    def _seccomp_option(self) -> str:
        """``seccomp=...``: Podman's API wants a path on its host, Docker's the JSON itself."""
        text = json.dumps(seccomp_profile(), sort_keys=True)
        try:
            components = self.client.version().get("Components") or []
            podman = any("podman" in str(c.get("Name", "")).lower() for c in components)
        except Exception:
            podman = False
        if not podman:
            return "seccomp=" + text
        path = base_dir() / f"seccomp-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.replace(path)
        return f"seccomp={path}"

    @classmethod
    def available(cls) -> bool:
        """Whether the SDK is installed and a daemon answers a ping (cached per URL)."""
        url = find_docker_host()
        if url is None:
            return False
        if url not in _available:
            try:
                import docker

                client = docker.DockerClient(base_url=url, timeout=3)
                try:
                    client.ping()
                finally:
                    client.close()
                _available[url] = True
            except Exception:
                _available[url] = False
        return _available[url]

    # -- containers ----------------------------------------------------------------------
    def _create(self, limits: Limits, workdir: HostWorkdir | None = None) -> _Box:
        workdir = workdir or HostWorkdir(limits.workdir_mb, 65534, 65534)
        ul = self._docker.types.Ulimit
        try:
            container = self.client.containers.run(
                self.image, ["sleep", "infinity"], detach=True, init=True,
                network_mode="bridge" if limits.network else "none",
                mem_limit=f"{limits.memory_mb}m", memswap_limit=f"{limits.memory_mb}m",
                pids_limit=limits.pids, read_only=True,
                tmpfs={"/tmp": f"size={limits.tmp_mb}m,mode=1777,nosuid,nodev"},
                volumes={str(workdir.path): {"bind": WORKDIR, "mode": "rw"}},
                working_dir=WORKDIR, cap_drop=["ALL"],
                security_opt=["no-new-privileges", self._seccomp],
                # Podman adds its own RLIMIT_NPROC (which runc fails to set) unless told.
                ulimits=[ul(name="nproc", soft=4096, hard=4096),
                         ul(name="nofile", soft=limits.open_files, hard=limits.open_files),
                         ul(name="core", soft=0, hard=0)],
                labels={"gymhub.sandbox": "1", "gymhub.owner": str(os.getpid())},
                hostname="sandbox",
            )
        except Exception as exc:
            workdir.remove()
            raise BackendError(f"cannot start a sandbox container: {exc}") from exc
        return _Box(container, workdir, _container_key(limits))

    def restart(self, box: _Box, limits: Limits) -> None:
        """Replace a container that may hold leftovers by a fresh one on the same workdir.

        Used when a call ended abnormally (deadline, output cap, a wrapper that was itself
        killed): an ``exec`` of ``kill`` may be impossible then (a fork bomb holds every
        pid), but removing the container always ends every process in it. The session's
        files survive because the workdir lives on the host.
        """
        with contextlib.suppress(Exception):
            box.container.remove(force=True)
        fresh = self._create(limits, box.workdir)
        box.container = fresh.container

    def _destroy(self, box: _Box) -> None:
        with contextlib.suppress(Exception):
            box.container.remove(force=True)
        box.workdir.remove()

    def acquire(self, limits: Limits) -> _Box:
        """A container for a new session: from the pool when limits match, else fresh."""
        key = _container_key(limits)
        with self._lock:
            if self._closed:
                raise BackendError("the docker sandbox is closed")
            for i, box in enumerate(self._pool):
                if box.key == key:
                    return self._pool.pop(i)
        return self._create(limits)

    def release(self, box: _Box) -> None:
        """Clean a session's container and pool it, or retire it."""
        box.uses += 1
        pooled = (not self._closed and box.key == _container_key(self.limits)
                  and box.uses < self.max_uses and len(self._pool) < self.pool_size)
        if pooled:
            try:
                # As the sandbox user: root could kill the container's own sleep.
                self.exec_simple(box, ["sh", "-c", "kill -9 -1; kill -9 -1; rm -rf /tmp/* "
                                       "/tmp/.[!.]* /dev/shm/* 2>/dev/null; exit 0"])
                box.workdir.clear()
            except Exception:
                pooled = False
        if pooled:
            with self._lock:
                if not self._closed:
                    self._pool.append(box)
                    return
        self._destroy(box)

    def prewarm(self) -> None:
        """Fill the pool up to ``pool_size`` now (otherwise it fills as sessions close)."""
        while len(self._pool) < self.pool_size:
            box = self._create(self.limits)
            with self._lock:
                self._pool.append(box)

    def exec_simple(self, box: _Box, argv: Sequence[str], user: str = SANDBOX_USER) -> int:
        """Run a short trusted command in a container and return its exit status."""
        exec_id = self.api.exec_create(box.container.id, list(argv), user=user)["Id"]
        self.api.exec_start(exec_id)
        return int(self.api.exec_inspect(exec_id).get("ExitCode") or 0)

    def session(self, limits: Limits | None = None) -> Session:
        """Open a session on a pooled or fresh container (see :meth:`Sandbox.session`)."""
        lim = limits or self.limits
        return DockerSession(self, self.acquire(lim), lim)

    def close(self) -> None:
        """Remove every pooled container (sessions still open remove theirs on close)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, []
        for box in pool:
            self._destroy(box)
        with contextlib.suppress(Exception):
            self.client.close()


class DockerSession(Session):
    """A session on one container: ``exec`` per call, workdir shared with the host."""

    def __init__(self, sandbox: DockerSandbox, box: _Box, limits: Limits) -> None:
        super().__init__(limits)
        self._sandbox = sandbox
        self._box = box
        self._repl = ReplClient(self._start_repl, limits, sandbox.name)

    def _start_repl(self) -> Channel:
        return DockerChannel(self._sandbox, self._box, self.limits)

    def run_python(self, code: str, *, timeout: float | None = None) -> PythonResult:
        """Run a cell in the session's REPL (see :meth:`Session.run_python`)."""
        with self._lock:
            self._check_open()
            return self._repl.run(code, timeout)

    def _execute(self, argv: list[str], stdin: bytes, env: Mapping[str, str], limits: Limits,
                 collect: tuple[str, ...]) -> ExecResult:
        """Run one command as an ``exec`` in the container (see :meth:`Session._execute`)."""
        box = self._box
        result = DockerExec(self._sandbox, box, limits, self._repl.sid).run(
            argv, stdin, {**BASE_ENV, "HOME": "/tmp", **env})
        files_out = box.workdir.collect(collect, limits.file_size_mb << 20)
        return ExecResult(**{**result, "files": files_out, "backend": self._sandbox.name})

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a workdir file (see :meth:`Session.write_file`)."""
        with self._lock:
            self._check_open()
            self._box.workdir.write_file(path, data, mode)

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Read a workdir file (see :meth:`Session.read_file`)."""
        with self._lock:
            self._check_open()
            return self._box.workdir.read_file(path, max_bytes)

    def list_files(self) -> list[str]:
        """List workdir files (see :meth:`Session.list_files`)."""
        with self._lock:
            self._check_open()
            return self._box.workdir.list_files()

    def close(self) -> None:
        """Return the container to the pool (cleaned) or remove it (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._repl.kill()
        self._sandbox.release(self._box)

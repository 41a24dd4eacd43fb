"""Fixtures for the server tests: real server processes on loopback and in-process apps."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import pytest

from gymhub.client import AsyncEnvClient
from gymhub.envs import Registry, TextEnv, registry
from gymhub.envs.echo import EchoEnv
from gymhub.server.app import create_app
from gymhub.types import Message, StepResult


@functools.cache
def constructible_env_ids() -> list[str]:
    """Every id a fresh server process registers (tests add ids only in this process).

    Built-in environments written in parallel may still miss a module; those are
    skipped (ImportError only), every other failure is a test failure.
    """
    code = "from gymhub.envs import registry; print(' '.join(registry.ids()))"
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.split()
    return [i for i in fresh if _import_problem(i) is None]


def _import_problem(env_id: str) -> str | None:
    try:
        env = registry.make(env_id)
    except Exception as exc:
        cause: BaseException | None = exc
        while cause is not None:
            if isinstance(cause, ImportError):
                return f"{env_id} cannot be imported: {cause}"
            cause = cause.__cause__
        raise
    env.close()
    return None


#: Environments whose episodes run code in an isolating sandbox (bwrap or docker).
SANDBOXED = frozenset({"code-v0"})


def sandbox_problem() -> str | None:
    """Why sandboxed environments cannot run here, or ``None`` when they can.

    Asks the sandbox package which isolating backends are usable (``local`` never
    counts); a backend named in ``$GYMHUB_SANDBOX_BACKEND`` is taken at its word.
    """
    import os

    from gymhub.sandbox import available_backends

    if os.environ.get("GYMHUB_SANDBOX_BACKEND") or available_backends():
        return None
    return ("no sandbox backend is available: install bubblewrap, or start a Docker/"
            "Podman daemon and set DOCKER_HOST")


def registered_params() -> list[Any]:
    """``pytest.param`` per registered id, skipped when its module or sandbox is missing."""
    out = []
    for env_id in registry.ids():
        problem = _import_problem(env_id)
        if problem is None and env_id in SANDBOXED:
            problem = sandbox_problem()
        marks = [pytest.mark.skip(reason=problem)] if problem else []
        out.append(pytest.param(env_id, marks=marks, id=env_id))
    return out


# --------------------------------------------------------------- test environments
class SlowEnv(EchoEnv):
    """Echo whose steps sleep ``delay`` seconds; records closes (for deadline tests)."""

    closed: list[int] = []  # noqa: RUF012 - shared on purpose: the test reads it

    def __init__(self, delay: float = 0.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def _step(self, action: Message) -> StepResult:
        time.sleep(self.delay)
        return super()._step(action)

    def close(self) -> None:
        SlowEnv.closed.append(id(self))
        super().close()


class GatedEnv(EchoEnv):
    """Echo whose steps block until the test opens the gate; records entries and closes.

    ``entered`` is set when a step is running (and holding its worker); the step then
    waits for ``release``. A test that needs a stuck step opens the gate when it has
    seen what it expects, instead of guessing how long a sleep outlives a deadline.
    """

    entered: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()
    closed: ClassVar[list[int]] = []

    @classmethod
    def reset_gate(cls) -> None:
        """Close the gate and forget earlier entries and closes (call before each test)."""
        cls.entered.clear()
        cls.release.clear()
        cls.closed.clear()

    def _step(self, action: Message) -> StepResult:
        GatedEnv.entered.set()
        if not GatedEnv.release.wait(30):  # a bound against a hang, not a timing window
            raise RuntimeError("the test never opened the gate")
        return super()._step(action)

    def close(self) -> None:
        GatedEnv.closed.append(id(self))
        super().close()


def local_registry() -> Registry:
    reg = Registry()
    reg.register("echo-v0", "gymhub.envs.echo:EchoEnv", max_turns=4, description="echo",
                 verifier="exact_match")
    reg.register("slow-v0", SlowEnv, max_turns=4, description="slow echo")
    reg.register("gated-v0", GatedEnv, max_turns=4, description="echo gated by the test")
    return reg


# ---------------------------------------------------------------- in-process apps
@contextlib.asynccontextmanager
async def served(env_ids: list[str] | None = None, **app_kwargs: Any
                 ) -> AsyncIterator[tuple[Any, AsyncEnvClient, httpx.AsyncClient]]:
    """An app with its lifespan running, an AsyncEnvClient and a raw httpx client on it."""
    app_kwargs.setdefault("registry", local_registry())
    app = create_app(env_ids or ["echo-v0"], **app_kwargs)
    token = app_kwargs.get("token")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        client = AsyncEnvClient("http://test", transport=transport, token=token, timeout=10,
                                backoff_s=0.01, max_backoff_s=0.05)
        raw = httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers)
        try:
            yield app, client, raw
        finally:
            await client.aclose()
            await raw.aclose()


async def until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` (a bound, not a window).

    Tests wait on the state they expect rather than sleeping a guessed time, so a
    loaded machine makes them slower, never wrong.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        await asyncio.sleep(0.005)


def run(coro_fn: Callable[[], Any]) -> Any:
    """Run an async test body (no pytest-asyncio here)."""
    return asyncio.run(coro_fn())


# ------------------------------------------------------------ real server process
@dataclass
class ServerProcess:
    """A ``python -m gymhub.server.cli`` child process on a free loopback port."""

    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen[str] | None = None
    url: str = ""
    banner: list[str] = field(default_factory=list)
    _stderr: Any = None

    def start(self, timeout: float = 20.0) -> ServerProcess:
        cmd = [sys.executable, "-m", "gymhub.server.cli", *self.args, "--port", str(self.port)]
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - outlives this call
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, env={**os.environ, **self.env})
        lines: list[str] = []

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                lines.append(line.rstrip("\n"))

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout  # a bound against a hang
        while time.monotonic() < deadline:
            # The banner's first line says how many environment lines follow it.
            if lines and " at http://" in lines[0]:
                wanted = 1 + int(lines[0].split("serving ", 1)[1].split()[0])
                if len(lines) >= wanted:
                    self.url = lines[0].split(" at ", 1)[1].split()[0]
                    self.banner = list(lines)
                    return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)  # polling the reader thread's lines, not ordering anything
        err = self.stderr()
        self.kill()
        raise RuntimeError(f"server did not start: {lines} {err}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_pipes()

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def _close_pipes(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if not self._stderr.closed:
            self._stderr.close()


@pytest.fixture(scope="session")
def echo_server() -> Iterator[ServerProcess]:
    """One server process serving every constructible registered environment."""
    server = ServerProcess(constructible_env_ids()).start()
    yield server
    server.stop()
    server.kill()  # closes the pipes


@pytest.fixture
def server_factory() -> Iterator[Callable[..., ServerProcess]]:
    """Start extra server processes; all are killed after the test."""
    started: list[ServerProcess] = []

    def start(*args: str, port: int = 0, **env: str) -> ServerProcess:
        s = ServerProcess(list(args), env=dict(env), port=port).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()


def make_env(env_id: str) -> TextEnv:
    return registry.make(env_id)

"""What one Ray actor runs: a ``gymhub serve`` child process, its URL and its health.

The actor is only a lifecycle handle; requests never pass through it (a Ray actor call
costs several times a batched HTTP step). Lifetimes are tied both ways, so that Ray's
restart of the actor is a restart of the server:

* the child dies with the actor's process (:mod:`._serve_child` sets ``PDEATHSIG``), so
  a killed actor leaves no server behind holding episodes on a port nobody lists;
* the actor's process exits when the child dies unasked, so Ray (``max_restarts=-1``)
  starts a new actor, which starts a new server on a new port with an empty memory.

This module needs only the standard library: it runs inside Ray workers, but nothing in
it imports Ray, so it can be tested and reused without a cluster.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["ServerProcess", "healthz"]

log = logging.getLogger("gymhub.launch")


def healthz(url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """``GET url/healthz`` as a dict when it answers 200, else ``None``."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=timeout) as reply:
            body: dict[str, Any] = json.loads(reply.read())
            return body
    except (OSError, ValueError, urllib.error.URLError):
        return None


class ServerProcess:
    """Start ``gymhub serve ENV_IDS --host HOST --port 0 SERVE_ARGS`` and wait until it answers.

    Args:
        env_ids: environments to serve.
        serve_args: more ``gymhub serve`` options (``--max-episodes``, ``--drain-timeout``...).
        host: the address to bind and advertise (default: this node's address as Ray
            sees it, else this host's name resolved).
        token: the bearer token, passed in ``GYMHUB_SERVER_TOKEN`` (not on the command
            line, where ``ps`` would show it).
        ready_timeout_s: how long the server may take to answer ``/healthz``.
        exit_on_crash: end this process when the server dies unasked (what a Ray actor
            wants, so Ray restarts both; off in tests that run it in-process).
        port_memory: a file remembering the port, which a restart tries first (default:
            one per Ray actor id under the temporary directory; none outside Ray).
        nice: the server's niceness (``None`` keeps the actor's: Ray runs workers at 15,
            which costs a data-path server throughput on a busy node; see
            :mod:`._serve_child`).

    A server that cannot start (an unknown environment, a bad option) is not an
    exception here: :attr:`error` holds why (with its last stderr lines) and :meth:`info`
    reports it, so the launcher can say it in one line instead of unpacking Ray's
    wrapped traceback of a failed actor constructor.
    """

    def __init__(self, env_ids: Sequence[str], serve_args: Sequence[str] = (), *,
                 host: str | None = None, token: str | None = None,
                 ready_timeout_s: float = 120.0, exit_on_crash: bool = True,
                 port_memory: str | os.PathLike[str] | None = None,
                 nice: int | None = 0) -> None:
        self.host = host or _node_address()
        self.exit_on_crash = exit_on_crash
        self.url: str | None = None
        self.error: str | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self._proc: subprocess.Popen[str] | None = None
        self._expected_exit = threading.Event()
        env = dict(os.environ)
        if token:
            env["GYMHUB_SERVER_TOKEN"] = token
        memory = Path(port_memory) if port_memory is not None else _actor_port_file()
        self._memory = memory
        deadline = (started := time.monotonic()) + ready_timeout_s
        # A restart takes its predecessor's port back when it can: the URL stays the
        # same, so a step of a lost episode reaches the new incarnation and is answered
        # episode_lost at once, instead of finding nothing listening on a dead port.
        remembered = _read_port(memory)
        health: dict[str, Any] | None = None
        status: int | None = None
        for port in [remembered, 0] if remembered else [0]:
            argv = [sys.executable, "-m", "gymhub.launch._serve_child", str(os.getpid()),
                    "-" if nice is None else str(nice), *env_ids, "--host", self.host,
                    "--port", str(port), *serve_args]
            health, status = self._start(argv, env, deadline)
            if health is not None:
                break
        if self.url is not None and health is not None:
            if memory is not None:
                _write_port(memory, int(self.url.rsplit(":", 1)[1]))
        else:
            self.url = None
            why = (f"exited with status {status}" if status is not None else
                   f"did not answer within {ready_timeout_s:g} s")
            tail = " ".join("".join(self.stderr_tail).split()) or "(no output)"
            self.error = f"gymhub serve {' '.join(env_ids)} on {self.host} {why}: {tail}"
        # The server's own incarnation once it reports one, else a fresh id per start:
        # either way a restarted server is told apart from the one it replaces.
        self.incarnation = str((health or {}).get("incarnation") or secrets.token_hex(8))
        self.ready_s = time.monotonic() - started

    def _start(self, argv: list[str], env: dict[str, str],
               deadline: float) -> tuple[dict[str, Any] | None, int | None]:
        """Start one child: its ``/healthz`` once it answers, or why not.

        Returns ``(health, None)`` on success, else ``(None, exit status)`` with the
        status ``None`` when the child stayed silent until ``deadline`` (it is killed).
        """
        self.stderr_tail.clear()
        self._expected_exit = expected = threading.Event()
        banner: queue.Queue[str | None] = queue.Queue()
        # The thread that forks must outlive the child: PDEATHSIG fires when it ends.
        keeper = threading.Thread(target=self._keep, args=(argv, env, banner, expected),
                                  name="gymhub-serve", daemon=True)
        keeper.start()
        try:
            line = banner.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        self.url = line.split(" at ", 1)[1].split()[0] if line and " at http" in line else None
        health = None
        while self.url is not None and health is None and time.monotonic() < deadline:
            health = healthz(self.url)
            if health is None:
                time.sleep(0.05)
        if health is not None:
            return health, None
        status = self._proc.poll() if self._proc is not None else None
        self._end_child(timeout=5.0)
        keeper.join(timeout=2.0)  # it joins the stderr reader: the tail is whole
        return None, status

    def _keep(self, argv: list[str], env: dict[str, str], banner: queue.Queue[str | None],
              expected: threading.Event) -> None:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        self._proc = proc
        assert proc.stdout is not None and proc.stderr is not None
        reader = threading.Thread(target=self._tail, args=(proc.stderr,), daemon=True)
        reader.start()
        announced = False
        with proc.stdout:
            for line in proc.stdout:  # the banner, printed once the server accepts requests
                if not announced:
                    announced = True
                    banner.put(line)
        rc = proc.wait()
        if not announced:
            reader.join(timeout=2.0)
            banner.put(None)
        elif not expected.is_set() and self.exit_on_crash:
            log.error("gymhub serve at %s exited with %s; ending the actor so Ray restarts "
                      "it", self.url, rc)
            os._exit(1)

    def _tail(self, stream: Any) -> None:
        with stream:
            for line in stream:
                self.stderr_tail.append(line)
                sys.stderr.write(line)  # into the Ray worker's log

    def info(self) -> dict[str, Any]:
        """URL, incarnation, pid, node, niceness and startup error of this server (polled)."""
        pid = self._proc.pid if self._proc else None
        nice = None
        if pid is not None:
            with contextlib.suppress(OSError):
                nice = os.getpriority(os.PRIO_PROCESS, pid)
        return {"url": self.url, "incarnation": self.incarnation, "error": self.error,
                "pid": pid, "host": self.host, "nice": nice, "ready_s": self.ready_s}

    def stop(self, timeout: float = 30.0) -> int | None:
        """Drain and end the server: ``SIGTERM`` (it finishes in-flight steps), ``SIGKILL`` late.

        Returns the server's exit status (``None`` if it never started). A stopped
        server is not restarted, so its port memory is removed.
        """
        if self._memory is not None:
            with contextlib.suppress(OSError):
                self._memory.unlink()
        return self._end_child(timeout)

    def _end_child(self, timeout: float) -> int | None:
        self._expected_exit.set()
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait()


def _actor_port_file() -> Path | None:
    """Where a Ray actor remembers its server's port (``None`` outside an actor).

    Keyed by the actor id, which a restarted actor keeps.
    """
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        actor_id = ray.get_runtime_context().get_actor_id()
    except Exception:
        return None
    if not actor_id:
        return None
    return Path(tempfile.gettempdir()) / "gymhub-launch" / f"{actor_id}.port"


def _read_port(path: Path | None) -> int | None:
    try:
        return int(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


def _write_port(path: Path, port: int) -> None:
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(port))


def _node_address() -> str:
    """This node's address as the cluster sees it (Ray's view when Ray is loaded)."""
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            return str(ray.util.get_node_ip_address())
        except Exception:  # not in a Ray worker after all
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"

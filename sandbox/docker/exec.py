"""Commands and the REPL inside a docker-backend container: supervised ``exec``s.

Split from :mod:`gymhub.sandbox.docker.backend` (containers and the pool) because both
halves talk to processes *inside* a container, where the host cannot signal them:

* :class:`DockerExec` runs one command through a shell wrapper that, afterwards, kills
  every process the command left (daemons, fork bombs) and reports its status, CPU and
  OOM kills in a nonce-marked trailer on stderr;
* :class:`DockerChannel` is the session's persistent REPL (:mod:`gymhub.sandbox.repl`):
  one long-lived ``exec`` of the REPL server whose attached stdin/stdout *are* the
  channel; the server moves them off fds 0 and 1 at once, so the code's own output goes
  to its per-call capture files, never into the channel.

A session's commands and its REPL share a container, so the cleanup after a command
must not kill the REPL: the REPL server makes itself a session leader, and the cleanup
spares exactly that session (a command can leave its session with ``setsid`` but cannot
join another one). It first stops every other process of the sandbox user, sweeping
until none is left running (stopped processes cannot fork, so a fork bomb cannot outrun
it), then kills them all. Without a live REPL it is simply ``kill -9 -1``.
"""

from __future__ import annotations

import contextlib
import secrets
import selectors
import socket
import struct
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gymhub.errors import BackendError
from gymhub.sandbox.base import LIMIT_CPU, LIMIT_MEMORY, LIMIT_OUTPUT, LIMIT_WALL, WORKDIR, Limits
from gymhub.sandbox.hostsession import BASE_ENV, repl_rlimits
from gymhub.sandbox.process import hit_cpu_rlimit, launcher_argv
from gymhub.sandbox.repl import Channel, Death, send_until, server_argv

if TYPE_CHECKING:
    from gymhub.sandbox.docker.backend import DockerSandbox, _Box

__all__ = ["SANDBOX_USER", "DockerChannel", "DockerExec", "box_limits", "kill_all"]

SANDBOX_USER = "65534:65534"

# Stops, then kills, every process of the sandbox user except this shell and the
# session $S (the REPL's); sets n to the number it signalled. Builtins only: it must
# work when a fork bomb holds every pid. Fields after the last ") " of /proc/PID/stat
# are state, ppid, pgrp, session (the command name before it is attacker-chosen).
_SWEEP = (
    'sweep() { n=0; for f in /proc/[0-9]*/stat; do read -r l < "$f" 2>/dev/null || continue;'
    ' p=${f#/proc/}; p=${p%/stat}; [ "$p" = "$$" ] && continue; set -- ${l##*) };'
    ' [ "$4" = "$S" ] && continue; case $1 in Z|X) continue;; T) [ "$K" = STOP ] && continue;;'
    ' esac; kill -"$K" "$p" 2>/dev/null && n=$((n+1)); done; }; '
    'clean() { if [ "$S" = 0 ]; then for i in 1 2 3 4; do kill -9 -1 2>/dev/null; done;'
    ' else K=STOP; i=0; while [ $i -lt 100 ]; do sweep; [ $n = 0 ] && break; i=$((i+1));'
    ' done; K=KILL; sweep; sweep; fi; }; '
)

# Runs the command under the launcher's rlimits, then cleans up (above), then appends a
# trailer to stderr: a nonce, the exit status, the container's OOM-kill delta and the
# children's CPU times.
_WRAPPER = _SWEEP + (
    'M=$1; S=$2; shift 2; oom() { n=0; for f in /sys/fs/cgroup/memory/memory.oom_control '
    '/sys/fs/cgroup/memory.events; do [ -r "$f" ] && while read -r k v; do '
    '[ "$k" = oom_kill ] && n=$v; done < "$f"; done; echo "$n"; }; o=$(oom); '
    '"$@"; rc=$?; clean; '
    'printf "\\n%s %s %s\\n" "$M" "$rc" "$(( $(oom) - o ))" >&2; times >&2; exit $rc'
)

# The same cleanup alone (after a call that ended abnormally).
_CLEANUP = _SWEEP + 'S=$1; clean; exit 0'

# Kills everything of the sandbox user (the REPL included) and prints the container's
# OOM-kill count, so a dead REPL can be told "out of memory".
_KILL_REPL = (
    'kill -9 -1; kill -9 -1; kill -9 -1; n=0; for f in /sys/fs/cgroup/memory/memory.oom_control'
    ' /sys/fs/cgroup/memory.events; do [ -r "$f" ] && while read -r k v; do'
    ' [ "$k" = oom_kill ] && n=$v; done < "$f"; done; echo "$n"; exit 0'
)


def kill_all(sandbox: DockerSandbox, box: _Box, limits: Limits, spare: int | None) -> None:
    """Kill what a command left in the container, sparing the REPL's session ``spare``.

    Fast path: one ``exec`` of the cleanup. It cannot start when a fork bomb holds every
    pid; then the container is replaced (slow but certain; the REPL dies with it and its
    next call says so).
    """
    try:
        if sandbox.exec_simple(box, ["sh", "-c", _CLEANUP, "gymhub-clean",
                                     str(spare or 0)]) == 0:
            return
    except Exception:
        pass
    sandbox.restart(box, box_limits(box, limits))


class DockerExec:
    """One supervised ``exec``: stdin in, demultiplexed output out, deadline and caps.

    Args:
        sandbox: the backend.
        box: the session's container.
        limits: the call's limits.
        spare: session id of the session's live REPL inside the container, whose
            processes the cleanup after the command must leave alone (None: kill all).
    """

    def __init__(self, sandbox: DockerSandbox, box: _Box, limits: Limits,
                 spare: int | None = None) -> None:
        self.sandbox, self.box, self.limits = sandbox, box, limits
        self.spare = spare
        self.nonce = "gymhub-trailer-" + secrets.token_hex(8)

    def _kill_all(self) -> None:
        kill_all(self.sandbox, self.box, self.limits, self.spare)

    def run(self, argv: list[str], stdin: bytes, env: Mapping[str, str]) -> dict[str, Any]:
        """Run ``argv`` to the end; returns the fields of an :class:`ExecResult`."""
        lim = self.limits
        start = time.monotonic()
        cmd = ["/bin/sh", "-c", _WRAPPER, "gymhub-wrap", self.nonce, str(self.spare or 0),
               *launcher_argv(lim, None, None), *argv]
        api = self.sandbox.api
        try:
            exec_id = api.exec_create(self.box.container.id, cmd, stdin=True, user=SANDBOX_USER,
                                      workdir=WORKDIR, environment=dict(env))["Id"]
            raw = api.exec_start(exec_id, socket=True)
        except Exception as exc:
            raise BackendError(f"docker exec failed: {exc}") from exc
        sock: socket.socket = getattr(raw, "_sock", raw)
        streams = {1: bytearray(), 2: bytearray()}
        truncated = {1: False, 2: False}
        slack = 512  # room for the trailer on stderr
        limit: str | None = None
        pending = memoryview(stdin)
        buf = bytearray()
        sel = selectors.DefaultSelector()
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if pending else 0))
        if not pending:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
        deadline = start + lim.wall_s
        try:
            eof = False
            while not eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    limit = LIMIT_WALL
                    break
                for _, mask in sel.select(left):
                    if mask & selectors.EVENT_WRITE and pending:
                        try:
                            pending = pending[sock.send(pending[:65536]):]
                        except (BlockingIOError, InterruptedError):
                            pass
                        except OSError:
                            pending = pending[:0]
                        if not pending:
                            sel.modify(sock, selectors.EVENT_READ)
                            with contextlib.suppress(OSError):
                                sock.shutdown(socket.SHUT_WR)
                    if mask & selectors.EVENT_READ:
                        try:
                            chunk = sock.recv(65536)
                        except (BlockingIOError, InterruptedError):
                            continue
                        if not chunk:
                            eof = True
                            break
                        buf += chunk
                        while len(buf) >= 8:
                            kind, size = struct.unpack(">BxxxI", bytes(buf[:8]))
                            if len(buf) < 8 + size:
                                break
                            payload, buf = bytes(buf[8:8 + size]), buf[8 + size:]
                            target = streams.get(kind, streams[2])
                            cap = lim.output_bytes + (slack if kind == 2 else 0)
                            room = cap - len(target)
                            target += payload[:max(room, 0)]
                            if len(payload) > room:
                                truncated[2 if kind == 2 else 1] = True
                                limit = LIMIT_OUTPUT
                        if limit is not None:
                            break
                if limit is not None:
                    break
        finally:
            sel.close()
            if limit is not None:
                self._kill_all()
            with contextlib.suppress(Exception):
                raw.close()
            with contextlib.suppress(Exception):
                sock.close()
        info: dict[str, Any] = {}
        with contextlib.suppress(Exception):
            info = api.exec_inspect(exec_id)
        return self._result(streams, truncated, limit, info, start)

    def _result(self, streams: dict[int, bytearray], truncated: dict[int, bool],
                limit: str | None, info: Mapping[str, Any], start: float) -> dict[str, Any]:
        err = bytes(streams[2])
        oom = 0
        cpu_ms = 0.0
        rc = info.get("ExitCode")
        marker = ("\n" + self.nonce + " ").encode()
        cut = err.rfind(marker)
        if cut >= 0:
            tail = err[cut + len(marker):].decode(errors="replace").split()
            err = err[:cut]
            with contextlib.suppress(ValueError, IndexError):
                rc, oom = int(tail[0]), int(tail[1])
                cpu_ms = sum(parse_time(t) for t in tail[-2:])
        else:
            self._kill_all()  # the wrapper itself died: nothing cleaned up after the command
        if len(err) > self.limits.output_bytes:
            err, truncated[2] = err[: self.limits.output_bytes], True
        if not isinstance(rc, int):
            rc = 137
        exit_code: int | None = rc
        sig: int | None = None
        if 128 < rc <= 192:
            exit_code, sig = None, rc - 128
        if limit is not None:
            exit_code, sig = None, 9
        if limit is None and hit_cpu_rlimit(sig, cpu_ms, self.limits):
            limit = LIMIT_CPU
        if limit is None and oom > 0 and sig is not None:
            limit = LIMIT_MEMORY
        return {
            "exit_code": exit_code, "signal": sig, "stdout": bytes(streams[1]), "stderr": err,
            "stdout_truncated": truncated[1], "stderr_truncated": truncated[2],
            "timed_out": limit in (LIMIT_WALL, LIMIT_CPU), "oom_killed": oom > 0,
            "pids_exhausted": False, "limit": limit,
            "wall_ms": (time.monotonic() - start) * 1000, "cpu_ms": cpu_ms,
        }


def box_limits(box: _Box, limits: Limits) -> Limits:
    """The container-level limits a box was built with (from its key), for a restart."""
    memory_mb, pids, tmp_mb, workdir_mb, network, open_files, file_size_mb = box.key
    return limits.replace(memory_mb=memory_mb, pids=pids, tmp_mb=tmp_mb, workdir_mb=workdir_mb,
                          network=network, open_files=open_files, file_size_mb=file_size_mb)


def parse_time(text: str) -> float:
    """Parse ``times`` output such as ``0m1.250000s`` into milliseconds."""
    minutes, _, seconds = text.rstrip("s").partition("m")
    return (int(minutes) * 60 + float(seconds)) * 1000


_OOM_MARK = b"gymhub-oom "
# Prints the container's OOM-kill count on stderr, then becomes the REPL (same pid).
_REPL_PREFIX = (
    'n=0; for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events;'
    ' do [ -r "$f" ] && while read -r k v; do [ "$k" = oom_kill ] && n=$v; done < "$f";'
    ' done; echo "gymhub-oom $n" >&2; exec "$@"'
)
_MUX = struct.Struct(">BxxxI")


class DockerChannel(Channel):
    """The REPL as one long-lived ``exec``; its attached stdin/stdout are the channel.

    Args:
        sandbox: the backend.
        box: the session's container.
        limits: the session's limits (rlimits of the interpreter).

    Raises:
        BackendError: the ``exec`` could not be created.
    """

    def __init__(self, sandbox: DockerSandbox, box: _Box, limits: Limits) -> None:
        self.sandbox, self.box, self.limits = sandbox, box, limits
        cmd = ["/bin/sh", "-c", _REPL_PREFIX, "gymhub-repl",
               *launcher_argv(repl_rlimits(limits), None, None),
               *server_argv("python3", "stdio")]
        api = sandbox.api
        try:
            self.exec_id = api.exec_create(box.container.id, cmd, stdin=True, user=SANDBOX_USER,
                                           workdir=WORKDIR,
                                           environment={**BASE_ENV, "HOME": "/tmp"})["Id"]
            self._raw = api.exec_start(self.exec_id, socket=True)
        except Exception as exc:
            raise BackendError(f"cannot start the Python REPL: {exc}") from exc
        self._sock: socket.socket = getattr(self._raw, "_sock", self._raw)
        self._sock.setblocking(False)
        self._mux = bytearray()
        self._diag = bytearray()
        self._eof = False
        self._death: Death | None = None

    def _demux(self) -> bytes:
        """Take complete multiplexed frames: stdout bytes out, stderr into diagnostics."""
        out = bytearray()
        while len(self._mux) >= _MUX.size:
            kind, size = _MUX.unpack(bytes(self._mux[:_MUX.size]))
            if len(self._mux) < _MUX.size + size:
                break
            payload = self._mux[_MUX.size:_MUX.size + size]
            del self._mux[:_MUX.size + size]
            if kind == 1:
                out += payload
            elif len(self._diag) < (1 << 16):
                self._diag += payload[:(1 << 16) - len(self._diag)]
        return bytes(out)

    def send(self, data: bytes, deadline: float) -> bool:
        """Write a request (see :meth:`Channel.send`)."""
        return send_until(self._sock, lambda view: self._sock.send(view[:1 << 16]), data, deadline)

    def recv(self, deadline: float) -> bytes | None:
        """Read what the interpreter sent (see :meth:`Channel.recv`)."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._sock, selectors.EVENT_READ)
            while True:
                out = self._demux()
                if out:
                    return out
                if self._eof:
                    return b""
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                try:
                    chunk = self._sock.recv(1 << 16)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    self._eof = True
                self._mux += chunk

    def pending(self) -> bool:
        """Whether bytes or the end are waiting (see :meth:`Channel.pending`)."""
        if self._eof or self._mux:
            return True
        with selectors.DefaultSelector() as sel:
            sel.register(self._sock, selectors.EVENT_READ)
            return bool(sel.select(0))

    def diagnostics(self) -> bytes:
        """What the launcher and interpreter wrote to stderr before being ready."""
        self._demux()
        return bytes(self._diag)

    def _oom_count(self, text: bytes) -> int | None:
        with contextlib.suppress(ValueError, IndexError):
            return int(text.split()[0])
        return None

    def kill(self) -> Death:
        """Kill every sandbox-user process in the container (the REPL and its children)."""
        if self._death is not None:
            return self._death
        with contextlib.suppress(Exception):
            self.recv(time.monotonic() + (0.1 if self._eof else 0))
        self._demux()
        start = self._diag.find(_OOM_MARK)
        before = self._oom_count(bytes(self._diag[start + len(_OOM_MARK):])) if start >= 0 else None
        info: dict[str, Any] = {}
        with contextlib.suppress(Exception):
            info = self.sandbox.api.exec_inspect(self.exec_id)
        running = bool(info.get("Running", True))
        after: int | None = None
        try:
            api = self.sandbox.api
            kill_id = api.exec_create(self.box.container.id, ["sh", "-c", _KILL_REPL],
                                      user=SANDBOX_USER)["Id"]
            after = self._oom_count(bytes(api.exec_start(kill_id)))
            if api.exec_inspect(kill_id).get("ExitCode") != 0:
                raise BackendError("cleanup exec failed")
        except Exception:
            self.sandbox.restart(self.box, box_limits(self.box, self.limits))
        code = info.get("ExitCode")
        death = Death(oom_killed=before is not None and after is not None and after > before)
        if running or not isinstance(code, int):
            death.signal = 9
        elif 128 < code <= 192:
            death.signal = code - 128
        else:
            death.exit_code = code
        for closer in (self._raw, self._sock):
            with contextlib.suppress(Exception):
                closer.close()
        self._death = death
        return death

"""Environment server throughput, latency and memory: gymhub vs in-process vs OpenEnv.

Run:  python benchmarks/bench_server.py [--levels 1,64,512,2048] [--seconds 3]
      python benchmarks/bench_server.py --soak 30        # not for CI
      python benchmarks/bench_server.py --every-env 2000 # every built-in env, crowded

Everything runs on this machine in the same run, so only ratios are comparable:

* in-process: the same ``echo-v0`` environments stepped directly;
* gymhub: ``gymhub serve echo-v0`` as a separate process, driven from this process by
  :class:`~gymhub.client.AsyncEnvClient`; every episode slot loops
  open -> 3 x ``look`` -> gold ``submit`` -> close. The client coalesces the operations
  ready in one event-loop turn into one ``POST /v1/batch`` (its default); the
  "1 req/op" columns are the same client with ``batch=False``, one request per
  operation;
* OpenEnv: ``openenv-core``'s server (``create_fastapi_app``, its WebSocket session
  protocol, since its HTTP mode cannot hold an episode) with an equivalent echo
  environment, run from the venv in ``$OPENENV_PYTHON`` (default
  ``/tmp/openenv-venv/bin/python``; make it with ``python3 -m venv /tmp/openenv-venv &&
  /tmp/openenv-venv/bin/pip install openenv-core uvloop httptools``); every slot holds
  one WebSocket session and loops reset -> 4 steps. Driven by a small client run in
  that venv (it needs ``websockets``). Missing venv: the column is skipped, saying why.

Step latency is measured around each step call at the client. On a 2-core machine
the clients compete with the servers for the same cores, so the ratios to in-process
stepping are pessimistic for a learner on another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gymhub.client import AsyncEnvClient, RemoteEpisode
from gymhub.envs import make
from gymhub.types import Message, ToolCall

LOOK = Message(role="assistant", content="",
               tool_calls=(ToolCall(id="l", name="look", arguments={}),))


def submit(word: str) -> Message:
    return Message(role="assistant", content="",
                   tool_calls=(ToolCall(id="s", name="submit", arguments={"answer": word}),))


@dataclass
class Run:
    steps: int = 0
    episodes: int = 0
    errors: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0  # this process's CPU
    server_cpu_s: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def cpu_s(pid: int) -> float:
    """User+system CPU seconds of a process (robust to a busy machine, unlike wall time)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ------------------------------------------------------------------ in-process
def in_process(concurrency: int, seconds: float) -> Run:
    """Round-robin over ``concurrency`` open episodes, stepping each in turn."""
    envs = [make("echo-v0") for _ in range(concurrency)]
    stage = [0] * concurrency
    for i, env in enumerate(envs):
        env.reset(seed=i)
    run = Run()
    t_end = time.perf_counter() + seconds
    t0, c0 = time.perf_counter(), time.process_time()
    i = 0
    while time.perf_counter() < t_end:
        for _ in range(256):
            env = envs[i]
            action = LOOK if stage[i] < 3 else submit(env.task.gold if env.task else "")
            s = time.perf_counter()
            *_, term, trunc, _info = env.step(action)
            run.latencies.append(time.perf_counter() - s)
            run.steps += 1
            stage[i] += 1
            if term or trunc:
                run.episodes += 1
                env.reset(seed=run.episodes)
                stage[i] = 0
            i = (i + 1) % concurrency
    run.seconds = time.perf_counter() - t0
    run.cpu_s = time.process_time() - c0
    return run


# -------------------------------------------------------------------- server
class Server:
    def __init__(self, *args: str, env_ids: tuple[str, ...] = ("echo-v0",)) -> None:
        cmd = [sys.executable, "-m", "gymhub.server.cli", *env_ids, "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if " at http://" not in line:
            raise RuntimeError(f"server did not start: {line!r}")
        self.url = line.split(" at ", 1)[1].split()[0]

    def rss_kib(self) -> int:
        return rss_kib(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


async def through_server(url: str, concurrency: int, seconds: float,
                         server_pid: int | None = None, *, batch: bool = True) -> Run:
    run = Run()
    conns = min(concurrency, 256)
    async with AsyncEnvClient(url, max_connections=conns, timeout=60, batch=batch) as client:
        t_end = time.perf_counter() + seconds

        async def slot(k: int) -> None:
            n = 0
            while time.perf_counter() < t_end:
                try:
                    ep: RemoteEpisode = await client.open("echo-v0", seed=k * 100_000 + n)
                    n += 1
                    gold = ep.observation[-1].content
                    for action in (LOOK, LOOK, LOOK, submit(gold)):
                        s = time.perf_counter()
                        await ep.step(action)
                        run.latencies.append(time.perf_counter() - s)
                        run.steps += 1
                    await ep.close()
                    run.episodes += 1
                except Exception as exc:  # counted, and shown once
                    if run.errors == 0:
                        print(f"    first error: {type(exc).__name__}: {exc}", flush=True)
                    run.errors += 1

        t0, c0 = time.perf_counter(), time.process_time()
        s0 = cpu_s(server_pid) if server_pid else 0.0
        await asyncio.gather(*(slot(k) for k in range(concurrency)))
        run.seconds = time.perf_counter() - t0
        run.cpu_s = time.process_time() - c0
        run.server_cpu_s = cpu_s(server_pid) - s0 if server_pid else 0.0
    return run


async def hold(url: str, n: int, server_pid: int) -> tuple[int, float, int]:
    """Open ``n`` episodes, step each once, keep all open.

    Returns (errors, seconds, server RSS in KiB while all ``n`` were open).
    """
    errors = 0
    async with AsyncEnvClient(url, max_connections=256, timeout=120) as client:
        t0 = time.perf_counter()

        async def one(k: int) -> RemoteEpisode | None:
            nonlocal errors
            try:
                ep = await client.open("echo-v0", seed=k)
                await ep.step(LOOK)
                return ep
            except Exception as exc:
                if errors == 0:
                    print(f"    first error: {type(exc).__name__}: {exc}", flush=True)
                errors += 1
                return None

        eps = await asyncio.gather(*(one(k) for k in range(n)))
        elapsed = time.perf_counter() - t0
        health = await client.health()
        if health["episodes_open"] != n - errors:
            errors += abs(health["episodes_open"] - (n - errors))
        held_rss = rss_kib(server_pid)
        await asyncio.gather(*(ep.close() for ep in eps if ep is not None))
    return errors, elapsed, held_rss


def in_process_memory(n: int) -> float:
    """KiB of this process's RSS per open in-process echo episode (the env itself)."""
    import gc

    gc.collect()
    before = rss_kib(os.getpid())
    envs = [make("echo-v0") for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
        env.step(LOOK)
    after = rss_kib(os.getpid())
    del envs
    return (after - before) / n


# ------------------------------------------------------------------- OpenEnv
OPENENV_PYTHON = os.environ.get("OPENENV_PYTHON", "/tmp/openenv-venv/bin/python")

#: OpenEnv's side: an echo environment with the same shape as echo-v0 (a word, three
#: looks, a submit that ends the episode with reward 1), served by create_fastapi_app.
OPENENV_SERVER = """
import socket, sys
import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

WORDS = ["apple", "river", "stone", "cloud", "ember"]

class EchoAction(Action):
    tool: str
    answer: str = ""

class EchoObservation(Observation):
    content: str = ""

class EchoEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State(episode_id="", step_count=0)
        self.word = ""

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.word = f"{WORDS[(seed or 0) % len(WORDS)]}-{seed or 0}"
        self._state = State(episode_id=episode_id or "", step_count=0)
        return EchoObservation(content=self.word, done=False, reward=0.0)

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        if action.tool == "submit" or self._state.step_count >= 4:
            ok = action.answer == self.word
            return EchoObservation(content="done", done=True, reward=1.0 if ok else 0.0)
        return EchoObservation(content=self.word, done=False, reward=0.0)

    @property
    def state(self):
        return self._state

app = create_fastapi_app(EchoEnv, EchoAction, EchoObservation,
                         max_concurrent_envs=int(sys.argv[1]))
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
config = uvicorn.Config(app, log_level="error", backlog=4096, ws_max_queue=64)
server = uvicorn.Server(config)

class Announce(uvicorn.Server):
    async def startup(self, sockets=None):
        await super().startup(sockets=sockets)
        print(f"openenv at http://127.0.0.1:{sock.getsockname()[1]}", flush=True)

Announce(config).run(sockets=[sock])
"""

#: OpenEnv's driver, run in its venv: one WebSocket session per slot, reset + 4 steps.
OPENENV_DRIVER = """
import asyncio, json, sys, time
import websockets

async def main(url, n, seconds):
    lat, stats = [], {"steps": 0, "episodes": 0, "errors": 0, "first_error": ""}
    t_end = time.perf_counter() + seconds

    async def slot(k):
        try:
            async with websockets.connect(url, max_size=2**24, open_timeout=60,
                                          ping_interval=None) as ws:
                e = 0
                while time.perf_counter() < t_end:
                    await ws.send(json.dumps({"type": "reset", "data": {"seed": k * 100000 + e}}))
                    word = json.loads(await asyncio.wait_for(ws.recv(), 60)
                                      )["data"]["observation"]["content"]
                    e += 1
                    for action in ({"tool": "look"},) * 3 + ({"tool": "submit", "answer": word},):
                        s = time.perf_counter()
                        await ws.send(json.dumps({"type": "step", "data": action}))
                        reply = json.loads(await asyncio.wait_for(ws.recv(), 60))
                        lat.append(time.perf_counter() - s)
                        if reply.get("type") != "observation":
                            raise RuntimeError(str(reply)[:300])
                        stats["steps"] += 1
                    stats["episodes"] += 1
        except Exception as exc:
            stats["errors"] += 1
            stats["first_error"] = stats["first_error"] or f"{type(exc).__name__}: {exc}"[:300]

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(slot(k) for k in range(n)))
    lat.sort()
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")
    stats.update(seconds=time.perf_counter() - t0, cpu_s=time.process_time() - c0,
                 p50=pct(0.5), p99=pct(0.99))
    print(json.dumps(stats))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
"""


@dataclass
class Side:
    """One measurement of a non-gymhub server (percentiles come precomputed)."""

    steps: int
    seconds: float
    p50: float
    p99: float
    errors: int
    cpu_s: float
    server_cpu_s: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0


class OpenEnv:
    """OpenEnv's server as a subprocess of its own venv, or the reason it cannot run."""

    def __init__(self, max_sessions: int) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.why_not = ""
        self._dir = tempfile.TemporaryDirectory(prefix="gymhub-bench-openenv-")
        if not Path(OPENENV_PYTHON).exists():
            self.why_not = (f"{OPENENV_PYTHON} not found (make the venv: python3 -m venv "
                            "/tmp/openenv-venv && /tmp/openenv-venv/bin/pip install openenv-core)")
            return
        server = Path(self._dir.name, "openenv_echo_server.py")
        server.write_text(OPENENV_SERVER)
        Path(self._dir.name, "openenv_driver.py").write_text(OPENENV_DRIVER)
        self._log = Path(self._dir.name, "server.log")
        with self._log.open("w") as log:  # a file, not a pipe: a full pipe would stall it
            self.proc = subprocess.Popen([OPENENV_PYTHON, str(server), str(max_sessions)],
                                         stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if " at http://" not in line:
            self.proc.wait(10)
            err = self._log.read_text()
            self.why_not = f"OpenEnv server did not start: {line!r} {err.strip()[-800:]}"
            self.stop()
            return
        self.url = line.split(" at ", 1)[1].split()[0].replace("http://", "ws://") + "/ws"

    def run(self, concurrency: int, seconds: float) -> Side | None:
        if self.proc is None:
            return None
        s0 = cpu_s(self.proc.pid)
        out = subprocess.run([OPENENV_PYTHON, str(Path(self._dir.name, "openenv_driver.py")),
                              self.url, str(concurrency), str(seconds)],
                             capture_output=True, text=True, timeout=seconds * 20 + 120)
        if out.returncode != 0:
            self.why_not = f"OpenEnv driver failed: {out.stderr.strip()[-800:]}"
            return None
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if r["first_error"]:
            print(f"    OpenEnv first error: {r['first_error']}", flush=True)
        return Side(r["steps"], r["seconds"], r["p50"], r["p99"], r["errors"], r["cpu_s"],
                    cpu_s(self.proc.pid) - s0)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        self._dir.cleanup()


def bench(levels: list[int], seconds: float, held: int, openenv: bool) -> None:
    print(f"echo-v0, {os.cpu_count()} CPU(s), {seconds:g} s per measurement; servers are "
          "separate processes, each driven by a client process on the same machine\n")
    header = (f"{'episodes':>8} | {'in-proc st/s':>12} {'p50 ms':>7} {'p99 ms':>7} | "
              f"{'gymhub st/s':>11} {'p50 ms':>7} {'p99 ms':>7} {'err':>4} {'/in-proc':>8} | "
              f"{'1 req/op st/s':>13} {'p99 ms':>7} | "
              f"{'OpenEnv st/s':>12} {'p50 ms':>7} {'p99 ms':>7} {'err':>4} | "
              f"{'gymhub/OpenEnv':>14}")
    top = max(levels, default=1) + 100
    server = Server("--max-episodes", str(top), "--log-level", "error")
    other = OpenEnv(top) if openenv else None
    if other is not None and other.why_not:
        print(f"OpenEnv column skipped: {other.why_not}\n")
    print(header)
    print("-" * len(header))
    rows: list[tuple[int, Run, Run, Side | None]] = []
    try:
        for n in levels:
            base = in_process(n, seconds)
            remote = asyncio.run(through_server(server.url, n, seconds, server.proc.pid))
            single = asyncio.run(through_server(server.url, n, seconds, server.proc.pid,
                                                batch=False))
            theirs = other.run(n, seconds) if other is not None else None
            rows.append((n, base, remote, theirs))
            line = (f"{n:>8} | {base.steps_per_s:>12,.0f} {base.pct(.5):>7.3f} "
                    f"{base.pct(.99):>7.3f} | {remote.steps_per_s:>11,.0f} {remote.pct(.5):>7.2f}"
                    f" {remote.pct(.99):>7.2f} {remote.errors:>4} "
                    f"{remote.steps_per_s / base.steps_per_s:>8.3f} | "
                    f"{single.steps_per_s:>13,.0f} {single.pct(.99):>7.2f} | ")
            if theirs is not None:
                ratio = remote.steps_per_s / theirs.steps_per_s if theirs.steps else float("inf")
                line += (f"{theirs.steps_per_s:>12,.0f} {theirs.p50:>7.2f} {theirs.p99:>7.2f} "
                         f"{theirs.errors:>4} | {ratio:>13.2f}x")
            else:
                line += f"{'-':>12} {'-':>7} {'-':>7} {'-':>4} | {'-':>14}"
            print(line, flush=True)
        if other is not None and other.why_not and other.proc is None:
            print(f"OpenEnv: {other.why_not}")
        print("\nCPU per step in microseconds (robust to a busy machine, unlike the rates):")
        print(f"{'episodes':>8} | {'in-proc':>7} | {'gymhub server':>13} {'client':>6} | "
              f"{'OpenEnv server':>14} {'client':>6}")
        for n, base, remote, theirs in rows:
            b_us = base.cpu_s / max(1, base.steps) * 1e6
            s_us = remote.server_cpu_s / max(1, remote.steps) * 1e6
            c_us = remote.cpu_s / max(1, remote.steps) * 1e6
            o = f"{'-':>14} {'-':>6}"
            if theirs is not None:
                o = (f"{theirs.server_cpu_s / max(1, theirs.steps) * 1e6:>14.0f} "
                     f"{theirs.cpu_s / max(1, theirs.steps) * 1e6:>6.0f}")
            print(f"{n:>8} | {b_us:>7.1f} | {s_us:>13.0f} {c_us:>6.0f} | {o}")
        print("(gymhub's figures include each episode's open and close requests; OpenEnv's "
              "include its reset message)\n")
    finally:
        server.stop()
        if other is not None:
            other.stop()
    if held > 0:
        hold_report(held)


def hold_report(held: int) -> None:
    fresh = Server("--max-episodes", str(held + 100), "--log-level", "error")  # clean heap
    try:
        idle = fresh.rss_kib()
        errors, elapsed, full = asyncio.run(hold(fresh.url, held, fresh.proc.pid))
    finally:
        fresh.stop()
    per_ep_server = (full - idle) / held
    per_ep_local = in_process_memory(held)
    print(f"{held:,} concurrent open episodes: {errors} errors, opened+stepped in "
          f"{elapsed:.1f} s ({held / elapsed:,.0f} episodes/s)")
    print(f"server RSS: {idle / 1024:.0f} MiB idle -> {full / 1024:.0f} MiB held "
          f"= {per_ep_server:.1f} KiB per open episode; in-process env alone: "
          f"{per_ep_local:.1f} KiB (ratio {per_ep_server / per_ep_local:.2f})")


async def gold_crowd(url: str, env_id: str, n: int, batch: bool = True) -> dict[str, float]:
    """``n`` episodes of ``env_id`` open at once, each played to the end by the gold policy."""
    scores: list[float] = []
    errors = 0
    peak = 0
    async with AsyncEnvClient(url, max_connections=256, timeout=600, batch=batch) as client:
        opened = asyncio.Event()
        count = 0

        async def one(k: int) -> None:
            nonlocal errors, count, peak
            try:
                ep = await client.open(env_id, seed=k)
                count += 1
                if count == n:
                    peak = (await client.health())["episodes_open"]
                    opened.set()
                await opened.wait()  # every episode is open before any step
                result = None
                while not ep.done:
                    result = await ep.step(await ep.gold_action())
                await ep.close()
                score = result.info.get("score") if result is not None else None
                if score is None or score.error:
                    errors += 1
                else:
                    scores.append(score.value)
            except Exception as exc:
                if errors == 0:
                    print(f"    first error: {type(exc).__name__}: {exc}", flush=True)
                errors += 1
                opened.set()

        t0 = time.perf_counter()
        await asyncio.gather(*(one(k) for k in range(n)))
        seconds = time.perf_counter() - t0
    return {"episodes": len(scores), "mean": sum(scores) / max(1, len(scores)),
            "errors": errors, "seconds": seconds, "peak_open": peak}


def every_env(n: int, env_ids: list[str], compare: bool = False) -> None:
    """Thousands of concurrent episodes of every built-in environment through one server.

    With ``compare``, each environment runs twice more, alternating the client's batching
    off and on, to show what batching does where the environment's own work dominates.
    """
    server = Server("--max-episodes", str(n + 100), "--log-level", "error",
                    env_ids=tuple(env_ids))
    print(f"{n:,} concurrent episodes per environment through one `gymhub serve "
          f"{' '.join(env_ids)}` (all open before the first step; gold policy to the end)")
    print(f"{'env':>8} | {'peak open':>9} {'episodes':>8} {'mean score':>10} {'errors':>6} "
          f"{'seconds':>8} {'episodes/s':>10}")
    try:
        for env_id in env_ids:
            r = asyncio.run(gold_crowd(server.url, env_id, n))
            print(f"{env_id:>8} | {r['peak_open']:>9,.0f} {r['episodes']:>8,.0f} "
                  f"{r['mean']:>10.3f} {r['errors']:>6.0f} {r['seconds']:>8.1f} "
                  f"{r['episodes'] / r['seconds']:>10,.1f}", flush=True)
            for batch in (False, True) if compare else ():
                c = asyncio.run(gold_crowd(server.url, env_id, n, batch=batch))
                print(f"{'':>8}   batch={'on ' if batch else 'off'}: "
                      f"{c['episodes'] / c['seconds']:,.1f} episodes/s, {c['errors']:.0f} errors",
                      flush=True)
    finally:
        server.stop()


def soak(minutes: float, concurrency: int, interval: float) -> None:
    server = Server("--max-episodes", str(concurrency + 100), "--log-level", "error")
    print(f"soak: {minutes:g} min at {concurrency} concurrent episodes; one line per "
          f"{interval:g} s (episodes/s should stay flat, RSS should not grow)")
    print(f"{'t (s)':>7} {'episodes/s':>11} {'steps/s':>9} {'p99 ms':>8} {'errors':>6} "
          f"{'server RSS MiB':>14} {'server CPU us/step':>18}")
    t_stop = time.monotonic() + minutes * 60
    t0 = time.monotonic()
    try:
        while time.monotonic() < t_stop:
            r = asyncio.run(through_server(server.url, concurrency, interval, server.proc.pid))
            print(f"{time.monotonic() - t0:>7.0f} {r.episodes / r.seconds:>11,.0f} "
                  f"{r.steps_per_s:>9,.0f} {r.pct(.99):>8.2f} {r.errors:>6} "
                  f"{server.rss_kib() / 1024:>14.1f} "
                  f"{r.server_cpu_s / max(1, r.steps) * 1e6:>18.0f}", flush=True)
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--levels", default="1,64,512,2048")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--held", type=int, default=10_000)
    p.add_argument("--soak", type=float, default=None, metavar="MINUTES")
    p.add_argument("--soak-concurrency", type=int, default=512)
    p.add_argument("--soak-interval", type=float, default=30.0)
    p.add_argument("--no-openenv", action="store_true", help="skip the OpenEnv column")
    p.add_argument("--every-env", type=int, default=None, metavar="N",
                   help="instead: N concurrent gold episodes of each of --envs through one server")
    p.add_argument("--envs", default="echo-v0,sql-v0,code-v0")
    p.add_argument("--compare-batching", action="store_true",
                   help="with --every-env: also run each env with client batching off and on")
    args = p.parse_args(argv)
    if args.every_env is not None:
        every_env(args.every_env, [e for e in args.envs.split(",") if e], args.compare_batching)
    elif args.soak is not None:
        soak(args.soak, args.soak_concurrency, args.soak_interval)
    else:
        bench([int(x) for x in args.levels.split(",") if x.strip()], args.seconds, args.held,
              not args.no_openenv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

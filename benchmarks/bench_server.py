"""Environment server throughput, latency and memory, as ratios to in-process stepping.

Run:  python benchmarks/bench_server.py [--levels 1,64,512,2048] [--seconds 5]
      python benchmarks/bench_server.py --soak 30        # not for CI

Both sides run on this machine in the same run: the in-process baseline steps the same
``echo-v0`` environments directly; the server side starts ``gymhub serve echo-v0`` as a
separate process and drives it with the async client from this process. Each
concurrency level runs one workload per side: every "episode slot" loops open ->
3 x ``look`` -> gold ``submit`` -> close, and every step's latency is recorded.
On a small machine the client competes with the server for the same cores, so the
ratios are pessimistic for a learner on another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from gymhub.envs import make
from gymhub.server.client import AsyncEnvClient, RemoteEpisode
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
    def __init__(self, *args: str) -> None:
        cmd = [sys.executable, "-m", "gymhub.server.cli", "echo-v0", "--port", "0", *args]
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
                         server_pid: int | None = None) -> Run:
    run = Run()
    conns = min(concurrency, 256)
    async with AsyncEnvClient(url, max_connections=conns, timeout=60) as client:
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


def bench(levels: list[int], seconds: float, held: int) -> None:
    print(f"echo-v0, {os.cpu_count()} CPU(s), {seconds:g} s per measurement; "
          "server = separate `gymhub serve` process, client = AsyncEnvClient here\n")
    header = (f"{'episodes':>8} | {'in-proc steps/s':>15} {'p50 ms':>7} {'p99 ms':>7} | "
              f"{'server steps/s':>14} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} | "
              f"{'throughput ratio':>16} {'p50 ratio':>9} {'p99 ratio':>9}")
    print(header)
    print("-" * len(header))
    server = Server("--max-episodes", str(max(levels, default=1) + 100), "--log-level", "error")
    cpu_rows: list[tuple[int, Run, Run]] = []
    try:
        for n in levels:
            base = in_process(n, seconds)
            remote = asyncio.run(through_server(server.url, n, seconds, server.proc.pid))
            cpu_rows.append((n, base, remote))
            print(f"{n:>8} | {base.steps_per_s:>15,.0f} {base.pct(.5):>7.3f} {base.pct(.99):>7.3f}"
                  f" | {remote.steps_per_s:>14,.0f} {remote.pct(.5):>7.2f} {remote.pct(.99):>7.2f}"
                  f" {remote.errors:>6} | {remote.steps_per_s / base.steps_per_s:>16.4f}"
                  f" {remote.pct(.5) / base.pct(.5):>9.0f}x"
                  f" {remote.pct(.99) / base.pct(.99):>8.0f}x", flush=True)
        print("\nCPU per step (wall-clock figures above depend on how busy the machine is):")
        print(f"{'episodes':>8} | {'in-proc us':>10} | {'server us':>9} {'client us':>9} | "
              f"{'server/in-proc':>14}")
        for n, base, remote in cpu_rows:
            b_us = base.cpu_s / base.steps * 1e6
            s_us = remote.server_cpu_s / max(1, remote.steps) * 1e6
            c_us = remote.cpu_s / max(1, remote.steps) * 1e6
            print(f"{n:>8} | {b_us:>10.1f} | {s_us:>9.0f} {c_us:>9.0f} | {s_us / b_us:>13.0f}x")
        print("(server and client CPU per step include each episode's open and close)\n")
    finally:
        server.stop()
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
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--held", type=int, default=10_000)
    p.add_argument("--soak", type=float, default=None, metavar="MINUTES")
    p.add_argument("--soak-concurrency", type=int, default=512)
    p.add_argument("--soak-interval", type=float, default=30.0)
    args = p.parse_args(argv)
    if args.soak is not None:
        soak(args.soak, args.soak_concurrency, args.soak_interval)
    else:
        bench([int(x) for x in args.levels.split(",") if x.strip()], args.seconds, args.held)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

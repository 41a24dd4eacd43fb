"""Scale-out: servers launched by Ray vs by hand, launch and recovery times, EnvPool routing.

Run:  python benchmarks/bench_scale.py [--seconds 2] [--concurrency 64] [--repeats 4]

Everything runs on this machine in the same run, so compare within a table only:

* **data path**: N = 1 and 2 servers serving ``echo-v0`` and ``sql-v0``, started by
  ``gymhub.launch.ray`` (Ray actors, each running ``gymhub serve`` as a child) and the
  same servers started by hand (``gymhub serve`` subprocesses, bound to the same address),
  both up at once on the same Ray cluster, driven alternately (A B B A ...) by one
  closed-loop :class:`~gymhub.client.EnvPool` driver: every slot loops open -> 3 tool
  calls -> gold answer -> close (``sql-v0``: three ``run_sql`` calls, then the server's
  gold action). The ratio is Ray / by hand over all runs, and per A/B pair (>= 0.95
  means the launcher costs nothing on the data path); server CPU per step is from /proc.
  A shared machine makes single pairs noisy: read the median and the CPU per step;
* **launch**: ``gymhub launch ray`` from the shell (a cold local cluster included) until
  every URL is printed, and ``gymhub.launch.ray`` on a running cluster until every
  server answers;
* **recovery**: an actor killed with ``ray.kill`` (and, separately, its server process
  killed with SIGKILL) until the restarted server answers and the supervisor has seen it;
* **routing**: :meth:`EnvPool.open`'s own cost with 1..64 servers, measured over fake
  clients whose ``open`` returns at once (64 real servers do not fit on two cores); the
  real open round trip measured above puts it in proportion.

On a 2-core machine the driver competes with the servers for the cores, so absolute
rates are low and two servers cannot double one; the ratio is what this measures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import LOOK, Run, Server, cpu_s, submit

import gymhub.launch
from gymhub.client import EnvPool, RemoteEpisode
from gymhub.launch.server_process import healthz
from gymhub.types import Message, ToolCall

ENVS = ("echo-v0", "sql-v0")
SQL = Message(role="assistant", content="",
              tool_calls=(ToolCall(id="q", name="run_sql", arguments={"query": "SELECT 1"}),))


# ------------------------------------------------------------------- driver
async def drive(urls: Sequence[str], env_id: str, concurrency: int, seconds: float,
                server_pids: Sequence[int]) -> tuple[Run, list[float]]:
    """Closed loop over an EnvPool; returns the run and the open round trips."""
    run, opens = Run(), []
    async with EnvPool(list(urls), max_connections=min(concurrency, 256), timeout=60) as pool:
        t_end = time.perf_counter() + seconds

        async def step(ep: RemoteEpisode, action: Any) -> None:
            s = time.perf_counter()
            await ep.step(action)
            run.latencies.append(time.perf_counter() - s)
            run.steps += 1

        async def slot(k: int) -> None:
            n = 0
            while time.perf_counter() < t_end:
                try:
                    s = time.perf_counter()
                    ep = await pool.open(env_id, seed=k * 100_000 + n)
                    opens.append(time.perf_counter() - s)
                    n += 1
                    if env_id == "echo-v0":
                        for action in (LOOK, LOOK, LOOK, submit(ep.observation[-1].content)):
                            await step(ep, action)
                    else:
                        for _ in range(3):
                            await step(ep, SQL)
                        await step(ep, await ep.gold_action())
                    await ep.close()
                    run.episodes += 1
                except Exception as exc:  # counted, and shown once
                    if run.errors == 0:
                        print(f"    first error: {type(exc).__name__}: {exc}", flush=True)
                    run.errors += 1

        c0 = sum(cpu_s(p) for p in server_pids)
        t0 = time.perf_counter()
        await asyncio.gather(*(slot(k) for k in range(concurrency)))
        run.seconds = time.perf_counter() - t0
        run.server_cpu_s = sum(cpu_s(p) for p in server_pids) - c0
    return run, opens


def pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000 if s else float("nan")


# ---------------------------------------------------------------- launching
def cold_cli_launch(servers: int) -> float:
    """Seconds from ``gymhub launch ray`` (a fresh local cluster) to every URL printed."""
    cmd = [sys.executable, "-m", "gymhub.launch.cli", "ray", *ENVS, "--servers", str(servers)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    urls = [proc.stdout.readline().strip() for _ in range(servers)]
    elapsed = time.perf_counter() - t0
    if not all(u.startswith("http://") for u in urls):
        raise RuntimeError(f"gymhub launch ray printed {urls!r}")
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    proc.stdout.close()
    return elapsed


def by_hand(servers: int, host: str, max_episodes: int) -> list[Server]:
    return [Server("--host", host, "--max-episodes", str(max_episodes), "--log-level", "error",
                   env_ids=ENVS) for _ in range(servers)]


def compare(n: int, host: str, args: argparse.Namespace, ray_opens: list[float]) -> None:
    max_episodes = args.concurrency + 100
    hand = by_hand(n, host, max_episodes)
    t0 = time.perf_counter()
    launched = gymhub.launch.ray(ENVS, servers=n, serve_args=[
        "--max-episodes", str(max_episodes), "--log-level", "error"])
    ready_s = time.perf_counter() - t0
    import ray

    ray_pids = [i["pid"] for i in ray.get([a.info.remote() for a in launched.actors])]
    arms = {"by hand": ([s.url for s in hand], [s.proc.pid for s in hand]),
            "Ray": (launched.urls, ray_pids)}
    try:
        print(f"\n{n} server(s) (gymhub.launch.ray on the running cluster: all ready in "
              f"{ready_s:.2f} s); {args.concurrency} concurrent episodes, "
              f"{args.seconds:g} s per run, {args.repeats} run(s) per arm, order A B B A")
        print(f"{'env':>8} {'launched':>8} | {'steps/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
              f"{'srv CPU us/step':>15} {'errors':>6} | {'ratio':>5} "
              f"{'per pair: median (min-max)':>26}")
        for env_id in ENVS:
            results: dict[str, list[Run]] = {"by hand": [], "Ray": []}
            order = ["by hand", "Ray", "Ray", "by hand"] * args.repeats
            for arm in order[:2 * args.repeats]:
                urls, pids = arms[arm]
                run, opens = asyncio.run(drive(urls, env_id, args.concurrency, args.seconds,
                                               pids))
                results[arm].append(run)
                if arm == "Ray":
                    ray_opens.extend(opens)
            rates = {}
            for arm, runs in results.items():
                steps = sum(r.steps for r in runs)
                seconds = sum(r.seconds for r in runs)
                lat = [x for r in runs for x in r.latencies]
                rates[arm] = steps / seconds
                cpu = sum(r.server_cpu_s for r in runs) / max(1, steps) * 1e6
                ratio = ""
                if arm == "Ray":
                    pairs = [r.steps_per_s / h.steps_per_s
                             for h, r in zip(results["by hand"], runs, strict=True)]
                    ratio = (f"{rates['Ray'] / rates['by hand']:>5.2f} "
                             f"{statistics.median(pairs):>12.2f} ({min(pairs):.2f}-"
                             f"{max(pairs):.2f})")
                print(f"{env_id:>8} {arm:>8} | {rates[arm]:>8,.0f} {pct(lat, .5):>7.2f} "
                      f"{pct(lat, .99):>7.2f} {cpu:>15.0f} "
                      f"{sum(r.errors for r in runs):>6} | {ratio}", flush=True)
        if n == 2:
            recovery(launched)
    finally:
        launched.stop(drain_timeout_s=5)
        for s in hand:
            s.stop()


def recovery(launched: Any, kills: int = 3) -> None:
    """Time from a killed server until its successor answers, and until the supervisor knows.

    "answers": ``/healthz`` at the old URL reports a new incarnation (from then on a step
    of a lost episode is answered ``episode_lost``, and new episodes open there);
    "listed": :meth:`RayServers.refresh` has the restarted actor's URL (what rewrites
    the URLs file when the URL changed).
    """
    import ray

    print("\nrecovery after a killed server, seconds (mean / max over "
          f"{kills} kills, 2 servers of {' '.join(ENVS)})")
    print(f"  {'killed by':<30} {'answers':>13} {'listed':>13} {'server start':>12} "
          f"{'URL kept':>8}")
    for how in ("ray.kill(actor)", "SIGKILL to the server process"):
        answered, listed, starts, same_url = [], [], [], 0
        for k in range(kills):
            i = k % len(launched.actors)
            before, incarnation = launched.urls[i], launched.incarnations[i]
            if how.startswith("ray.kill"):
                t0 = time.perf_counter()
                ray.kill(launched.actors[i], no_restart=False)
            else:
                pid = ray.get(launched.actors[i].info.remote())["pid"]
                t0 = time.perf_counter()
                os.kill(pid, signal.SIGKILL)
            t_answer = None
            while True:
                if t_answer is None:
                    health = healthz(before, timeout=0.2)
                    if health and health.get("incarnation") not in (None, incarnation):
                        t_answer = time.perf_counter() - t0
                if i in launched.refresh(timeout=0.02):
                    break
                if time.perf_counter() - t0 > 60:
                    raise RuntimeError(f"server {i} was not restarted within 60 s")
            listed.append(time.perf_counter() - t0)
            answered.append(t_answer if t_answer is not None else listed[-1])
            assert healthz(launched.urls[i]) is not None
            starts.append(ray.get(launched.actors[i].info.remote())["ready_s"])
            same_url += launched.urls[i] == before
        print(f"  {how:<30} {statistics.mean(answered):>6.2f} /{max(answered):>5.2f} "
              f"{statistics.mean(listed):>6.2f} /{max(listed):>5.2f} "
              f"{statistics.mean(starts):>12.2f} {same_url:>4} of {kills}", flush=True)


# ------------------------------------------------------------------ routing
def routing(open_rtt_ms: float, levels: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
            opens: int = 20_000, live_per_server: int = 8) -> None:
    """``EnvPool.open``'s own cost over fake clients, as the server count grows."""

    async def measure(n: int) -> tuple[float, float]:
        pool = EnvPool([f"http://10.0.0.{k + 1}:8000" for k in range(n)])
        counter = iter(range(10**9))
        for client in pool.clients:
            async def fake_open(env: str, *, _c: Any = client, **_: Any) -> RemoteEpisode:
                return RemoteEpisode(client=_c, id=f"e{next(counter)}", env=env,
                                     observation=[], info={})

            async def fake_close(episode_id: str, **_: Any) -> None:
                return None

            client.open = fake_open  # type: ignore[method-assign]
            client.close_episode = fake_close  # type: ignore[method-assign]
        held = [await pool.open("echo-v0") for _ in range(n * live_per_server)]
        t0 = time.perf_counter()
        for _ in range(opens):  # steady state: open one, close one
            ep = await pool.open("echo-v0")
            await held.pop(0).close()
            held.append(ep)
        per_open = (time.perf_counter() - t0) / opens
        # the fake open + close alone, without the pool's routing
        c = pool.clients[0]
        t1 = time.perf_counter()
        for _ in range(opens):
            e = await c.open("echo-v0")
            await c.close_episode(e.id)
        base = (time.perf_counter() - t1) / opens
        await pool.aclose()
        return per_open, base

    print(f"\nEnvPool.open routing cost vs server count (fake clients: no I/O; "
          f"{live_per_server} live episodes per server; measured on this machine, not "
          f"64 real processes). Real open round trip measured above: {open_rtt_ms:.2f} ms "
          f"p50")
    print(f"{'servers':>7} | {'open+close us':>13} {'of which routing us':>19} "
          f"{'share of a real open':>20}")
    for n in levels:
        per_open, base = asyncio.run(measure(n))
        routing_us = max(0.0, per_open - base) * 1e6
        print(f"{n:>7} | {per_open * 1e6:>13.1f} {routing_us:>19.1f} "
              f"{routing_us / (open_rtt_ms * 1000):>19.2%}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--repeats", type=int, default=4, help="runs per arm (A B B A ...)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold `gymhub launch ray`")
    args = p.parse_args(argv)

    if not args.no_cold:
        cold = [cold_cli_launch(2) for _ in range(2)]
        print(f"`gymhub launch ray {' '.join(ENVS)} --servers 2` (a fresh local Ray cluster "
              f"included) to both URLs printed: {', '.join(f'{c:.1f} s' for c in cold)}")
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"ray.init(num_cpus=2): {time.perf_counter() - t0:.1f} s")
    host = ray.util.get_node_ip_address()
    ray_opens: list[float] = []
    try:
        for n in (1, 2):
            compare(n, host, args, ray_opens)
        routing(pct(ray_opens, .5))
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

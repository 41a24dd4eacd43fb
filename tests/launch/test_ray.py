"""`gymhub launch ray` on a local Ray cluster (`ray.init(num_cpus=2)`) with two echo servers.

What is checked: both servers answer and are listed in the URLs file; episodes opened
through `EnvPool` spread over both, and every step lands on the server that holds its
episode (each server's step counter equals the steps of its own episodes); a killed
actor is restarted by Ray and its old episode comes back as a loud error
(`EpisodeLost` once servers report incarnations, not a KeyError and not a 0), and a
restart that cannot take its port back is listed under its new URL. Marked slow: the
cluster alone takes a few seconds to start (the whole file stays well under a minute).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import ray

import gymhub.errors as errors
from gymhub.client import EnvPool
from gymhub.errors import ServerError
from gymhub.launch import RayServers, cli
from gymhub.launch import ray as launch_ray
from gymhub.launch.server_process import healthz

pytestmark = pytest.mark.slow

LOOK = {"role": "assistant", "content": "",
        "tool_calls": [{"id": "l", "type": "function",
                        "function": {"name": "look", "arguments": "{}"}}]}
#: The error a lost episode must be: never a bare "not found", never a 0.
LOST = (errors.EpisodeLost,)


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def steps_served(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("gymhub_steps_total{"))


def read_urls(path: Path) -> list[str]:
    return path.read_text().split()


def test_cli_prints_each_url_keeps_the_file_and_drains_on_sigint(cluster, tmp_path, capsys):
    """First in the file: it needs the cluster's two CPUs that the fixture below holds."""
    urls_file = tmp_path / "urls.txt"

    def interrupt_when_listed() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                urls_file.exists() and len(read_urls(urls_file)) == 2):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends; the handler drains

    threading.Thread(target=interrupt_when_listed, daemon=True).start()
    rc = cli.main(["ray", "echo-v0", "--servers", "2", "--urls-file", str(urls_file),
                   "--serve-arg=--drain-timeout", "--serve-arg", "5", "--interval", "0.2"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert sorted(out.split()) == sorted(read_urls(urls_file))
    assert "2 of 2 server(s) drained and exited cleanly" in err
    assert all(healthz(u, timeout=0.5) is None for u in read_urls(urls_file))
    deadline = time.monotonic() + 10  # actors and placement group gone (Ray frees them async)
    while ray.available_resources().get("CPU") != 2:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.05)


@pytest.fixture(scope="module")
def servers(cluster, tmp_path_factory):
    urls_file = tmp_path_factory.mktemp("launch") / "urls.txt"
    ready: list[tuple[int, str]] = []
    with launch_ray(["echo-v0"], servers=2, urls_file=urls_file,
                    serve_args=["--drain-timeout", "5"],
                    on_ready=lambda i, u: ready.append((i, u))) as handle:
        assert sorted(ready) == list(enumerate(handle.urls))
        yield handle


def test_two_servers_one_cpu_each_spread_and_listed(servers: RayServers):
    assert len(set(servers.urls)) == 2
    assert read_urls(servers.urls_file) == servers.urls
    for url in servers.urls:
        health = healthz(url)
        assert health is not None and health["status"] == "ok"
    table = ray.util.placement_group_table(servers.placement_group)
    assert table["strategy"] == "SPREAD" and list(table["bundles"].values()) == [{"CPU": 1.0}] * 2
    assert ray.available_resources().get("CPU", 0) == 0  # both CPUs held by the servers
    for info in ray.get([a.info.remote() for a in servers.actors]):
        # Ray's workers run at niceness 15; a data-path server asks for 0 (root may lower it)
        assert info["nice"] == (0 if os.geteuid() == 0 else info["nice"])


def test_episodes_spread_and_every_step_lands_on_its_server(servers: RayServers):
    before = {u: steps_served(u) for u in servers.urls}

    async def body() -> Counter[str]:
        async with EnvPool.from_file(servers.urls_file) as pool:
            eps = [await pool.open("echo-v0", seed=k) for k in range(8)]
            placed = Counter(ep.client.config.base_url for ep in eps)
            assert placed == dict.fromkeys(servers.urls, 4)
            health = {h["url"]: h["episodes_open"] for h in await pool.health()}
            assert health == placed
            steps = Counter[str]()
            for k in range(3):
                await asyncio.gather(*(ep.step(LOOK) for ep in eps))
                for ep in eps:
                    steps[ep.client.config.base_url] += 1
                assert all(ep.seq == k + 1 for ep in eps)
            await asyncio.gather(*(ep.close() for ep in eps))
            return steps

    steps = asyncio.run(body())
    assert {u: steps_served(u) - before[u] for u in servers.urls} == steps


def wait_restarted(servers: RayServers, i: int, timeout: float = 30) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if i in servers.refresh(timeout=0.5):
            return time.monotonic() - t0
    raise AssertionError(f"server {i} was not restarted within {timeout} s")


def test_a_killed_server_is_restarted_and_its_old_episode_is_lost(servers: RayServers):
    urls_before = list(servers.urls)
    incarnation = servers.incarnations[0]

    async def body() -> None:
        async with EnvPool([servers.urls[0]], retries=2, backoff_s=0.01,
                           max_backoff_s=0.05) as pool:
            ep = await pool.open("echo-v0", seed=1)
            await ep.step(LOOK)
            ray.kill(servers.actors[0], no_restart=False)  # Ray restarts it
            await asyncio.to_thread(wait_restarted, servers, 0)
            with pytest.raises(ServerError) as info:
                await ep.step(LOOK)
            assert isinstance(info.value, LOST), repr(info.value)
            assert not isinstance(info.value, KeyError)
            fresh = await pool.open("echo-v0", seed=2)  # the restarted server serves
            await fresh.step(LOOK)
            await fresh.close()

    asyncio.run(body())
    assert servers.incarnations[0] != incarnation and servers.restarts[0] == 1
    # it took its port back: same URL, and the file still lists both servers
    assert servers.urls == urls_before and read_urls(servers.urls_file) == urls_before


def test_a_restart_whose_port_is_taken_is_listed_under_its_new_url(servers: RayServers):
    old = servers.urls[1]
    host, port = old.removeprefix("http://").rsplit(":", 1)

    async def body() -> None:
        async with EnvPool([old], retries=1, backoff_s=0.01, max_backoff_s=0.05,
                           timeout=2) as pool:
            ep = await pool.open("echo-v0", seed=3)
            await ep.step(LOOK)
            with socket.socket() as squatter:
                squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                ray.kill(servers.actors[1], no_restart=False)
                deadline = time.monotonic() + 10
                while True:  # take the port as soon as the killed server lets it go
                    try:
                        squatter.bind((host, int(port)))
                        break
                    except OSError:
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.01)
                squatter.listen()
                await asyncio.to_thread(wait_restarted, servers, 1)
            with pytest.raises(ServerError) as info:  # nothing answers the old URL now
                await ep.step(LOOK)
            assert isinstance(info.value, LOST), repr(info.value)

    asyncio.run(body())
    new = servers.urls[1]
    assert new != old and healthz(new) is not None
    assert read_urls(servers.urls_file) == [servers.urls[0], new]

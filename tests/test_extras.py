"""Each user-facing extra, installed alone into a fresh venv, runs the command it is for.

The development venv has every extra at once (and pytest's own dependencies), so a
module an extra forgot to declare is always importable there: ``gymhub install`` shipped
needing ``packaging``, which only pytest had pulled in. Here gymhub is built into a wheel
from the working tree once, and each of ``gymhub``, ``gymhub[client]``,
``gymhub[server]`` and ``gymhub[hub]`` is installed from it into its own venv (no
``--system-site-packages``, run from a directory outside the checkout), which then does
its real job:

* no extra: ``gymhub envs list``; the hub commands refuse with the extra to install;
* ``[client]``: ``gymhub.make("http://.../echo-v0")`` plays an episode on a server the
  development venv runs (and fastapi is not installed);
* ``[server]``: ``gymhub serve`` answers ``GET /healthz``;
* ``[hub]``: ``gymhub hub serve``, ``hub token create``, ``env init``, ``push`` (its check
  and its offline build), ``info``, ``search`` and ``install`` by digest, all from that
  venv, and the hub's own sandboxed check of the upload, which runs ``gymhub serve`` on the
  hub venv's site-packages; then the installed environment plays an episode.

Dependencies come from a wheelhouse under pytest's cache (``.pytest_cache/d/``), keyed by
the wheel's ``Requires-Dist`` and the interpreter: built once with ``pip wheel`` (that run
downloads; it is skipped, with the reason, when the index cannot be reached), installed
from with ``--no-index`` ever after. The four venvs are built in parallel.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: "" is gymhub with its core dependencies only.
USER_EXTRAS = ("", "client", "server", "hub")
#: Never pulled by a user-facing extra: the learner's stack is gigabytes.
HEAVY = ("torch", "vllm", "transformers", "peft")


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_hub_extra_has_everything_the_server_extra_has():
    # The hub checks each upload by running `gymhub serve` on its own site-packages.
    extras = _extras()
    assert {_name(r) for r in extras["server"]} <= {_name(r) for r in extras["hub"]}


def test_the_dev_extra_has_every_user_facing_extra():
    extras = _extras()
    dev = {_name(r) for r in extras["dev"]}
    for extra in ("postgres", "server", "client", "sandbox", "hub"):
        missing = {_name(r) for r in extras[extra]} - dev
        assert not missing, f"[dev] lacks {sorted(missing)} of [{extra}]"


def test_no_user_facing_extra_lists_the_learner_stack():
    extras = _extras()
    for extra in USER_EXTRAS:
        assert not {_name(r) for r in extras[extra]} & set(HEAVY), extra


# ---------------------------------------------------------------- the slow, real thing


def _clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without anything that would point at the checkout."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "GYMHUB_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(drop)}, **extra}


def _run(args: list[str | Path], *, timeout: float = 300, **kw) -> subprocess.CompletedProcess[str]:
    kw.setdefault("env", _clean_env())
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def _build_gymhub_wheel(work: Path) -> Path:
    """gymhub's wheel, built from a copy of the working tree (the checkout stays clean).

    The copy keeps ``gymhub/<folder>`` as the relative links the repository commits and
    copies the folders they point at, so setuptools sees the layout it sees in the
    checkout; the build runs offline, with the development venv's setuptools.
    """
    src = work / "src"
    src.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "gymhub", src / "gymhub", symlinks=True, ignore=ignore)
    for link in (ROOT / "gymhub").iterdir():
        if link.is_symlink():
            target = link.resolve()
            shutil.copytree(target, src / target.name, ignore=ignore)
    out = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "--no-index", "--disable-pip-version-check", "-w", work / "dist", src],
               env=_clean_env())
    assert out.returncode == 0, out.stdout + out.stderr
    [wheel] = (work / "dist").glob("gymhub-*.whl")
    return wheel


def _requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    return sorted(line.partition(":")[2].strip() for line in text.splitlines()
                  if line.startswith("Requires-Dist:"))


def _index_problem() -> str | None:
    """Why the package index cannot be reached (``None`` when it can)."""
    url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/")
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/pip/", timeout=10):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"{url} is unreachable ({exc})"


def _wheelhouse(cache: Path, wheel: Path) -> Path:
    """Wheels of every dependency of every user-facing extra, downloaded once.

    Keyed by the wheel's requirements and this interpreter, so a change to the declared
    dependencies builds a new one (and removes the old); built into a temporary folder and
    renamed, so an interrupted download never looks complete.
    """
    key = hashlib.sha256(json.dumps([_requires_dist(wheel), sys.version,
                                     sysconfig.get_platform()]).encode()).hexdigest()[:16]
    house = cache / f"wheelhouse-{key}"
    if house.is_dir():
        return house
    partial = cache / f"partial-{key}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    want = ",".join(e for e in USER_EXTRAS if e)
    # pip wheel, not pip download: an sdist-only dependency is built here, once, so every
    # later install is wheels only.
    out = _run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check",
                "-w", partial, f"{wheel}[{want}]"], timeout=900)
    if out.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        problem = _index_problem()
        if problem is not None:
            pytest.skip(f"the extras' wheelhouse is not cached yet and {problem}")
        pytest.fail(f"pip wheel failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    for own in partial.glob("gymhub-*.whl"):
        own.unlink()  # gymhub itself is always installed from this run's build
    heavy = [p.name for p in partial.iterdir() if _name(p.name.split("-")[0]) in HEAVY]
    assert not heavy, f"a user-facing extra pulls {heavy}"
    for old in cache.glob("wheelhouse-*"):
        shutil.rmtree(old, ignore_errors=True)
    try:
        partial.rename(house)
    except OSError:  # another run finished the same wheelhouse first
        if not house.is_dir():
            raise
        shutil.rmtree(partial, ignore_errors=True)
    return house


def _make_venv(root: Path, wheel: Path, house: Path, extra: str) -> Path:
    """A fresh venv holding ``gymhub[extra]`` and its dependencies, from the wheelhouse only."""
    out = _run([sys.executable, "-m", "venv", root])
    assert out.returncode == 0, out.stderr
    python = root / "bin" / "python"
    spec = f"{wheel}[{extra}]" if extra else str(wheel)
    out = _run([python, "-m", "pip", "install", "--no-index", "--find-links", house,
                "--no-compile", "--disable-pip-version-check", spec], cwd=root)
    assert out.returncode == 0, f"installing {spec}:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
    where = _run([python, "-c", "import gymhub; print(gymhub.__file__)"], cwd=root)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).resolve().is_relative_to(root.resolve()), where.stdout
    return python


@pytest.fixture(scope="module")
def venvs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[Path]]]:
    """Each user-facing extra's venv (the python inside it), built concurrently.

    They live in a folder others may read, not in pytest's private ``tmp_path``: the hub's
    check binds the hub venv's site-packages into a sandbox whose user is ``nobody``.
    """
    work = Path(tempfile.mkdtemp(prefix="gymhub-extras-"))
    work.chmod(0o755)
    try:
        wheel = _build_gymhub_wheel(work / "build")
        house = _wheelhouse(Path(request.config.cache.mkdir("gymhub-extras")), wheel)
        with ThreadPoolExecutor(len(USER_EXTRAS)) as pool:
            yield {e: pool.submit(_make_venv, work / f"venv-{e or 'core'}", wheel, house, e)
                   for e in USER_EXTRAS}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _start(args: list[str | Path], banner: str, **kw) -> tuple[subprocess.Popen[str], str]:
    """Start a server process; returns it and its first stdout line containing ``banner``."""
    proc = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, **kw)
    assert proc.stdout is not None
    deadline, line = time.monotonic() + 90, ""
    while banner not in line and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
    if banner not in line:
        _stop(proc)
        pytest.fail(f"{args[0]} {args[1:3]} did not start (exit {proc.returncode})")
    return proc, line


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()


def _import_every_module(python: Path, package: str, cwd: Path) -> None:
    """Import each module of ``package`` in that venv: one the commands miss still counts.

    Alembic's migration environment is left out: it runs migrations when imported.
    """
    code = ("import importlib, pkgutil\n"
            f"root = importlib.import_module({package!r})\n"
            f"for m in pkgutil.walk_packages(root.__path__, {package + '.'!r}):\n"
            "    if not m.name.startswith('gymhub.hub.migrations.'):\n"
            "        importlib.import_module(m.name)\n")
    out = _run([python, "-c", code], cwd=cwd)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_core_alone_lists_environments_and_names_the_hub_extra(venvs, tmp_path):
    python = venvs[""].result()
    for package in ("gymhub.envs", "gymhub.verifiers"):
        _import_every_module(python, package, tmp_path)
    gymhub = python.parent / "gymhub"
    out = _run([gymhub, "envs", "list"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "sql-v0" in out.stdout and "echo-v0" in out.stdout
    out = _run([gymhub, "--help"], cwd=tmp_path)
    assert out.returncode == 0 and "install" in out.stdout, out.stderr
    out = _run([gymhub, "install", "alice/x", "--hub", "http://127.0.0.1:9"], cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "pip install 'gymhub[hub]'" in out.stderr and "Traceback" not in out.stderr
    # The server and the client need their extras, and say which.
    out = _run([gymhub, "serve", "echo-v0", "--port", "0"], cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "pip install 'gymhub[server]'" in out.stderr and "Traceback" not in out.stderr
    out = _run([python, "-c", "import gymhub\ntry:\n    gymhub.make('http://127.0.0.1:9/echo-v0')"
                "\nexcept gymhub.ConfigError as e:\n    print(e)\n"], cwd=tmp_path)
    assert "pip install 'gymhub[client]'" in out.stdout, out.stdout + out.stderr
    out = _run([gymhub, "hub", "serve", "--port", "0"], cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "pip install 'gymhub[hub]'" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_server_extra_serves_healthz(venvs, tmp_path):
    python = venvs["server"].result()
    _import_every_module(python, "gymhub.server", tmp_path)
    proc, line = _start([python.parent / "gymhub", "serve", "echo-v0", "--port", "0"],
                        " at http://", cwd=tmp_path, env=_clean_env())
    try:
        url = line.split(" at ")[1].split()[0]
        with urllib.request.urlopen(f"{url}/healthz", timeout=30) as resp:
            assert resp.status == 200
            assert json.loads(resp.read())
    finally:
        _stop(proc)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_client_extra_plays_on_a_server(venvs, tmp_path):
    python = venvs["client"].result()
    _import_every_module(python, "gymhub.client", tmp_path)
    proc, line = _start([sys.executable, "-m", "gymhub.server.cli", "echo-v0", "--port", "0"],
                        " at http://", cwd=ROOT, env=_clean_env(PYTHONPATH=str(ROOT)))
    try:
        url = line.split(" at ")[1].split()[0]
        out = _run([python, "-c", (
            "import importlib.util, gymhub\n"
            "from gymhub.envs import run_episode\n"
            "assert importlib.util.find_spec('fastapi') is None, 'the client has the server'\n"
            f"env = gymhub.make({url + '/echo-v0'!r})\n"
            "print(type(env).__name__, run_episode(env, seed=3).value)\n"
            "env.close()\n")], cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.split() == ["RemoteEnv", "1.0"]
    finally:
        _stop(proc)


def _check_sandbox_problem() -> str | None:
    """Why the hub cannot run its sandboxed check here (``None`` when it can)."""
    from gymhub.errors import BackendError
    from gymhub.hub.checker import check_sandbox

    try:
        check_sandbox().close()
    except BackendError as exc:
        return str(exc)
    return None


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_hub_extra_serves_pushes_checks_and_installs(venvs, tmp_path):
    python = venvs["hub"].result()
    _import_every_module(python, "gymhub.hub", tmp_path)
    gymhub = python.parent / "gymhub"
    db = f"sqlite:///{tmp_path / 'hub.db'}"
    proc, line = _start([gymhub, "hub", "serve", "--port", "0", "--db", db, "--storage",
                         tmp_path / "files"], "hub serving at http://", cwd=tmp_path,
                        env=_clean_env())
    try:
        hub = line.split()[-1]
        token = _run([gymhub, "hub", "token", "create", "--owner", "alice", "--db", db],
                     cwd=tmp_path)
        assert token.returncode == 0, token.stderr
        work = tmp_path / "work"
        work.mkdir()
        env = _clean_env(GYMHUB_HUB_URL=hub, GYMHUB_HUB_TOKEN=token.stdout.split()[-1])
        out = _run([gymhub, "env", "init", "word-ladder", "--owner", "alice"], cwd=work, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        push = _run([gymhub, "push", "word-ladder"], cwd=work, env=env)
        assert push.returncode == 0, push.stdout + push.stderr
        sha = push.stdout.split()[-1]

        deadline, status, details = time.monotonic() + 240, "pending", {}
        while status in ("pending", "queued") and time.monotonic() < deadline:
            info = _run([gymhub, "info", "alice/word-ladder", "--json"], cwd=work, env=env)
            assert info.returncode == 0, info.stderr
            details = json.loads(info.stdout)["versions"][0].get("check") or {}
            status = str(details.get("status", "pending"))
            time.sleep(0.5)
        # The check runs `gymhub serve` on this venv's site-packages: "passed" shows the
        # hub extra carries the server's dependencies.
        problem = _check_sandbox_problem()
        assert status == ("passed" if problem is None else "unchecked"), (status, details)

        search = _run([gymhub, "search", "word"], cwd=work, env=env)
        assert search.returncode == 0 and "alice/word-ladder" in search.stdout, search.stderr
        trust = [] if status == "passed" else ["--trust"]
        inst = _run([gymhub, "install", "alice/word-ladder", *trust], cwd=work, env=env)
        assert inst.returncode == 0, inst.stdout + inst.stderr
        assert f"sha256 {sha}" in inst.stderr
        lock = json.loads((work / "gymhub.lock").read_text())
        assert [e["sha256"] for e in lock["packages"].values()] == [sha]

        play = _run([python, "-c", (
            "import gymhub, importlib.metadata as md\n"
            "from gymhub.envs import run_episode\n"
            "print(md.distribution('gymhub-env-5-alice-word-ladder').locate_file(''))\n"
            "print(run_episode(gymhub.make('alice/word-ladder-v0'), seed=0).value)\n")],
            cwd=work, env=env)
        assert play.returncode == 0, play.stdout + play.stderr
        where, value = play.stdout.split()
        assert Path(where).resolve().is_relative_to(python.parent.parent.resolve())
        assert value == "1.0"
    finally:
        _stop(proc)

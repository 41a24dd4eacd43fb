"""Every Python and shell block of the README runs, so the README cannot drift from the code.

The docs site's pages run the same way, but only the blocks a line ``<!-- runnable -->``
marks (a page also shows commands that need a model, a GPU or minutes). Blocks run in
order, one scratch directory per page, as a reader would type them. A Python
block whose first line is ``# NAME.py`` is saved under that name (later blocks import
it) and then run. Each shell line runs on its own and must exit 0, except for three
kinds that cannot run as written inside a test, each checked as closely as a test can:

* ``make TARGET`` runs ``make -n TARGET`` in the repository: the target and its
  prerequisites resolve (``make test`` is this suite; ``make demo`` takes 16 minutes).
* ``gymhub serve ...`` is started, must answer ``/healthz``, and must shut down cleanly
  when interrupted.
* ``gymhub play ...`` reads moves from standard input: it gets one wrong ``submit``.

A shell block whose first line is ``# one shell session`` is a script, not a list of
commands: it runs whole, with ``set -euo pipefail``, and any job it leaves in the
background is killed when it ends.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(bash|python)[^\n]*\n(.*?)^```", re.M | re.S)
PLAY_INPUT = "submit SELECT 1\n"


@dataclass(frozen=True)
class Snippet:
    """One runnable unit: a whole Python block, or one line of a shell block."""

    kind: str
    text: str
    where: str


RUNNABLE = "<!-- runnable -->\n"

#: The README (every block runs) and the docs site's pages (marked blocks run).
DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")))


def snippets() -> list[Snippet]:
    out: list[Snippet] = []
    for doc in DOCS:
        out += _snippets_of(doc)
    return out


def _snippets_of(doc: str) -> list[Snippet]:
    text = (ROOT / doc).read_text()
    prefix = "" if doc == "README.md" else f"{doc}:"
    out: list[Snippet] = []
    for n, match in enumerate(FENCE.finditer(text), start=1):
        if doc != "README.md" and not text[:match.start()].endswith(RUNNABLE):
            continue
        lang, body = match.groups()
        line_no = text.count("\n", 0, match.start()) + 2
        if lang == "python":
            out.append(Snippet("python", body, f"{prefix}block{n}-line{line_no}"))
            continue
        if body.startswith("# one shell session"):
            out.append(Snippet("script", body, f"{prefix}block{n}-line{line_no}"))
            continue
        for offset, line in enumerate(body.splitlines()):
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                out.append(Snippet("bash", command, f"{prefix}block{n}-line{line_no + offset}"))
    return out


SNIPPETS = snippets()


_SCRATCH: dict[str, Path] = {}


@pytest.fixture
def scratch(snippet: Snippet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory per page, shared by its blocks in order (a later block may use
    what an earlier one wrote)."""
    page = snippet.where.rpartition(":")[0] or "README.md"
    if page not in _SCRATCH:
        _SCRATCH[page] = tmp_path_factory.mktemp(page.replace("/", "_"))
    return _SCRATCH[page]


def _env(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(scratch)
    return env


def _run_python(snippet: Snippet, scratch: Path) -> None:
    first = snippet.text.splitlines()[0].strip()
    if re.fullmatch(r"# [\w]+\.py", first):
        (scratch / first[2:]).write_text(snippet.text)
    proc = subprocess.run([sys.executable, "-"], input=snippet.text, cwd=scratch,
                          env=_env(scratch), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def _run_serve(argv: list[str], scratch: Path) -> None:
    port = argv[argv.index("--port") + 1]
    proc = subprocess.Popen(argv, cwd=scratch, env=_env(scratch), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "gymhub serve never answered /healthz"
                time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        # uvicorn drains, then re-raises the signal it caught, as a shell expects.
        assert proc.wait(timeout=60) in (0, -signal.SIGINT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def _run_script(snippet: Snippet, scratch: Path) -> None:
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + snippet.text
    proc = subprocess.run(["bash", "-c", script], cwd=scratch, env=_env(scratch),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _run_bash(snippet: Snippet, scratch: Path) -> None:
    argv = shlex.split(snippet.text)
    if argv[0] == "make":
        proc = subprocess.run(["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return
    if argv[:2] == ["gymhub", "serve"]:
        _run_serve(argv, scratch)
        return
    stdin = PLAY_INPUT if argv[:2] == ["gymhub", "play"] else ""
    proc = subprocess.run(["bash", "-c", snippet.text], cwd=scratch, env=_env(scratch),
                          input=stdin, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{snippet.text}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def test_the_readme_has_both_commands() -> None:
    commands = {s.text for s in SNIPPETS if s.kind == "bash"}
    assert {"make demo", "make test"} <= commands


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.where for s in SNIPPETS])
def test_readme_snippet_runs(snippet: Snippet, scratch: Path) -> None:
    if snippet.kind == "python":
        _run_python(snippet, scratch)
    elif snippet.kind == "script":
        _run_script(snippet, scratch)
    else:
        _run_bash(snippet, scratch)

"""Latency of environment pages: a long version history, and hostile READMEs.

Why this exists, part one (``history``): ``/{owner}/{name}`` renders every version
(digest, upload time, yank, check status) through Jinja2, and a package with a long
history must not make its page slow. The baseline is ``/api/v1/packages/{owner}/{name}``,
which reads the same rows (versions and their latest checks) and serialises JSON, in the
same app and run, so the ratio is what HTML rendering adds over the API. The store has
``--versions`` real small wheels of one package published through
:meth:`HubStore.publish` (the approach of ``bench_hub_index.py``), every tenth checked.

Part two (``readmes``): a README is whatever a publisher wrote. The hub used to render it
with a hand-written, quadratic Markdown renderer on the page request (120,000 characters
of ``**a `` took 33 s); it now renders it with a CommonMark parser and sanitises it once,
at publish, and a page reads the stored HTML. With ``--packages`` packages published
(``--hostile`` of them carrying a 200,000-character hostile README: ``**a `` runs, open
brackets, raw HTML, ``javascript:`` links, 20,000 nested ``>``), it reports the page's
p50/p99 over every package and over the hostile ones. The baseline is the old renderer
itself, loaded from the last commit that had it (``git show``), timed on the same hostile
text cut to a few sizes it can finish: that is what one uncached page request cost.

    python benchmarks/bench_hub_pages.py                      # both parts, ~1.5 min
    python benchmarks/bench_hub_pages.py --scenario readmes --packages 1000 --hostile 10
    python benchmarks/bench_hub_pages.py --scenario history --versions 1000 --repeats 20
    python benchmarks/bench_hub_pages.py --postgres postgresql://root@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hub_index import NAME, OWNER, database, timed

from gymhub.hub.archive import validate_wheel
from gymhub.hub.index import index_router
from gymhub.hub.markdown import render_markdown
from gymhub.hub.names import distribution_name
from gymhub.hub.pages import pages_router
from gymhub.hub.service import create_hub_app
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import create_token

#: The last commit whose hub/markdown.py is the hand-written renderer (the baseline).
OLD_RENDERER_COMMIT = "256fb4628d5f669e9ba30b5a42a557e701b2536a"
REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", choices=["history", "readmes", "both"], default="both")
    ap.add_argument("--versions", type=int, default=1000, help="history: versions of one package")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--packages", type=int, default=1000, help="readmes: packages published")
    ap.add_argument("--hostile", type=int, default=10,
                    help="readmes: how many of them carry a 200,000-character hostile README")
    ap.add_argument("--requests", type=int, default=2000, help="readmes: page requests timed")
    ap.add_argument("--postgres", default="", metavar="URL",
                    help="run on PostgreSQL (a fresh schema there) instead of SQLite")
    args = ap.parse_args()
    if args.scenario in ("history", "both"):
        tmp = Path(tempfile.mkdtemp(prefix="bench_hub_pages_"))
        with database(args.postgres, tmp) as url:
            _run(args, HubStore.open(url, tmp / "blobs"))
    if args.scenario in ("readmes", "both"):
        tmp = Path(tempfile.mkdtemp(prefix="bench_hub_readmes_"))
        with database(args.postgres, tmp) as url:
            _readmes(args, HubStore.open(url, tmp / "blobs"))


def hostile_readme(size: int) -> str:
    """The README an attacker publishes (the same mix as tests/hub/test_markdown.py)."""
    parts = [
        "# Title\n\n", "**a " * 10_000, "\n\n", "[" * 20_000, "\n\n", "[x](" * 5_000,
        "\n\n",
        "<script>alert(1)</script> <img src=x onerror=alert(1)> <a href=x onclick=y>z</a>\n\n"
        * 50,
        "[click](javascript:alert(1)) [ok](https://example.org/ok) ![i](javascript:1)\n\n" * 100,
        ">" * 20_000, " deep\n\n", "".join(">" * i + " quote\n" for i in range(1, 300)),
        "*a _b " * 5_000, "\n\n",
    ]
    text = "".join(parts)
    return (text * (size // len(text) + 1))[:size]


def package_wheel(name: str, readme: str, version: str = "1.0.0") -> tuple[str, bytes]:
    """A minimal valid hub wheel of ``alice/<name>`` whose METADATA holds ``readme``."""
    dist = distribution_name(OWNER, name)
    mod, di = dist.replace("-", "_"), f"{dist.replace('-', '_')}-{version}.dist-info"
    members = {
        f"{mod}/__init__.py": b"",
        f"{mod}/env.py": b"class Env:\n    pass\n",
        f"{di}/METADATA": (f"Metadata-Version: 2.4\nName: {dist}\nVersion: {version}\n"
                           f"Summary: the {name} environment\n\n{readme}").encode(),
        f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\n"
                       b"Tag: py3-none-any\n",
        f"{di}/entry_points.txt": f"[gymhub.envs]\n{OWNER}/{name}-v0 = {mod}.env:Env\n".encode(),
    }

    def digest(b: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()

    rows = [f"{n},sha256={digest(b)},{len(b)}\n" for n, b in members.items()]
    members[f"{di}/RECORD"] = ("".join(rows) + f"{di}/RECORD,,\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, body in members.items():
            zf.writestr(member, body)
    return f"{dist.replace('-', '_')}-{version}-py3-none-any.whl", buf.getvalue()


def old_renderer() -> Callable[[str], object] | None:
    """``render_markdown`` of the hand-written renderer, from git history (``None``: no git)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{OLD_RENDERER_COMMIT}:hub/markdown.py"], cwd=REPO, check=True,
            capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    module = types.ModuleType("old_markdown")
    exec(compile(source, "old_markdown.py", "exec"), module.__dict__)
    fn: Callable[[str], object] = module.render_markdown
    return fn


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _readmes(args: argparse.Namespace, store: HubStore) -> None:
    print(f"\n== hostile READMEs: {args.packages} packages, {args.hostile} hostile "
          f"(database: {store.db.engine.dialect.name})")
    create_token(store.db, OWNER)
    hostile = hostile_readme(200_000)
    names = [f"env-{hashlib.sha256(str(i).encode()).hexdigest()[:12]}"
             for i in range(args.packages)]  # far apart: near names are refused as look-alikes
    bad = set(names[:: max(1, args.packages // max(args.hostile, 1))][:args.hostile])
    t, render_s = time.perf_counter(), []
    for name in names:
        filename, data = package_wheel(name, hostile if name in bad else "# Env\n\nPlay.\n")
        info = validate_wheel(data, owner=OWNER, filename=filename)
        t0 = time.perf_counter()
        store.publish(OWNER, info.describe(), data, readme=info.readme)
        if name in bad:
            render_s.append(time.perf_counter() - t0)
    print(f"published {args.packages} packages in {time.perf_counter() - t:.1f} s; each "
          f"hostile publish (render + sanitise + store, once) took "
          f"{statistics.median(render_s or [0]):.2f} s median")

    app = create_hub_app(store, extra_routers=[index_router(store), pages_router(store)])
    client = TestClient(app)
    client.get(f"/{OWNER}/{names[0]}")  # compile the templates
    rng = random.Random(0)
    urls = [f"/{OWNER}/{rng.choice(names)}" for _ in range(args.requests)]
    all_s = []
    for url in urls:
        t0 = time.perf_counter()
        assert client.get(url).status_code == 200
        all_s.append(time.perf_counter() - t0)
    bad_s = timed(client, f"/{OWNER}/{sorted(bad)[0]}", {}, max(args.repeats, 200)) if bad else []
    print(f"{'pages':28} {'p50':>9} {'p99':>9}")
    print(f"{'every package (random)':28} {_pct(all_s, .5) * 1e3:7.1f}ms "
          f"{_pct(all_s, .99) * 1e3:7.1f}ms")
    if bad_s:
        print(f"{'a hostile README (200k)':28} {_pct(bad_s, .5) * 1e3:7.1f}ms "
              f"{_pct(bad_s, .99) * 1e3:7.1f}ms")

    old = old_renderer()
    if old is None:
        print("baseline skipped: git or the old renderer's commit is unavailable")
        return
    print("\nrendering the hostile README (old: on every uncached page request; new: once, "
          "at publish)")
    print(f"{'chars':>8} {'old renderer':>14} {'new renderer':>14}")
    old_at: dict[int, float] = {}
    for size in (5_000, 10_000, 20_000):
        text = hostile[:size]
        t0 = time.perf_counter()
        old(text)
        old_at[size] = time.perf_counter() - t0
        t0 = time.perf_counter()
        render_markdown(text)
        print(f"{size:8,} {old_at[size]:12.2f} s {time.perf_counter() - t0:12.3f} s")
    grow = old_at[20_000] / old_at[10_000]
    page_p99 = _pct(bad_s or all_s, .99)
    print(f"old renderer, 2x the text: {grow:.1f}x the time (quadratic: 4x); the old page "
          f"for a 20,000-character hostile README took {old_at[20_000]:.2f} s")
    print(f"ratio: old page (20k-char README, uncached) / new page p99 (200k-char README) = "
          f"{old_at[20_000] / page_p99:,.0f}x (at 200k chars the old one would take "
          f"~{old_at[20_000] * 100:,.0f} s by its quadratic growth: not run)")


def _run(args: argparse.Namespace, store: HubStore) -> None:
    print(f"== history: {args.versions} versions of one package "
          f"(database: {store.db.engine.dialect.name})")
    create_token(store.db, OWNER)
    t = time.perf_counter()
    for i in range(args.versions):
        version = f"1.{i // 100}.{i % 100}"
        filename, data = package_wheel(NAME, "# Wordle\n", version)
        store.publish(OWNER, validate_wheel(data, owner=OWNER, filename=filename).describe(),
                      data)
        if i % 10 == 0:
            store.record_check(OWNER, NAME, version, "passed", {
                "summary": "ok", "checks": [{"name": "import", "ok": True, "ms": 1,
                                             "detail": ""}], "envs": {}})
    print(f"published {args.versions} versions in {time.perf_counter() - t:.1f} s")

    app = create_hub_app(store, extra_routers=[index_router(store), pages_router(store)])
    client = TestClient(app)
    urls = {"page": f"/{OWNER}/{NAME}", "api": f"/api/v1/packages/{OWNER}/{NAME}"}
    t = time.perf_counter()
    sizes = {k: len(client.get(u).content) for k, u in urls.items()}
    print(f"cold page + api (first requests): {(time.perf_counter() - t) * 1e3:.1f} ms")
    results = {k: timed(client, u, {}, args.repeats) for k, u in urls.items()}
    print(f"{'route':5} {'bytes':>9} {'p50':>9} {'p90':>9}")
    for k, xs in results.items():
        print(f"{k:5} {sizes[k]:9d} {statistics.median(xs) * 1e3:7.1f}ms "
              f"{statistics.quantiles(xs, n=10)[-1] * 1e3:7.1f}ms")
    ratio = statistics.median(results["page"]) / statistics.median(results["api"])
    print(f"page/api p50 ratio: {ratio:.2f}x")


if __name__ == "__main__":
    main()

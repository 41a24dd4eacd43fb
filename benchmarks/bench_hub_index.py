"""Latency of a project page of the hub's package index, against a static file.

Why this exists: every ``pip install`` / ``uv pip install`` of a hub environment first
fetches ``/simple/<project>/``, which the index renders per request from the database
(every version, its yank state, its core-metadata hash from an in-memory cache). The
baseline is the same bytes served as a static file (``FileResponse``) by the same app
through the same client, so the ratio is what rendering costs over merely sending.

The store is SQLite, or PostgreSQL with ``--postgres URL`` (a private schema, dropped at
the end), with ``--versions`` versions of one package, each a small real
wheel that passed :func:`validate_wheel` and went through :meth:`HubStore.publish`. The
first (cold) request also reads every wheel once for its METADATA; it is reported apart.

    python benchmarks/bench_hub_index.py --versions 1000 --repeats 50
    python benchmarks/bench_hub_index.py --postgres postgresql://root@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import io
import statistics
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.testclient import TestClient

from gymhub.hub.archive import validate_wheel
from gymhub.hub.index import SIMPLE_JSON, index_router
from gymhub.hub.names import distribution_name
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import create_token

OWNER, NAME = "alice", "wordle"


def synthetic_wheel(version: str) -> tuple[str, bytes]:
    """A minimal valid hub wheel of alice/wordle ``version`` (as tests/hub/conftest.py)."""
    dist = distribution_name(OWNER, NAME)
    mod, di = f"{OWNER}_{NAME}", f"{dist.replace('-', '_')}-{version}.dist-info"
    members = {
        f"{mod}/__init__.py": b"",
        f"{mod}/env.py": b"class WordleEnv:\n    pass\n",
        f"{di}/METADATA": (f"Metadata-Version: 2.4\nName: {dist}\nVersion: {version}\n"
                           "Summary: A word game\nRequires-Python: >=3.11\n\n# Wordle\n").encode(),
        f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\n"
                       b"Tag: py3-none-any\n",
        f"{di}/entry_points.txt": f"[gymhub.envs]\n{OWNER}/{NAME}-v0 = {mod}.env:WordleEnv\n"
                                  .encode(),
    }
    def digest(b: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()

    rows = [f"{n},sha256={digest(b)},{len(b)}\n" for n, b in members.items()]
    members[f"{di}/RECORD"] = ("".join(rows) + f"{di}/RECORD,,\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    return f"{dist.replace('-', '_')}-{version}-py3-none-any.whl", buf.getvalue()


def timed(client: TestClient, url: str, headers: dict[str, str], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        r = client.get(url, headers=headers)
        out.append(time.perf_counter() - t)
        assert r.status_code == 200, r.status_code
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--postgres", default="", metavar="URL",
                    help="run on PostgreSQL (a fresh schema there) instead of SQLite")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_hub_index_"))
    with database(args.postgres, tmp) as url:
        _run(args, tmp, HubStore.open(url, tmp / "blobs"))


@contextlib.contextmanager
def database(postgres: str, tmp: Path) -> Iterator[str]:
    """A SQLite file in ``tmp``, or a private schema on ``postgres`` dropped afterwards."""
    if not postgres:
        yield f"sqlite:///{tmp / 'hub.db'}"
        return
    import psycopg

    schema = f"gymhub_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            base = postgres.replace("postgresql://", "postgresql+psycopg://", 1)
            yield f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _run(args: argparse.Namespace, tmp: Path, store: HubStore) -> None:
    print(f"database: {store.db.engine.dialect.name}")
    create_token(store.db, OWNER)
    t = time.perf_counter()
    for i in range(args.versions):
        filename, data = synthetic_wheel(f"1.{i // 100}.{i % 100}")
        store.publish(OWNER, validate_wheel(data, owner=OWNER, filename=filename).describe(),
                      data)
    print(f"published {args.versions} versions in {time.perf_counter() - t:.1f} s")

    app = FastAPI()
    app.include_router(index_router(store))
    project = f"/simple/{distribution_name(OWNER, NAME)}/"
    client = TestClient(app)
    t = time.perf_counter()
    cold = client.get(project, headers={"Accept": SIMPLE_JSON})
    print(f"cold JSON page (reads {args.versions} wheels' METADATA once): "
          f"{(time.perf_counter() - t) * 1e3:.1f} ms")
    pages = {"json": (cold.content, {"Accept": SIMPLE_JSON}),
             "html": (client.get(project).content, {})}
    for kind, (body, _) in pages.items():
        (tmp / f"page.{kind}").write_bytes(body)

    @app.get("/static/{kind}")
    def static(kind: str) -> FileResponse:
        return FileResponse(tmp / f"page.{kind}")

    print(f"{'page':5} {'bytes':>8} {'index p50':>10} {'p90':>8} {'static p50':>11} "
          f"{'p90':>8} {'ratio':>6}")
    for kind, (body, headers) in pages.items():
        dyn = timed(client, project, headers, args.repeats)
        sta = timed(client, f"/static/{kind}", {}, args.repeats)
        p50, s50 = statistics.median(dyn), statistics.median(sta)
        p90 = statistics.quantiles(dyn, n=10)[-1]
        s90 = statistics.quantiles(sta, n=10)[-1]
        print(f"{kind:5} {len(body):8d} {p50 * 1e3:8.2f}ms {p90 * 1e3:6.2f}ms "
              f"{s50 * 1e3:9.2f}ms {s90 * 1e3:6.2f}ms {p50 / s50:5.1f}x")


if __name__ == "__main__":
    main()

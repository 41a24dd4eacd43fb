"""Latency of an environment's web page against the JSON API for the same package.

Why this exists: ``/{owner}/{name}`` renders every version (digest, upload time, yank,
check status) through Jinja2, and a package with a long history must not make its page
slow. The baseline is ``/api/v1/packages/{owner}/{name}``, which reads the same rows
(versions and their latest checks) and serialises JSON, in the same app and run, so the
ratio is what HTML rendering adds over the API.

The store is SQLite with ``--versions`` real small wheels of one package published
through :meth:`HubStore.publish` (the approach of ``bench_hub_index.py``), every tenth
one checked; the first page request also reads the newest wheel's README (reported apart).

    python benchmarks/bench_hub_pages.py --versions 1000 --repeats 20
    python benchmarks/bench_hub_pages.py --postgres postgresql://root@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hub_index import NAME, OWNER, database, synthetic_wheel, timed

from gymhub.hub.archive import validate_wheel
from gymhub.hub.index import index_router
from gymhub.hub.pages import pages_router
from gymhub.hub.service import create_hub_app
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import create_token


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--postgres", default="", metavar="URL",
                    help="run on PostgreSQL (a fresh schema there) instead of SQLite")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_hub_pages_"))
    with database(args.postgres, tmp) as url:
        _run(args, HubStore.open(url, tmp / "blobs"))


def _run(args: argparse.Namespace, store: HubStore) -> None:
    print(f"database: {store.db.engine.dialect.name}")
    create_token(store.db, OWNER)
    t = time.perf_counter()
    for i in range(args.versions):
        version = f"1.{i // 100}.{i % 100}"
        filename, data = synthetic_wheel(version)
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
    print(f"cold page + api (reads the newest wheel's README once): "
          f"{(time.perf_counter() - t) * 1e3:.1f} ms")
    results = {k: timed(client, u, {}, args.repeats) for k, u in urls.items()}
    print(f"{'route':5} {'bytes':>9} {'p50':>9} {'p90':>9}")
    for k, xs in results.items():
        print(f"{k:5} {sizes[k]:9d} {statistics.median(xs) * 1e3:7.1f}ms "
              f"{statistics.quantiles(xs, n=10)[-1] * 1e3:7.1f}ms")
    ratio = statistics.median(results["page"]) / statistics.median(results["api"])
    print(f"page/api p50 ratio: {ratio:.2f}x")


if __name__ == "__main__":
    main()

"""Cost of validating an uploaded wheel, against the standard library's own integrity check.

Why this exists: the hub validates every upload in the request that carries it
(:func:`gymhub.hub.archive.validate_wheel`: its own parse of the zip cross-checked
against :mod:`zipfile`, every member inflated once with its size, CRC and sha256
counted, RECORD, METADATA and entry points parsed). The baseline is
``zipfile.ZipFile(...).testzip()`` on the same bytes, which also inflates every member
once and checks its CRC but checks nothing else. The ratio says what the security
checks cost on top of the unavoidable decompression.

The wheel is a realistic environment package: ``--members`` files (modules of varied
source text, a task file, a fixture), about ``--kib`` KiB once compressed.

    python benchmarks/bench_hub_archive.py --members 50 --kib 200 --repeats 200
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import random
import statistics
import time
import zipfile
from collections.abc import Callable

from gymhub.hub.archive import validate_wheel
from gymhub.hub.names import distribution_name

WORDS = [
    "def", "class", "return", "self", "env", "state", "reward", "observation", "action", "if",
    "else", "for", "in", "range", "import", "from", "tool", "call", "message", "verifier",
    "score", "task", "prompt", "gold", "None", "True", "False", "async", "await", "yield",
    "lambda", "with", "as", "try", "except", "raise", "dict", "list", "str", "int", "float",
]


def _source(rng: random.Random, size: int) -> bytes:
    out, n = [], 0
    while n < size:
        line = "    " * rng.randint(0, 3) + " ".join(rng.choices(WORDS, k=rng.randint(3, 12)))
        line += f"  # {rng.getrandbits(48):x}\n"
        out.append(line)
        n += len(line)
    return "".join(out).encode()


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def build_wheel(members: int, kib: int, seed: int = 0) -> tuple[str, bytes]:
    rng = random.Random(seed)
    dist = distribution_name("alice", "wordle")
    mod, di = "alice_wordle", f"{dist.replace('-', '_')}-1.0.0.dist-info"
    n_files = max(members - 4, 1)
    per_file = kib * 1024 * 3 // n_files  # source text compresses about 3:1
    files = {f"{mod}/__init__.py": b"", **{f"{mod}/m{i:02d}.py": _source(rng, per_file)
                                           for i in range(n_files - 1)}}
    files[f"{di}/METADATA"] = (f"Metadata-Version: 2.4\nName: {dist}\nVersion: 1.0.0\n"
                               "Summary: bench\n\n# Wordle\n").encode()
    files[f"{di}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{di}/entry_points.txt"] = f"[gymhub.envs]\nalice/wordle-v0 = {mod}.m00:Env\n".encode()
    rows = [f"{p},sha256={_b64(hashlib.sha256(b).digest())},{len(b)}" for p, b in files.items()]
    files[f"{di}/RECORD"] = ("\n".join([*rows, f"{di}/RECORD,,"]) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, body in files.items():
            zf.writestr(path, body)
    return f"{dist.replace('-', '_')}-1.0.0-py3-none-any.whl", buf.getvalue()


def _time(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--kib", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    filename, data = build_wheel(args.members, args.kib)
    unpacked = sum(i.file_size for i in zipfile.ZipFile(io.BytesIO(data)).infolist())
    print(f"wheel: {len(zipfile.ZipFile(io.BytesIO(data)).infolist())} members, "
          f"{len(data) / 1024:.0f} KiB compressed, {unpacked / 1024:.0f} KiB inflated")

    def baseline() -> object:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            return zf.testzip()

    def hub() -> object:
        return validate_wheel(data, owner="alice", filename=filename)

    assert baseline() is None and hub() is not None
    rows = []
    for _ in range(3):  # alternate, so drift in machine load hits both alike
        for label, fn in (("zipfile.testzip()", baseline), ("validate_wheel()", hub)):
            rows.append((label, statistics.median(_time(fn, args.repeats // 3 or 1))))
    med = {label: statistics.median(t for lab, t in rows if lab == label) for label, _ in rows}
    base = med["zipfile.testzip()"]
    print(f"{'check':<20} {'median ms':>10} {'MiB/s':>8} {'ratio':>7}")
    for label, t in med.items():
        print(f"{label:<20} {t * 1e3:>10.2f} {unpacked / t / 2**20:>8.0f} {t / base:>6.2f}x")


if __name__ == "__main__":
    main()

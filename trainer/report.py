"""The end-of-run report: ``report.json``, a reward-curve PNG, optional TensorBoard.

The PNG is drawn with matplotlib when it is installed; otherwise a small built-in
renderer draws the same curves (lines on a grid, no text) and encodes the PNG with
zlib, so the report never depends on an optional package. TensorBoard logging is
used only when ``torch.utils.tensorboard`` can be imported.
"""

from __future__ import annotations

import itertools
import json
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_curves", "tensorboard_writer", "write_png", "write_report"]

#: (metric, colour) pairs drawn on the reward plot.
_CURVES = (("reward_mean", (31, 119, 180)), ("eval_score", (214, 39, 40)))


def tensorboard_writer(log_dir: str | Path) -> Any:
    """A ``SummaryWriter`` when TensorBoard is installed, else ``None``."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(log_dir))


def write_report(out_dir: str | Path, history: Sequence[dict[str, float]]) -> dict[str, Any]:
    """Write ``report.json`` and ``reward_curve.png`` for a run's metrics history."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    steps = [float(m.get("step", i + 1)) for i, m in enumerate(history)]
    series = {
        name: [(s, float(m[name])) for s, m in zip(steps, history, strict=True) if name in m]
        for name, _ in _CURVES
    }
    png = plot_curves(out / "reward_curve.png", series)
    rewards = [v for _, v in series["reward_mean"]]
    k = max(1, len(rewards) // 4)
    report = {
        "steps": len(history),
        "reward_first_quarter": sum(rewards[:k]) / k if rewards else None,
        "reward_last_quarter": sum(rewards[-k:]) / k if rewards else None,
        "eval_scores": series["eval_score"],
        "plot": str(png),
        "seconds": sum(m.get("time_step", 0.0) for m in history),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


def plot_curves(path: str | Path, series: dict[str, list[tuple[float, float]]]) -> Path:
    """Plot each named series of ``(step, value)`` points to a PNG at ``path``."""
    p = Path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _plot_builtin(p, series)
        return p
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    colours = dict(_CURVES)
    for name, points in series.items():
        if points:
            r, g, b = colours.get(name, (0, 0, 0))
            ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=name,
                    color=(r / 255, g / 255, b / 255))
    ax.set_xlabel("step")
    ax.set_ylabel("score")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title("GRPO: training reward and held-out score")
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p


def _plot_builtin(path: Path, series: dict[str, list[tuple[float, float]]]) -> None:
    """Lines on a grid (y from 0 to 1), without matplotlib."""
    w, h, pad = 640, 400, 30
    img = [[(255, 255, 255)] * w for _ in range(h)]
    for i in range(11):  # horizontal grid every 0.1
        y = pad + round((h - 2 * pad) * i / 10)
        for x in range(pad, w - pad):
            img[y][x] = (225, 225, 225) if i % 5 else (170, 170, 170)
    xs = [s for pts in series.values() for s, _ in pts]
    lo, hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    span = (hi - lo) or 1.0

    def at(step: float, value: float) -> tuple[int, int]:
        x = pad + round((w - 2 * pad) * (step - lo) / span)
        y = h - pad - round((h - 2 * pad) * min(max(value, 0.0), 1.0))
        return x, y

    colours = dict(_CURVES)
    for name, points in series.items():
        colour = colours.get(name, (0, 0, 0))
        pix = [at(s, v) for s, v in points]
        for (x0, y0), (x1, y1) in itertools.pairwise(pix):
            n = max(abs(x1 - x0), abs(y1 - y0), 1)
            for t in range(n + 1):
                x, y = x0 + (x1 - x0) * t // n, y0 + (y1 - y0) * t // n
                for dy in (-1, 0, 1):
                    img[y + dy][x] = colour
        for x, y in pix:  # markers
            for dx in range(-2, 3):
                for dy in range(-2, 3):
                    img[y + dy][x + dx] = colour
    write_png(path, img)


def write_png(path: str | Path, rows: Sequence[Sequence[tuple[int, int, int]]]) -> None:
    """Encode RGB rows as a PNG (8-bit truecolour, no filter, zlib-compressed)."""
    h, w = len(rows), len(rows[0])
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    Path(path).write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )

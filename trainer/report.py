"""The end-of-run report: ``report.json``, a chart of the run, optional TensorBoard.

The chart is for a person deciding whether a run worked, so it carries what that
takes and no more: the training reward of every step with its values, the held-out
scores (before training, after a warm-up, after GRPO) as bars with their standard
errors, because a held-out mean over a few dozen tasks moves by several points from
noise alone, and a title naming the model, environment and seed, because a PNG gets
copied away from the run directory that would otherwise say so.

matplotlib (the ``train`` extra) draws it through the Agg canvas directly, without
pyplot: no global backend switch in the caller's process, no figure registry to leak
from a long training job. It is imported only when a chart is drawn, so importing the
trainer stays cheap; without it the report is still written, with the reason the chart
is missing. TensorBoard logging is used only when ``torch.utils.tensorboard`` imports.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["HeldOut", "plot_run", "run_title", "tensorboard_writer", "write_report"]

_REWARD_COLOUR = "#1f77b4"
_EVAL_COLOUR = "#d62728"
_STAGE_COLOURS = ("#9e9e9e", "#ff9f40", "#2ca02c", "#1f77b4")
#: Above this many steps the per-point value labels would overlap; the axis carries it.
_MAX_LABELLED_POINTS = 30


@dataclass(frozen=True)
class HeldOut:
    """A held-out score at one stage of a run.

    Attributes:
        label: the stage, e.g. ``"before training"``.
        mean: mean score over the scored tasks.
        stderr: standard error of that mean (drawn as the error bar).
        tasks: tasks scored (shown under the bar; ``0`` hides it).
        colour: the bar's colour; by position when ``None``.
    """

    label: str
    mean: float
    stderr: float
    tasks: int = 0
    colour: str | None = None


def tensorboard_writer(log_dir: str | Path) -> Any:
    """A ``SummaryWriter`` when TensorBoard is installed, else ``None``."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(log_dir))


def run_title(config: Mapping[str, Any] | None) -> str:
    """``"GRPO on ENV · model NAME · seed S"`` from a run's config (``GRPOConfig.to_dict()``).

    The model is named by its directory's last component: the full path is long and
    names the machine, not the model.
    """
    if not config:
        return "GRPO run"
    envs = ", ".join(config.get("env_ids") or []) or "?"
    model = Path(str(config.get("model") or "?")).name or str(config.get("model"))
    return f"GRPO on {envs} · model {model} · seed {config.get('seed', '?')}"


def write_report(
    out_dir: str | Path,
    history: Sequence[Mapping[str, float]],
    *,
    config: Mapping[str, Any] | None = None,
    heldout: Sequence[HeldOut] = (),
) -> dict[str, Any]:
    """Write ``report.json`` and ``reward_curve.png`` for a run.

    Args:
        out_dir: the run's output directory.
        history: every step's metrics (``step``, ``reward_mean``, maybe ``eval_score``).
        config: the run's config as a dict, for the chart's title; when ``None``, read
            from the newest checkpoint under ``out_dir`` (the trainer writes one at the
            end of a run), so a plain ``gymhub train`` gets a titled chart too.
        heldout: held-out scores to draw beside the reward curve (the demo's).

    Returns:
        The report (also written as ``report.json``); ``plot`` is ``None`` and
        ``plot_error`` says why when the chart could not be drawn.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    steps = [float(m.get("step", i + 1)) for i, m in enumerate(history)]
    rewards = [(s, float(m["reward_mean"])) for s, m in zip(steps, history, strict=True)
               if "reward_mean" in m]
    evals = [(s, float(m["eval_score"])) for s, m in zip(steps, history, strict=True)
             if "eval_score" in m]
    values = [v for _, v in rewards]
    k = max(1, len(values) // 4)
    report: dict[str, Any] = {
        "steps": len(history),
        "reward_first_quarter": sum(values[:k]) / k if values else None,
        "reward_last_quarter": sum(values[-k:]) / k if values else None,
        "eval_scores": evals,
        "heldout": [vars(h) for h in heldout],
        "plot": None,
        "seconds": sum(m.get("time_step", 0.0) for m in history),
    }
    title = run_title(config if config is not None else _checkpoint_config(out))
    sizes = {int(m["episodes"]) for m in history if "episodes" in m}
    try:
        report["plot"] = str(plot_run(out / "reward_curve.png", rewards, evals=evals,
                                      heldout=heldout, title=title,
                                      episodes=sizes.pop() if len(sizes) == 1 else 0))
    except ImportError as exc:
        report["plot_error"] = f"no chart: {exc}"
    (out / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


def _checkpoint_config(out: Path) -> dict[str, Any] | None:
    """The config recorded in the newest ``checkpoints/step-N/state.json``, if any."""
    states = sorted(
        (p for p in out.glob("checkpoints/step-*/state.json")
         if p.parent.name.removeprefix("step-").isdigit()),
        key=lambda p: int(p.parent.name.removeprefix("step-")),
    )
    for state in reversed(states):
        try:
            config = json.loads(state.read_text(encoding="utf-8")).get("config")
        except (OSError, ValueError):
            continue
        if isinstance(config, dict):
            return config
    return None


def plot_run(
    path: str | Path,
    rewards: Sequence[tuple[float, float]],
    *,
    evals: Sequence[tuple[float, float]] = (),
    heldout: Sequence[HeldOut] = (),
    title: str = "GRPO run",
    episodes: int = 0,
) -> Path:
    """Draw the run's chart to a PNG at ``path``.

    Args:
        path: where the PNG goes.
        rewards: ``(step, mean training reward)`` points.
        evals: ``(step, held-out score)`` points measured during training.
        heldout: held-out scores by stage, drawn as bars with ±1 s.e. error bars.
        title: the figure's title (see :func:`run_title`).
        episodes: episodes behind each step's mean, when every step had as many.

    Raises:
        ImportError: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ImportError("matplotlib is not installed (pip install 'gymhub[train]')") from exc

    p = Path(path)
    # the bars' panel widens with their number, so labels and values keep apart
    bars_width = 2.0 + 0.55 * max(0, len(heldout) - 3)
    fig = Figure(figsize=(7.0 + 2.0 * bars_width, 4.6) if heldout else (7.0, 4.6), dpi=110,
                 layout="constrained")
    FigureCanvasAgg(fig)
    grid = (fig.add_gridspec(1, 2, width_ratios=(3, bars_width)) if heldout
            else fig.add_gridspec(1, 1))
    # One y range for both panels, so a bar and a curve at the same height mean the same.
    ys = [v for _, v in (*rewards, *evals)] + [h.mean + h.stderr for h in heldout]
    low, high = min([0.0, *ys]), max([1.0, *ys])
    ylim = (low - 0.04 * (high - low), high + 0.12 * (high - low))
    ax = fig.add_subplot(grid[0, 0])
    _draw_rewards(ax, rewards, evals, MaxNLocator, episodes)
    ax.set_ylim(*ylim)
    if heldout:
        right = fig.add_subplot(grid[0, 1])
        _draw_heldout(right, heldout)
        right.set_ylim(*ylim)
    fig.suptitle(title, fontsize=13, fontweight="bold")
    fig.savefig(p)
    return p


def _draw_rewards(ax: Any, rewards: Sequence[tuple[float, float]],
                  evals: Sequence[tuple[float, float]], locator: Any, episodes: int) -> None:
    """Training reward per step and held-out points, each value written when there are few.

    A long run's per-step means are noisy (a few dozen episodes each), so beyond
    :data:`_MAX_LABELLED_POINTS` steps they are drawn faintly under a moving mean, which
    is the line a reader actually follows.
    """
    each = f" ({episodes} episodes each)" if episodes else ""
    ax.set_title(f"Training reward per GRPO step{each}", fontsize=11)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward of the step's episodes")
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(locator(integer=True))
    points = [*rewards, *evals]
    if not points:
        ax.text(0.5, 0.5, "no training steps", ha="center", va="center",
                transform=ax.transAxes, color="grey")
        return
    xs = [s for s, _ in points]
    pad = max(0.5, 0.03 * (max(xs) - min(xs)))
    ax.set_xlim(min(xs) - pad, max(xs) + pad)
    if len(rewards) > _MAX_LABELLED_POINTS:
        sx, sy = zip(*rewards, strict=True)
        ax.plot(sx, sy, linewidth=0.8, color=_REWARD_COLOUR, alpha=0.35,
                label="training reward (mean per step)")
        window = max(2, len(rewards) // 10)
        smooth = [sum(sy[max(0, i - window + 1): i + 1]) / len(sy[max(0, i - window + 1): i + 1])
                  for i in range(len(sy))]
        ax.plot(sx, smooth, linewidth=2.2, color=_REWARD_COLOUR,
                label=f"training reward (moving mean of {window} steps)")
    for series, colour, label in ((rewards, _REWARD_COLOUR, "training reward (mean per step)"),
                                  (evals, _EVAL_COLOUR, "held-out score")):
        if not series or len(series) > _MAX_LABELLED_POINTS:
            continue
        sx, sy = zip(*series, strict=True)
        ax.plot(sx, sy, marker="o", markersize=5, linewidth=1.8, color=colour, label=label)
        for x, y in series:
            ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 7),
                        ha="center", fontsize=8, color=colour)
    ax.legend(loc="upper left", fontsize=9, frameon=False)


def _draw_heldout(ax: Any, heldout: Sequence[HeldOut]) -> None:
    """One bar per stage with its ±1 s.e. error bar and the value written above it."""
    ax.set_title("Held-out score (mean ± 1 s.e.)", fontsize=11)
    ax.set_ylabel("score on held-out tasks")
    ax.grid(axis="y", alpha=0.3)
    positions = range(len(heldout))
    colours = [h.colour or _STAGE_COLOURS[min(i, len(_STAGE_COLOURS) - 1)]
               for i, h in zip(positions, heldout, strict=True)]
    ax.bar(positions, [h.mean for h in heldout], yerr=[h.stderr for h in heldout],
           color=colours, width=0.6, capsize=6, error_kw={"elinewidth": 1.4})
    top = max([1.0, *(h.mean + h.stderr for h in heldout)])
    ax.set_ylim(0.0, top * 1.12)
    for i, h in zip(positions, heldout, strict=True):
        ax.annotate(f"{h.mean:.3f} ± {h.stderr:.3f}", (i, h.mean + h.stderr),
                    textcoords="offset points", xytext=(0, 5), ha="center", fontsize=9)
    ax.set_xticks(list(positions))
    ax.set_xticklabels(
        [textwrap.fill(h.label, 11, break_on_hyphens=False)
         + (f"\n({h.tasks} tasks)" if h.tasks else "") for h in heldout],
        fontsize=9,
    )

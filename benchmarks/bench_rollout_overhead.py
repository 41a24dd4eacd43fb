"""The rollout's work around the engine: rendering, encoding, parsing, environments.

On a small model that work is a visible share of a multi-turn run (``bench_trainer.py``
prints it per run as "outside the engine"), but there it is timed beside an engine whose
time varies far more than it. Here the engine's part is taken out: 8 echo-v0 episodes
(the tiny tokenizer, tool schemas rendered, as in ``bench_trainer.py``) are first run
once on the tiny Llama, and the completions it returned are then replayed by an engine
that answers at once, so each run does everything a rollout does except generate.

Compared, alternated run by run: the renderer as it is (texts rendered from the compiled
template where that was checked, first prompts encoded as a remembered head and a tail
where that was checked; ``trainer/chat.py``, ``trainer/template_text.py``) against the
same renderer with both short ways shut (every text through ``apply_chat_template``,
every prompt encoded whole), for 4-turn and 1-turn episodes.

Run: ``python benchmarks/bench_rollout_overhead.py [--pairs 40]`` (CPU, ~10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from typing import Any

from gymhub.trainer.backends import InProcessBackend
from gymhub.trainer.chat import ChatRenderer
from gymhub.trainer.engines.base import Completion, GenerationRequest, SamplingConfig
from gymhub.trainer.engines.hf import TransformersEngine
from gymhub.trainer.parsers import make_parser
from gymhub.trainer.rollout import Budgets, run_group_batch
from gymhub.trainer.tiny import build_model, build_tokenizer

EPISODES, TOKENS = 8, 64


class _Inline(Executor):
    """Runs a submitted call at once, on the loop's thread (there is nothing to wait for)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.set_result(fn(*args, **kwargs))
        return fut


class _Replay:
    """Answers each engine call with what a real engine answered to the same call."""

    policy_version = 0

    def __init__(self, calls: list[list[Completion]]) -> None:
        self.calls = calls
        self.next = 0

    def generate(self, requests: Sequence[GenerationRequest],
                 sampling: SamplingConfig) -> list[Completion]:
        out = self.calls[self.next % len(self.calls)]
        self.next += 1
        return out

    def release(self, session: str) -> None:
        """Nothing is kept per session."""


class _Recorder(TransformersEngine):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[list[Completion]] = []

    def generate(self, requests: Sequence[GenerationRequest],
                 sampling: SamplingConfig) -> list[Completion]:
        out = super().generate(requests, sampling)
        self.calls.append(out)
        return out


def _shut(renderer: ChatRenderer) -> ChatRenderer:
    """The same renderer with its short ways closed: the public way for every text."""
    renderer._split_encode = lambda text: None  # type: ignore[method-assign]
    renderer._template._direct = lambda *a, **k: None  # type: ignore[method-assign]
    return renderer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=40, help="alternated runs per side and length")
    args = p.parse_args(argv)
    tok = build_tokenizer()
    tasks = [("echo-v0", f"echo-{i:04d}") for i in range(EPISODES)]
    backend = InProcessBackend()
    loop = asyncio.new_event_loop()

    def run(engine: Any, renderer: ChatRenderer, turns: int) -> float:
        start = time.perf_counter()
        loop.run_until_complete(run_group_batch(
            backend=backend, engine=engine, renderer=renderer, parser=make_parser("hermes"),
            sampling=SamplingConfig(temperature=1.0),
            budgets=Budgets(turns, TOKENS // turns, TOKENS, 4096), tasks=tasks, group_size=1,
            seed=0, drift_check="off", executor=_Inline(), render_tools=True))
        return time.perf_counter() - start

    print(f"work around the engine: {EPISODES} echo-v0 episodes of {TOKENS} tokens, tiny "
          "tokenizer, tool schemas rendered; a real run's completions replayed by an engine "
          f"that answers at once (median of {args.pairs} alternated pairs)")
    for turns in (4, 1):
        recorder = _Recorder(build_model(len(tok)), tok, pad_token_id=tok.pad_token_id)
        run(recorder, ChatRenderer(tok), turns)
        replay = _Replay(recorder.calls)
        sides = {"as it is": ChatRenderer(tok), "short ways shut": _shut(ChatRenderer(tok))}
        secs: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(5):  # warm-up: the first render of each kind checks the short ways
            for r in sides.values():
                run(replay, r, turns)
        for _ in range(args.pairs):
            for name, r in sides.items():
                replay.next = 0
                secs[name].append(run(replay, r, turns))
        now, before = (statistics.median(secs[n]) for n in sides)
        ratio = statistics.median(a / b for a, b in zip(*secs.values(), strict=True))
        print(f"  {turns}-turn episodes ({TOKENS // turns} tokens a turn): renderer as it is "
              f"{now * 1000:6.2f} ms a run, short ways shut {before * 1000:6.2f} ms: {ratio:.2f}x")
    loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

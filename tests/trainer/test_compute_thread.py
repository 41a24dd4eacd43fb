"""The caller's-thread executor, and the trainer running its engine calls on its own thread."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pytest

from gymhub.client import LoopThread
from gymhub.trainer.compute_thread import CallerExecutor


def _on_loop(executor: CallerExecutor, *calls):
    """Run ``calls`` through ``executor`` from a coroutine on a loop thread; their results."""

    async def main():
        loop = asyncio.get_running_loop()
        out = []
        for fn, *args in calls:
            try:
                out.append(await loop.run_in_executor(executor, fn, *args))
            except Exception as exc:  # the test looks at what came back
                out.append(exc)
        return out

    with LoopThread() as lt:
        return lt.run(main(), wait=executor.run_until)


def test_calls_run_in_order_on_the_waiting_thread_with_their_results_and_errors():
    executor = CallerExecutor()
    me = threading.current_thread()
    seen = []

    def where(tag):
        seen.append((tag, threading.current_thread()))
        return tag * 2

    def boom():
        raise ValueError("bad batch")

    out = _on_loop(executor, (where, 1), (boom,), (where, 3))
    assert out[0] == 2 and out[2] == 6
    assert isinstance(out[1], ValueError) and str(out[1]) == "bad batch"
    assert seen == [(1, me), (3, me)]


def test_a_coroutine_that_needs_no_call_returns_and_one_that_fails_raises():
    executor = CallerExecutor()

    async def plain():
        return "done"

    async def failing():
        raise KeyError("lost")

    with LoopThread() as lt:
        assert lt.run(plain(), wait=executor.run_until) == "done"
        with pytest.raises(KeyError, match="lost"):
            lt.run(failing(), wait=executor.run_until)
        # stale wake-ups left in the queue by earlier waits do not confuse the next one
        assert _on_loop(executor, (len, "abc")) == [3]


def test_a_cancelled_call_is_skipped_and_shutdown_refuses_new_ones():
    executor = CallerExecutor()
    ran = []
    fut = executor.submit(ran.append, "x")
    assert fut.cancel()
    done: Future[None] = Future()
    later = executor.submit(lambda: done.set_result(None))
    executor.run_until(done)
    assert ran == [] and later.done() and done.done()
    queued = executor.submit(ran.append, "y")
    executor.shutdown()
    assert queued.cancelled() and ran == []
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(ran.append, "z")


def test_a_keyboard_interrupt_in_a_call_stops_the_waiting_thread():
    executor = CallerExecutor()

    def interrupt():
        raise KeyboardInterrupt

    fut = executor.submit(interrupt)
    never: Future[None] = Future()
    with pytest.raises(KeyboardInterrupt):
        executor.run_until(never)
    assert isinstance(fut.exception(), KeyboardInterrupt)


def test_the_trainer_generates_on_the_thread_that_updates(tmp_path, tokenizer):
    """Rollouts and evaluations call the engine on the trainer's thread, never on the
    loop's pool (two threads with OpenMP teams slow every parallel region, see
    gymhub.trainer.compute_thread)."""
    pytest.importorskip("peft")
    from gymhub.trainer.backends import InProcessBackend
    from gymhub.trainer.config import GRPOConfig
    from gymhub.trainer.engines import TransformersEngine
    from gymhub.trainer.loop import GRPOTrainer, apply_lora

    from .conftest import ParityEnv, build_model

    threads: list[threading.Thread] = []

    class Where(TransformersEngine):
        def generate(self, requests, sampling):
            threads.append(threading.current_thread())
            return super().generate(requests, sampling)

    model = apply_lora(build_model(len(tokenizer)), r=4, alpha=8, dropout=0.0,
                       target_modules=["q_proj", "v_proj"])
    engine = Where(model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    cfg = GRPOConfig(model="tiny", env_ids=["parity-v0"], group_size=2, tasks_per_step=2,
                     max_steps=1, max_turns=1, max_tokens_per_turn=4,
                     max_tokens_per_episode=4, output_dir=str(tmp_path), progress=False)
    backend = InProcessBackend(factory=lambda env_id, **_: ParityEnv())
    with GRPOTrainer(cfg, model=model, tokenizer=tokenizer, backend=backend,
                     engine=engine) as trainer:
        trainer.train_step()
        trainer.evaluate_tasks([("parity-v0", "t0"), ("parity-v0", "t1")])
    assert len(threads) >= 2
    assert set(threads) == {threading.current_thread()}

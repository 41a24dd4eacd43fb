"""Per-episode KV caches across turns: same ids and log-probabilities, freed at the end."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gymhub.trainer.backends import InProcessBackend  # noqa: E402
from gymhub.trainer.chat import ChatRenderer  # noqa: E402
from gymhub.trainer.config import GRPOConfig  # noqa: E402
from gymhub.trainer.engines import (  # noqa: E402
    GenerationRequest,
    SamplingConfig,
    SessionEngine,
    TransformersEngine,
)
from gymhub.trainer.engines.session_cache import (  # noqa: E402
    CachedPrefix,
    SessionCaches,
    common_prefix,
    plain_layers,
)
from gymhub.trainer.parsers import HermesParser  # noqa: E402
from gymhub.trainer.policy import make_engine  # noqa: E402
from gymhub.trainer.rollout import Budgets, run_group_batch  # noqa: E402
from gymhub.trainer.tiny import echo_lessons, teach  # noqa: E402

from .conftest import build_model  # noqa: E402


def _entry(ids, version=0):
    kv = torch.zeros((1, 1, len(ids), 2))
    return CachedPrefix(list(ids), [kv], [kv.clone()], version)


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix([1, 2, 3], [1, 9, 3]) == 1
    assert common_prefix([], [1]) == 0 and common_prefix([5], [6]) == 0


def test_store_reuses_a_prefix_up_to_the_last_prompt_token():
    store = SessionCaches()
    store.put("a", _entry([1, 2, 3, 4]))
    entry, n = store.take("a", [1, 2, 3, 4, 5, 6], version=0)
    assert entry is not None and n == 4 and len(store) == 0  # taken out while in use
    store.put("a", _entry([1, 2, 3, 4]))
    assert store.take("a", [1, 2, 3, 4], version=0)[1] == 3  # the last token is fed again
    store.put("a", _entry([1, 2, 3, 4]))
    assert store.take("a", [1, 2, 7, 8], version=0)[1] == 2  # diverged: common prefix only
    store.put("a", _entry([1, 2, 3, 4]))
    assert store.take("a", [9, 9], version=0) == (None, 0)  # nothing shared: dropped
    store.put("a", _entry([1, 2, 3], version=0))
    assert store.take("a", [1, 2, 3, 4], version=1) == (None, 0)  # stale weights
    assert store.hits == 3 and store.reused_tokens == 4 + 3 + 2


def test_store_release_clear_and_bound():
    store = SessionCaches(max_sessions=2)
    for s in "abc":
        store.put(s, _entry([1, 2]))
    assert len(store) == 2 and store.take("a", [1, 2, 3], 0) == (None, 0)  # "a" evicted first
    store.take("b", [1, 2, 3], 0)
    store.release("b")  # released while a call holds it: that call must not put it back
    store.put("b", _entry([1, 2, 3]))
    assert store.take("b", [1, 2, 3, 4], 0) == (None, 0)
    store.put("b", _entry([1, 2, 3]))  # a new turn of a live session is kept again
    assert len(store) == 2 and store.cached_tokens == 5
    store.take("c", [1, 2, 3], 0)
    store.clear()  # weights changed while "c" was in flight
    store.put("c", _entry([1, 2, 3]))
    assert len(store) == 0
    with pytest.raises(ValueError):
        SessionCaches(max_sessions=0)


def _obs(tokenizer, word):
    return tokenizer.encode(f"<|im_end|>\n<|im_start|>user\n{word}<|im_end|>\n"
                            "<|im_start|>assistant\n", add_special_tokens=False)


@pytest.mark.parametrize("room", [True, False], ids=["room reserved", "cache grown by copies"])
def test_cached_turns_equal_the_uncached_engine(tiny_model, tokenizer, room):
    """Sessions of different lengths, one leaving, one without a session, one diverging."""
    pad = tokenizer.pad_token_id
    on = TransformersEngine(tiny_model, tokenizer, pad_token_id=pad, reserve_room=room)
    off = TransformersEngine(tiny_model, tokenizer, pad_token_id=pad, cross_turn_cache=False,
                             reserve_room=False)
    assert isinstance(on, SessionEngine)
    starts = ["<|im_start|>user\napple<|im_end|>\n<|im_start|>assistant\n", "stone cloud", "z"]
    ctx = {e: [tokenizer.encode(t, add_special_tokens=False) for t in starts] for e in ("on", "off")}
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, stop_token_ids=(tokenizer.eos_token_id,))
    for turn in range(4):
        live = [0, 1, 2] if turn < 2 else [0, 2]  # session 1 ends after two turns
        outs = {}
        for name, engine in (("on", on), ("off", off)):
            reqs = [
                GenerationRequest(ctx[name][i], 4 + 3 * i, seed=100 * turn + i, session=f"s{i}")
                for i in live
            ]
            reqs.append(GenerationRequest(ctx[name][1][:5], 3, seed=turn))  # no session
            outs[name] = engine.generate(reqs, sampling)
            for i, out in zip(live, outs[name], strict=False):
                ctx[name][i] = ctx[name][i] + out.token_ids + _obs(tokenizer, f"look {turn}")
            if turn == 1:
                if engine is on:
                    on.release("s1")
                ctx[name][2] = ctx[name][2][:3] + ctx[name][2][5:]  # an edited history
        for a, b in zip(outs["on"], outs["off"], strict=True):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert on.caches.hits >= 5 and on.caches.reused_tokens > 100
    assert len(on.caches) == 2 and off.caches.hits == 0 and len(off.caches) == 0
    on.release("s0")
    on.release("s2")
    assert len(on.caches) == 0


def test_weight_update_and_sleep_drop_caches(tiny_model, tokenizer):
    engine = TransformersEngine(tiny_model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    prompt = tokenizer.encode("stone cloud apple", add_special_tokens=False)
    engine.generate([GenerationRequest(prompt, 3, seed=1, session="s")], SamplingConfig())
    assert len(engine.caches) == 1
    engine.update_weights(tiny_model)
    assert len(engine.caches) == 0
    engine.generate([GenerationRequest(prompt, 3, seed=1, session="s")], SamplingConfig())
    assert engine.caches.hits == 0  # the old entry was gone, not reused
    engine.sleep()
    assert len(engine.caches) == 0


def _rollout(engine, tokenizer, *, temperature=1.0, tasks=2, group=2, budgets=None, drift="warn"):
    return asyncio.run(
        run_group_batch(
            backend=InProcessBackend(),
            engine=engine,
            renderer=ChatRenderer(tokenizer),
            parser=HermesParser(),
            sampling=SamplingConfig(temperature=temperature,
                                    stop_token_ids=(tokenizer.eos_token_id,)),
            budgets=budgets or Budgets(max_turns=3, max_tokens_per_turn=10),
            tasks=[("echo-v0", f"echo-{i:04d}") for i in range(tasks)] + [("echo-v0", "nope")],
            group_size=group,
            seed=0,
            drift_check=drift,
        )
    )


def test_rollout_logprobs_equal_a_full_forward_and_caches_are_freed(tiny_model, tokenizer):
    pad = tokenizer.pad_token_id
    on = TransformersEngine(tiny_model, tokenizer, pad_token_id=pad)
    off = TransformersEngine(tiny_model, tokenizer, pad_token_id=pad, cross_turn_cache=False)
    cached, plain = _rollout(on, tokenizer), _rollout(off, tokenizer)
    assert on.caches.hits > 0  # later turns really continued from a cache
    assert len(on.caches) == 0  # ...and every episode, the errored ones too, freed its own
    assert sum(t.errored for t in cached) == 2
    for a, b in zip(cached, plain, strict=True):
        assert a.ids == b.ids and a.loss_mask == b.loss_mask
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    for t in cached:
        if t.errored:
            continue
        assert len(t.turn_versions) >= 2
        with torch.no_grad():
            logits = tiny_model(torch.tensor([t.ids])).logits[0, :-1].float()
        full = torch.log_softmax(logits, -1).gather(-1, torch.tensor(t.ids[1:])[:, None])[:, 0]
        sampled = [i for i, m in enumerate(t.loss_mask) if m]
        assert [t.logprobs[i] for i in sampled] == pytest.approx(
            [float(full[i - 1]) for i in sampled], abs=1e-4
        )


def test_drift_zero_with_the_cache_on(tokenizer):
    """A model that answers canonically: every episode matches a full render."""
    model = teach(build_model(len(tokenizer)), echo_lessons(tokenizer))
    engine = TransformersEngine(model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    budgets = Budgets(max_turns=4, max_tokens_per_turn=32, max_tokens_per_episode=128)
    trajs = _rollout(engine, tokenizer, temperature=0.0, budgets=budgets, drift="strict")
    played = [t for t in trajs if not t.errored]
    assert len(played) == 4 and all(t.drift is not None and t.drift.ok for t in played)
    assert all(len(t.turn_versions) == 4 for t in played) and engine.caches.hits >= 12
    assert len(engine.caches) == 0


def test_a_sliding_window_model_runs_without_the_cache(tokenizer):
    from transformers import MistralConfig, MistralForCausalLM

    model = MistralForCausalLM(MistralConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
    )).eval()
    with torch.no_grad():
        assert plain_layers(model(torch.tensor([[5, 6, 7]]), use_cache=True).cache) is None
    engine = TransformersEngine(model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    prompt = tokenizer.encode("stone cloud apple", add_special_tokens=False)
    out = engine.generate([GenerationRequest(prompt, 3, seed=1, session="s")], SamplingConfig())
    assert len(out[0].token_ids) == 3
    assert engine.cross_turn_cache is False and len(engine.caches) == 0


def test_config_switch_reaches_the_engine(tiny_model, tokenizer, tmp_path):
    for on in (True, False):
        cfg = GRPOConfig(model="tiny", output_dir=str(tmp_path), cross_turn_cache=on)
        engine = make_engine(cfg, tiny_model, tokenizer)
        assert isinstance(engine, TransformersEngine) and engine.cross_turn_cache is on


def test_a_layer_with_room_equals_a_growing_one_and_outgrows_its_room():
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    from gymhub.trainer.engines.kv_room import RoomyLayer, reserve_room

    gen = torch.Generator().manual_seed(0)
    start = [(torch.randn(2, 3, 5, 4, generator=gen), torch.randn(2, 3, 5, 4, generator=gen))]
    plain, roomy = DynamicCache(ddp_cache_data=start), DynamicCache(ddp_cache_data=start)
    assert reserve_room(roomy, 2) and type(roomy.layers[0]) is RoomyLayer
    buf = roomy.layers[0]._key_buf
    for width in (1, 1, 3, 1):  # two steps fill the room; the third grows it
        k, v = torch.randn(2, 3, width, 4, generator=gen), torch.randn(2, 3, width, 4, generator=gen)
        want, got = plain.update(k, v, 0), roomy.update(k, v, 0)
        assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
    assert roomy.layers[0]._key_buf is not buf  # grown once
    # inherited reshaping (a batch selection, a crop) leaves it equal to the plain cache
    for cache in (plain, roomy):
        cache.batch_select_indices(torch.tensor([1]))
        cache.crop(-2)
    k, v = torch.randn(1, 3, 1, 4, generator=gen), torch.randn(1, 3, 1, 4, generator=gen)
    want, got = plain.update(k, v, 0), roomy.update(k, v, 0)
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
    assert plain_layers(roomy) is not None and roomy.get_seq_length() == 10
    # only caches made entirely of plain layers get room
    assert not reserve_room(roomy, 4) and not reserve_room(DynamicCache(), 4)
    assert not reserve_room(DynamicCache(ddp_cache_data=start), 0)
    assert type(DynamicCache(ddp_cache_data=start).layers[0]) is DynamicLayer


def test_refeed_gives_every_row_a_new_part_as_long_as_the_longest():
    """No hole between a row's cached prefix and its suffix: short suffixes re-feed."""
    from gymhub.trainer.engines.hf import _refeed
    from gymhub.trainer.engines.session_cache import CachedPrefix

    entry = CachedPrefix(list(range(50)), [], [], 0)
    reqs = [GenerationRequest(list(range(n)), 1) for n in (40, 30, 12, 9)]
    taken = [(entry, 35), (entry, 28), (None, 0), (entry, 2)]
    _refeed(reqs, taken)
    # the longest new part is row 2's 12 tokens (nothing cached)
    assert [n for _, n in taken] == [28, 18, 0, 0]
    assert [len(r.prompt_ids) - n for r, (_, n) in zip(reqs, taken, strict=True)] == [12, 12, 12, 9]

"""Finished rows cut out of a decoding batch: the same samples, fewer rows computed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gymhub.trainer.engines import GenerationRequest, SamplingConfig, TransformersEngine  # noqa: E402
from gymhub.trainer.engines.kv_room import RoomyLayer, keep_rows  # noqa: E402


def _obs(tokenizer, word):
    return tokenizer.encode(f"<|im_end|>\n<|im_start|>user\n{word}<|im_end|>\n"
                            "<|im_start|>assistant\n", add_special_tokens=False)


def _rows_per_forward(engine, model, run):
    rows: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
    try:
        return run(), rows
    finally:
        hook.remove()


def test_cut_rows_change_no_sample_and_logprobs_only_by_rounding(tiny_model, tokenizer):
    """Rows that stop early (budgets 1..8, a stop id), sessions kept across three turns."""
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    engines = {on: TransformersEngine(tiny_model, tokenizer, pad_token_id=pad, compact_rows=on)
               for on in (True, False)}
    words = ["apple", "stone cloud", "river", "z", "stone", "cloud apple", "a", "sun"]
    ctx = {on: [tokenizer.encode(f"<|im_start|>user\n{w}<|im_end|>\n<|im_start|>assistant\n",
                                 add_special_tokens=False) for w in words] for on in engines}
    # a stop id the tiny model samples often, so rows end at different steps
    common = max(range(len(tokenizer)), key=lambda t: tokenizer.decode([t]).count(" "))
    sampling = SamplingConfig(temperature=1.0, stop_token_ids=(eos, common))
    counts = {}
    for turn in range(3):
        outs = {}
        for on, engine in engines.items():
            reqs = [GenerationRequest(c, 1 + i, seed=10 * turn + i, session=f"s{i}")
                    for i, c in enumerate(ctx[on])]
            outs[on], counts[on] = _rows_per_forward(
                engine, tiny_model, lambda e=engine, r=reqs: e.generate(r, sampling))
            for i, out in enumerate(outs[on]):
                ctx[on][i] = ctx[on][i] + out.token_ids + _obs(tokenizer, f"turn {turn}")
        for a, b in zip(outs[True], outs[False], strict=True):
            assert a.token_ids == b.token_ids
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)  # BLAS rounding only
            assert a.finish_reason == b.finish_reason
    assert sum(counts[True]) < sum(counts[False])  # fewer rows computed
    assert engines[True].caches.hits == engines[False].caches.hits > 0
    for on in engines:
        for i in range(len(words)):
            engines[on].release(f"s{i}")
        assert len(engines[on].caches) == 0


def test_a_roomy_layer_keeps_the_chosen_rows_and_its_room():
    keys, values = torch.randn(4, 2, 3, 5), torch.randn(4, 2, 3, 5)
    from transformers.cache_utils import DynamicCache, DynamicLayer

    plain = DynamicLayer()
    plain.update(keys, values)
    layer = RoomyLayer.around(plain, room=4)
    cache = DynamicCache()
    cache.layers = [layer]
    assert keep_rows(cache, [3, 1], dry_run=True)
    assert layer.keys.shape[0] == 4  # a dry run cuts nothing
    assert keep_rows(cache, [3, 1])
    assert torch.equal(layer.keys, keys[[3, 1]]) and torch.equal(layer.values, values[[3, 1]])
    assert layer._key_buf.shape == (2, 2, 7, 5)  # the room is still ahead
    new = torch.randn(2, 2, 1, 5)
    k, _ = layer.update(new, new)
    assert torch.equal(k[:, :, -1:], new) and k.data_ptr() == layer._key_buf.data_ptr()
    other = DynamicCache()
    other.layers = [plain]
    assert not keep_rows(other, [0])  # not a roomy layer: left as it is


def test_config_switch_reaches_the_engine(tiny_model, tokenizer, tmp_path):
    from gymhub.trainer.config import GRPOConfig
    from gymhub.trainer.policy import make_engine

    for on in (True, False):
        cfg = GRPOConfig(model="tiny", output_dir=str(tmp_path), compact_rows=on)
        engine = make_engine(cfg, tiny_model, tokenizer)
        assert isinstance(engine, TransformersEngine) and engine.compact_rows is on
    assert GRPOConfig(model="tiny").compact_rows is False  # see TransformersEngine

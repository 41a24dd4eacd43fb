"""The engine's grouped-query attention: the same outputs, bit for bit, without the copy."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gymhub.trainer.engines import GenerationRequest, SamplingConfig, TransformersEngine  # noqa: E402
from gymhub.trainer.engines.masks import additive_mask  # noqa: E402

from .conftest import assert_same_turns, build_model  # noqa: E402


def test_grouped_attention_equals_the_repeated_heads_bit_for_bit():
    """A masked prefill over a cache: torch grouping the heads gives what repeating them gave."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from gymhub.trainer.engines.gqa import gqa_sdpa

    module = torch.nn.Module()
    module.num_key_value_groups = 2  # type: ignore[assignment]
    module.is_causal = True  # type: ignore[assignment]
    g = torch.Generator().manual_seed(0)
    query = torch.randn(3, 4, 5, 16, generator=g)
    buffer = torch.randn(3, 2, 40, 16, generator=g)  # keys and values as views of a roomy cache
    key, value = buffer[:, :, :30], torch.randn(3, 2, 40, 16, generator=g)[:, :, :30]
    attn = torch.ones((3, 30), dtype=torch.long)
    attn[1, :4] = 0  # a left-padded row
    mask = additive_mask(attn, 5, torch.float32)
    ours, _ = gqa_sdpa(module, query, key, value, mask, scaling=0.25)
    theirs, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    assert ours.shape == theirs.shape == (3, 5, 4, 16)
    assert torch.equal(ours, theirs)
    # a decode step, no mask, or a boolean mask: transformers' own function, unchanged
    for q, m in ((query[:, :, -1:], mask[:, :, -1:]), (query, None), (query, mask == 0)):
        ours, _ = gqa_sdpa(module, q, key, value, m, scaling=0.25)
        assert torch.equal(ours, sdpa_attention_forward(module, q, key, value, m,
                                                        scaling=0.25)[0])


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_grouped_attention_changes_no_sample_and_no_logprob(tokenizer, temperature):
    """Padded fresh prompts, shared starts and cached sessions over four turns."""
    model = build_model(len(tokenizer))
    assert model.config.num_attention_heads > model.config.num_key_value_heads  # grouped
    pad = tokenizer.pad_token_id
    engines = {on: TransformersEngine(model, tokenizer, pad_token_id=pad, grouped_attention=on)
               for on in (True, False)}
    assert engines[True].grouped_attention and not engines[False].grouped_attention
    head = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n"
    starts = [head + "apple<|im_end|>\n<|im_start|>assistant\n", head + "stone cloud", "z"]
    sampling = SamplingConfig(temperature=temperature, stop_token_ids=(tokenizer.eos_token_id,))
    assert_same_turns(engines, tokenizer, starts, sampling)
    assert engines[True].caches.hits > 0
    assert model.config._attn_implementation == "sdpa"  # the trainer's forward keeps its own


def test_the_models_attention_is_restored_when_generation_fails(tokenizer):
    model = build_model(len(tokenizer))
    engine = TransformersEngine(model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    seen = []
    forward = model.forward

    def failing(*args, **kwargs):
        seen.append(model.config._attn_implementation)
        raise RuntimeError("out of memory")

    model.forward = failing
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.generate([GenerationRequest([5, 6, 7], 2, seed=0)], SamplingConfig())
    model.forward = forward
    assert seen and seen[0] != "sdpa"  # the engine's attention was in place during the call
    assert model.config._attn_implementation == "sdpa"


def test_models_without_sdpa_keep_their_attention(tokenizer):
    model = build_model(len(tokenizer))
    model.config._attn_implementation = "eager"
    engine = TransformersEngine(model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    assert not engine.grouped_attention
    engine.generate([GenerationRequest([5, 6, 7], 2, seed=0)], SamplingConfig())
    assert model.config._attn_implementation == "eager"
    # switched to eager after the engine was built: the engine leaves it eager too
    later = build_model(len(tokenizer))
    engine = TransformersEngine(later, tokenizer, pad_token_id=tokenizer.pad_token_id)
    later.config._attn_implementation = "eager"
    seen = []
    forward = later.forward

    def spy(*args, **kwargs):
        seen.append(later.config._attn_implementation)
        return forward(*args, **kwargs)

    later.forward = spy
    engine.generate([GenerationRequest([5, 6, 7], 2, seed=0)], SamplingConfig())
    assert seen and set(seen) == {"eager"}


def test_models_with_sub_configs_keep_their_attention(tokenizer, monkeypatch):
    """Switching a config's attention would switch its sub-configs' too, and switching it
    back could not restore theirs: such models run transformers' own attention."""
    model = build_model(len(tokenizer))
    assert TransformersEngine(model, tokenizer).grouped_attention
    # as a multimodal config has (on the model's config class only, for this test)
    monkeypatch.setattr(type(model.config), "sub_configs", {"vision_config": object},
                        raising=False)
    assert not TransformersEngine(model, tokenizer).grouped_attention

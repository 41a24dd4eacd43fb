"""The engine's prebuilt additive masks: the same outputs, bit for bit, as the model's own."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gymhub.trainer.engines import GenerationRequest, SamplingConfig, TransformersEngine  # noqa: E402
from gymhub.trainer.engines.masks import additive_mask, prebuilt_masks_apply  # noqa: E402

from .conftest import assert_same_turns, build_model  # noqa: E402


def test_the_mask_attends_to_fed_columns_up_to_each_query():
    attn = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    mask = additive_mask(attn, 2, torch.float32)
    inf = float("-inf")
    assert mask.shape == (2, 1, 2, 4) and mask.dtype == torch.float32
    assert mask[0, 0].tolist() == [[inf, 0.0, 0.0, inf], [inf, 0.0, 0.0, 0.0]]
    assert mask[1, 0].tolist() == [[0.0, 0.0, 0.0, inf], [0.0, 0.0, 0.0, 0.0]]
    assert additive_mask(attn, 1, torch.float32)[:, 0, 0].tolist() == [[inf, 0, 0, 0], [0] * 4]
    plain = torch.ones((2, 3), dtype=torch.long)
    assert additive_mask(plain, 1, torch.float32) is plain  # no mask at all: the model's way
    assert additive_mask(plain, 3, torch.float32) is plain
    causal = additive_mask(plain, 2, torch.float32)  # after a cache: causal, no padding
    assert causal[0, 0].tolist() == [[0.0, 0.0, inf], [0.0, 0.0, 0.0]]


def test_only_models_whose_own_mask_it_reproduces(tokenizer):
    model = build_model(len(tokenizer))
    assert prebuilt_masks_apply(model)
    model.config._attn_implementation = "eager"  # eager attention wants finfo.min, not -inf
    assert not prebuilt_masks_apply(model)
    model.config._attn_implementation = "sdpa"
    model.config.sliding_window = 4  # a sliding window needs its own mask
    assert not prebuilt_masks_apply(model)
    model.config.sliding_window = None
    model.config.layer_types = ["full_attention", "sliding_attention"]
    assert not prebuilt_masks_apply(model)
    assert not TransformersEngine(model).prebuilt_masks


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_prebuilt_masks_change_no_sample_and_no_logprob(tiny_model, tokenizer, temperature):
    """Padded fresh prompts, shared starts, sessions of different lengths over four turns."""
    pad = tokenizer.pad_token_id
    engines = {on: TransformersEngine(tiny_model, tokenizer, pad_token_id=pad, prebuilt_masks=on)
               for on in (True, False)}
    assert engines[True].prebuilt_masks and not engines[False].prebuilt_masks
    head = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n"
    starts = [head + "apple<|im_end|>\n<|im_start|>assistant\n", head + "stone cloud river",
              "z", "stone"]
    sampling = SamplingConfig(temperature=temperature, stop_token_ids=(tokenizer.eos_token_id,))
    assert_same_turns(engines, tokenizer, starts, sampling,  # plus a request with no session
                      extra=lambda turn, ctx: [GenerationRequest(ctx[1][:4], 2, seed=turn)])
    assert engines[True].caches.hits > 0


@pytest.mark.parametrize("padded", [True, False], ids=["left-padded", "no padding"])
def test_a_forward_with_the_mask_equals_the_models_own_bit_for_bit(tiny_model, padded):
    """A prefill, then three tokens after its cache: logits and cached keys are identical."""
    from transformers import DynamicCache

    from gymhub.trainer.hf_compat import cache_keyword, cache_of

    kw = cache_keyword(tiny_model)
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 7, 8, 9] if padded else [4, 3, 7, 8, 9]])
    attn = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1] if padded else [1] * 5])
    pos = torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2] if padded else [0, 1, 2, 3, 4]])
    with torch.no_grad():
        runs = []
        for mask in (attn, additive_mask(attn, 5, torch.float32)):
            first = tiny_model(input_ids=ids, attention_mask=mask, position_ids=pos,
                               use_cache=True, **{kw: DynamicCache()})
            full = torch.cat([attn, torch.ones((2, 3), dtype=attn.dtype)], dim=1)
            step_mask = full if mask is attn else additive_mask(full, 3, torch.float32)
            second = tiny_model(input_ids=torch.tensor([[3, 4, 5], [6, 7, 8]]),
                                attention_mask=step_mask, position_ids=pos[:, -1:] + 1
                                + torch.arange(3), use_cache=True, **{kw: cache_of(first)})
            runs.append((first.logits, second.logits, cache_of(second).layers[0].keys))
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


def test_step_masks_write_in_place_what_the_rebuilt_masks_held():
    """Each decode step's mask equals the mask rebuilt from the concatenated 2-D one."""
    from gymhub.trainer.engines.masks import StepMasks

    attn = torch.tensor([[0, 1, 1], [1, 1, 1], [1, 1, 1]])
    for dtype in (torch.float32, None):
        masks = StepMasks(attn, 4, dtype)
        plain = attn
        for fed in (None, [0, 2], [2]):
            column = torch.ones((3, 1), dtype=plain.dtype)
            if fed is not None:
                column = torch.tensor([[int(r in fed)] for r in range(3)])
            plain = torch.cat([plain, column], dim=1)
            got = masks.feed(fed)
            assert torch.equal(masks.attn, plain)
            if dtype is None:
                assert torch.equal(got, plain)
            else:
                assert torch.equal(got, additive_mask(plain, 1, dtype))
    unpadded = StepMasks(torch.ones((2, 3), dtype=torch.long), 2, torch.float32)
    first = unpadded.feed(None)
    assert first.dim() == 2 and bool(first.all())  # nothing padded: the model's no-mask path
    assert unpadded.feed([1]).dim() == 4  # a finished row: an additive mask from then on

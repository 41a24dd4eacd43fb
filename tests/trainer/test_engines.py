"""One contract for every engine that runs on a CPU (the vLLM engines: *_gpu.py modules)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")

from gymhub.trainer.engines import (  # noqa: E402
    Engine,
    GenerationRequest,
    SamplingConfig,
    TransformersEngine,
    VLLMServerEngine,
)

from .fake_vllm import FakeVLLM  # noqa: E402


def _fake_vllm_server(engine: TransformersEngine) -> httpx.Client:
    """vLLM 0.33's /v1/completions (see fake_vllm.py) backed by the transformers engine."""

    def generate(body):
        assert body["logprobs"] == 0 and body["ignore_eos"] is True
        sampling = SamplingConfig(
            temperature=body["temperature"],
            top_p=body["top_p"],
            stop=tuple(body["stop"]),
            stop_token_ids=tuple(body["stop_token_ids"]),
        )
        out = engine.generate(
            [GenerationRequest(body["prompt"], body["max_tokens"], seed=body["seed"])], sampling
        )[0]
        return out.token_ids, out.logprobs, out.finish_reason

    return FakeVLLM(generate=generate).client()


@pytest.fixture(params=["transformers", "vllm-server-mock"])
def engine_and_model(request, tiny_model, tokenizer, tmp_path):
    if request.param == "transformers":
        return TransformersEngine(
            tiny_model, tokenizer, pad_token_id=tokenizer.pad_token_id
        ), tiny_model
    inner = TransformersEngine(tiny_model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    client = _fake_vllm_server(inner)
    return VLLMServerEngine(
        "http://vllm.test", "tiny", client=client, adapter_dir=str(tmp_path)
    ), tiny_model


def _prompts(tokenizer):
    return [
        tokenizer.encode(t, add_special_tokens=False)
        for t in ["<|im_start|>user\napple<|im_end|>\n<|im_start|>assistant\n", "stone cloud", "z"]
    ]


def _generate_counting(engine, model, reqs, sampling):
    """The engine's outputs, and the input shape of every forward it ran."""
    shapes = []
    real = model.forward

    def counting(*args, **kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))
        return real(*args, **kwargs)

    model.forward = counting
    try:
        return engine.generate(reqs, sampling), shapes
    finally:
        del model.forward


def test_protocol_shape_and_budgets(engine_and_model, tokenizer):
    engine, _ = engine_and_model
    assert isinstance(engine, Engine)
    reqs = [
        GenerationRequest(p, n, seed=i)
        for i, (p, n) in enumerate(zip(_prompts(tokenizer), [5, 1, 7], strict=True))
    ]
    outs = engine.generate(reqs, SamplingConfig(temperature=1.0))
    assert len(outs) == 3
    for req, out in zip(reqs, outs, strict=True):
        assert len(out.token_ids) == len(out.logprobs) <= req.max_tokens
        assert all(math.isfinite(x) and x <= 0 for x in out.logprobs)
        if len(out.token_ids) < req.max_tokens:
            assert out.finish_reason == "stop"
        else:
            assert out.finish_reason in ("stop", "length")


def test_seeded_and_independent_of_batch(engine_and_model, tokenizer):
    engine, _ = engine_and_model
    p = _prompts(tokenizer)
    # vLLM engines refuse top_p < 1 (their logprobs are renormalised over the nucleus)
    cfg = SamplingConfig(temperature=1.0, top_p=0.9 if isinstance(engine, TransformersEngine)
                         else 1.0)
    alone = engine.generate([GenerationRequest(p[0], 8, seed=7)], cfg)[0]
    batched = engine.generate(
        [GenerationRequest(p[1], 3, seed=1), GenerationRequest(p[0], 8, seed=7)], cfg
    )[1]
    assert alone.token_ids == batched.token_ids
    assert alone.logprobs == pytest.approx(batched.logprobs, abs=1e-4)


def test_logprobs_match_a_forward_pass(engine_and_model, tokenizer):
    engine, model = engine_and_model
    prompt = _prompts(tokenizer)[0]
    out = engine.generate([GenerationRequest(prompt, 6, seed=3)], SamplingConfig(temperature=0.7))[
        0
    ]
    ids = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        logits = model(ids.to(next(model.parameters()).device)).logits[0].float().cpu()
    lp = torch.log_softmax(logits[len(prompt) - 1 : -1] / 0.7, dim=-1)
    expected = lp.gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert out.logprobs == pytest.approx(expected.tolist(), abs=2e-3)


def test_stop_token_and_greedy(engine_and_model, tokenizer):
    engine, _ = engine_and_model
    prompt = _prompts(tokenizer)[1]
    greedy = engine.generate([GenerationRequest(prompt, 6)], SamplingConfig(temperature=0.0))[0]
    again = engine.generate(
        [GenerationRequest(prompt, 6, seed=99)], SamplingConfig(temperature=0.0)
    )[0]
    assert greedy.token_ids == again.token_ids
    stop_at = greedy.token_ids[2]
    cut = engine.generate(
        [GenerationRequest(prompt, 6)], SamplingConfig(temperature=0.0, stop_token_ids=(stop_at,))
    )[0]
    first = greedy.token_ids.index(stop_at)
    assert cut.token_ids == greedy.token_ids[: first + 1] and cut.finish_reason == "stop"


def test_stop_strings(engine_and_model, tokenizer):
    engine, _ = engine_and_model
    prompt = _prompts(tokenizer)[1]
    greedy = engine.generate([GenerationRequest(prompt, 8)], SamplingConfig(temperature=0.0))[0]
    text = tokenizer.decode(greedy.token_ids[:3], skip_special_tokens=False)
    if not text.strip():
        pytest.skip("greedy output is blank")
    stop = text.strip()[-1]
    cut = engine.generate(
        [GenerationRequest(prompt, 8)], SamplingConfig(temperature=0.0, stop=(stop,))
    )[0]
    assert stop in tokenizer.decode(cut.token_ids, skip_special_tokens=False)
    assert cut.finish_reason == "stop" and len(cut.token_ids) <= 3


def test_transformers_engine_update_weights_bumps_version(tiny_model, tokenizer):
    engine = TransformersEngine(tiny_model, tokenizer)
    engine.update_weights(tiny_model)
    engine.sleep()
    engine.wake_up()
    assert engine.policy_version == 1
    with pytest.raises(ValueError, match="stop strings"):
        TransformersEngine(tiny_model).generate(
            [GenerationRequest([1], 2)], SamplingConfig(stop=("x",))
        )


def test_transformers_engine_prefills_a_shared_prompt_once(tiny_model, tokenizer):
    """A GRPO group's samples of one prompt: one prefill, each its own seeded sample."""
    engine = TransformersEngine(tiny_model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    p, q = _prompts(tokenizer)[:2]
    reqs = [GenerationRequest(p, 6, seed=1), GenerationRequest(p, 4, seed=2),
            GenerationRequest(q, 5, seed=3), GenerationRequest(p, 6, seed=4)]
    together, rows = _generate_counting(engine, tiny_model, reqs, SamplingConfig(temperature=1.0))
    assert rows[0][0] == 2 and all(shape[0] == 4 for shape in rows[1:])  # p once, q once
    for req, out in zip(reqs, together, strict=True):
        alone = engine.generate([req], SamplingConfig(temperature=1.0))[0]
        assert out.token_ids == alone.token_ids
        assert out.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    assert together[0].token_ids != together[3].token_ids  # seeds still differ


def test_prefix_groups_cluster_prompts_by_their_common_start():
    from gymhub.trainer.engines.prefix_share import prefix_groups

    a = list(range(40))
    prompts = [[*a, 1, 2], [*a, 3], [*a[:35], 9, 9], [*a, 1, 2], [7] * 50, [*[7] * 49, 8], [5]]
    groups = prefix_groups(prompts, min_len=32)
    assert sorted((sorted(ix), n) for ix, n in groups) == [([0, 1, 2, 3], 35), ([4, 5], 49)]
    assert prefix_groups([a, a, [5]], min_len=32) == []  # identical prompts need no group
    assert prefix_groups([a, [5], a, [5]], min_len=32, identical=True) == [([0, 2], 40)]


def test_alike_prompts_share_one_prefill_of_their_common_start(tiny_model, tokenizer):
    """An evaluation-like batch: one long system prompt, different questions, a GRPO
    group among them and a stranger; outputs equal the engine without sharing."""
    pad = tokenizer.pad_token_id
    system = tokenizer.encode("<|im_start|>system\n" + "stone cloud apple " * 12 + "<|im_end|>\n",
                              add_special_tokens=False)
    assert len(system) > 40
    asks = [tokenizer.encode(f"<|im_start|>user\n{w}<|im_end|>\n<|im_start|>assistant\n",
                             add_special_tokens=False) for w in ("apple", "stone", "cloud")]
    reqs = [GenerationRequest(system + asks[0], 5, seed=1),
            GenerationRequest(system + asks[1], 6, seed=2),
            GenerationRequest(system + asks[1], 6, seed=3),
            GenerationRequest(system + asks[2], 4, seed=4),
            GenerationRequest(asks[0], 5, seed=5)]
    sampling = SamplingConfig(temperature=1.0)
    engine = TransformersEngine(tiny_model, tokenizer, pad_token_id=pad)
    shared, shapes = _generate_counting(engine, tiny_model, reqs, sampling)
    assert shapes[0][0] == 1 and shapes[0][1] >= len(system)  # the common start, once
    longest_tail = max(len(r.prompt_ids) - shapes[0][1] for r in reqs[:4])
    assert shapes[1] == (4, max(longest_tail, len(asks[0])))  # tails; the group's once
    plain = TransformersEngine(tiny_model, tokenizer, pad_token_id=pad, share_prefixes=False)
    for a, b in zip(shared, plain.generate(reqs, sampling), strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_batched_sampling_draws_from_the_tempered_top_p_distribution():
    """Row by row frequencies match softmax(logits / T), cut to top-p, and a row's draw
    depends only on its own uniform number."""
    import torch

    from gymhub.trainer.engines.sampling import draw_uniforms
    from gymhub.trainer.engines.sampling import sample_rows as _sample

    def uniforms(seeds):
        return draw_uniforms([torch.Generator().manual_seed(i) for i in seeds], 1)[:, 0]

    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]] * 4000)
    drawn = _sample(logits, 0.8, 1.0, uniforms(range(4000)))
    want = torch.softmax(logits[0] / 0.8, -1)
    freq = torch.bincount(torch.tensor([t for t, _ in drawn]), minlength=5) / 4000
    assert torch.allclose(freq, want, atol=0.03)
    assert all(lp == pytest.approx(float(want[t].log()), abs=1e-5) for t, lp in drawn[:50])
    cut = _sample(logits, 0.8, 0.7, uniforms(range(4000)))
    kept = {t for t, _ in cut}
    assert kept == {0, 1}  # 0.64 + 0.24 reach 0.7; the tail is never drawn
    alone = _sample(logits[:1], 0.8, 1.0, uniforms([7]))
    assert alone[0][0] == drawn[7][0]
    assert [t for t, _ in _sample(logits[:3], 0.0, 1.0, None)] == [0, 0, 0]
    with pytest.raises(ValueError, match="uniform"):
        _sample(logits[:3], 1.0, 1.0, None)


def test_up_front_draws_are_the_draws_one_at_a_time():
    """A call's uniforms drawn at once equal a generator's successive single draws, so
    drawing them up front changed no sample (and a torch that changed this would fail here)."""
    import torch

    from gymhub.trainer.engines.sampling import draw_uniforms

    for seed in (0, 7, 2**40 + 3):
        one = torch.Generator().manual_seed(seed)
        singles = torch.cat([torch.rand(1, generator=one) for _ in range(300)])
        both = draw_uniforms([torch.Generator().manual_seed(seed)] * 2, 150)
        assert torch.equal(both.flatten(), singles)  # one generator: row 2 continues row 1
    assert draw_uniforms([], 5).shape == (0, 5)


def test_prefix_sharing_is_a_tree_system_prompt_then_each_schema(tiny_model, tokenizer):
    pad = tokenizer.pad_token_id

    def enc(text):
        return tokenizer.encode(text, add_special_tokens=False)

    system = enc("<|im_start|>system\n" + "stone cloud apple " * 12)
    schemas = [enc(" apple stone" * 20 + "<|im_end|>\n"), enc(" cloud" * 40 + "<|im_end|>\n")]
    asks = [enc(f"<|im_start|>user\n{w}<|im_end|>\n<|im_start|>assistant\n")
            for w in ("apple", "stone")]
    reqs = [GenerationRequest(system + s + a, 4, seed=i)
            for i, (s, a) in enumerate((s, a) for s in schemas for a in asks)]
    engine = TransformersEngine(tiny_model, tokenizer, pad_token_id=pad)
    sampling = SamplingConfig(temperature=1.0)
    shared, shapes = _generate_counting(engine, tiny_model, reqs, sampling)
    # the common start once, then each schema once on top of it, then the questions
    assert [b for b, _ in shapes[:3]] == [1, 1, 1] and shapes[0][1] >= len(system)
    assert shapes[1][1] + shapes[2][1] >= sum(map(len, schemas)) - 2
    assert shapes[3][0] == 4 and shapes[3][1] <= max(map(len, asks))
    plain = TransformersEngine(tiny_model, tokenizer, pad_token_id=pad, share_prefixes=False)
    for a, b in zip(shared, plain.generate(reqs, sampling), strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_non_finite_logits_are_an_error_not_a_sample():
    import torch

    from gymhub.trainer.engines.sampling import sample_rows as _sample

    bad = torch.tensor([[0.0, float("nan"), 1.0]])
    for temperature in (0.0, 1.0):
        with pytest.raises(ValueError, match="non-finite"):
            _sample(bad, temperature, 1.0, torch.tensor([0.5]))

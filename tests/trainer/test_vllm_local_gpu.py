"""The colocated vLLM engine on a GPU: what would crash or silently drift without one.

One engine for the whole module (building one costs seconds of GPU start-up).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
vllm = pytest.importorskip("vllm")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gymhub.trainer.engines import GenerationRequest, SamplingConfig  # noqa: E402
from gymhub.trainer.engines.vllm_local import VLLMEngine  # noqa: E402

from .vllm_gpu_util import (  # noqa: E402
    close_enough,
    forward_logprobs,
    perturbed,
    vllm_ready_model,
)

PROMPT = [5, 17, 42, 99, 7, 3]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("vllm-local")
    model = vllm_ready_model(len(tokenizer))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    engine = VLLMEngine(str(path), gpu_memory_utilization=0.2, dtype="bfloat16",
                        enable_sleep_mode=True, max_model_len=512)
    return engine, model.cuda()


def _check(engine, model, temperature=0.8):
    out = engine.generate([GenerationRequest(PROMPT, 8, seed=1)],
                          SamplingConfig(temperature=temperature))[0]
    assert len(out.token_ids) == 8 and out.finish_reason == "length"
    want = forward_logprobs(model, PROMPT, out.token_ids, temperature)
    assert close_enough(out.logprobs, want), (out.logprobs, want)


def test_runs_in_process_with_tempered_logprobs(setup):
    engine, model = setup
    assert engine.llm.llm_engine.model_executor is not None  # apply_model needs no pickling
    _check(engine, model)
    _check(engine, model, temperature=0.0)


def test_full_weight_update_reaches_the_engine(setup):
    engine, model = setup
    perturbed(model, seed=1)
    engine.update_weights(model)
    assert engine.policy_version == 1
    _check(engine, model)


def test_lora_update_is_merged(setup):
    from gymhub.trainer.policy import apply_lora

    engine, model = setup
    peft_model = apply_lora(model, r=8, alpha=16, dropout=0.0,
                            target_modules=["q_proj", "v_proj"])
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:  # B starts at zero: make the adapter matter
            torch.nn.init.normal_(p, std=0.05)
    engine.update_weights(peft_model)
    _check(engine, peft_model)
    peft_model.unload()  # type: ignore[operator]


def test_sleep_level_2_then_update_restores_generation(setup):
    engine, model = setup
    free_before = torch.cuda.mem_get_info()[0]
    engine.sleep()
    assert torch.cuda.mem_get_info()[0] > free_before  # memory was handed back
    with pytest.raises(Exception, match="update_weights"):
        engine.generate([GenerationRequest(PROMPT, 2)], SamplingConfig())
    perturbed(model, seed=2)
    engine.update_weights(model)
    _check(engine, model)


def test_resume_push_keeps_the_checkpoints_version(setup):
    engine, model = setup
    engine.policy_version = 41  # what GRPOTrainer.resume sets before pushing
    engine.update_weights(model)
    assert engine.policy_version == 42
    _check(engine, model)

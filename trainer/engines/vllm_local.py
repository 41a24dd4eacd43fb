"""vLLM colocated in the trainer's process (one GPU): fast rollouts, in-place weight sync.

vLLM is an optional extra and is imported only when this engine is built. Defaults
carry the 2025 lessons: ``enforce_eager`` (CUDA graphs capture stale weight pointers
and cost memory a colocated trainer needs), prefix caching on (turn ``k+1`` of an
episode re-reads turn ``k``'s context), sleep mode optional (frees weights and KV cache
while the trainer steps). Weights are copied in place through the model's own
``load_weights``; for a peft model the adapters are merged into a copy of each weight
first, so vLLM serves exactly the trainer's policy without knowing about LoRA.

Log-probabilities: vLLM is asked for ``processed_logprobs`` (after temperature, and
after top-p when it is below 1); with ``top_p = 1`` this equals the trainer's tempered
log-probability up to kernel numerics, which the TIS correction absorbs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .base import Completion, FinishReason, GenerationRequest, SamplingConfig

if TYPE_CHECKING:
    import torch

__all__ = ["VLLMEngine", "iter_merged_weights"]


class VLLMEngine:
    """A colocated ``vllm.LLM``.

    Args:
        model: path of the model directory (weights are synced from the trainer later).
        gpu_memory_utilization: fraction of GPU memory vLLM may reserve.
        enforce_eager: disable CUDA graphs.
        enable_prefix_caching: reuse KV blocks across turns.
        enable_sleep_mode: allow :meth:`sleep`/:meth:`wake_up`.
        seed: vLLM's seed.
        dtype: ``"bfloat16"``, ``"float16"``, ``"float32"`` or ``"auto"``.
        max_model_len: context length vLLM reserves for.
        llm_kwargs: anything else for ``vllm.LLM``.
    """

    def __init__(
        self,
        model: str,
        *,
        gpu_memory_utilization: float = 0.3,
        enforce_eager: bool = True,
        enable_prefix_caching: bool = True,
        enable_sleep_mode: bool = False,
        seed: int = 0,
        dtype: str = "auto",
        max_model_len: int | None = None,
        **llm_kwargs: Any,
    ) -> None:
        try:
            import vllm
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise ImportError("engine 'vllm' needs vLLM: pip install 'gymhub[vllm]'") from exc
        self._vllm = vllm
        self.sleep_enabled = enable_sleep_mode
        self.llm = vllm.LLM(
            model=model,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            enable_prefix_caching=enable_prefix_caching,
            enable_sleep_mode=enable_sleep_mode,
            seed=seed,
            dtype=dtype,
            max_model_len=max_model_len,
            logprobs_mode="processed_logprobs",
            **llm_kwargs,
        )
        self.policy_version = 0
        self._asleep = False

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[Completion]:
        """One ``LLM.generate`` call over token prompts; ``logprobs=0`` (sampled id only)."""
        if self._asleep:
            self.wake_up()
        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        params = [
            self._vllm.SamplingParams(
                n=1,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=r.max_tokens,
                stop=list(sampling.stop) or None,
                stop_token_ids=list(sampling.stop_token_ids) or None,
                include_stop_str_in_output=True,
                logprobs=0,
                seed=r.seed,
                skip_special_tokens=False,
            )
            for r in requests
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        out: list[Completion] = []
        for o in outputs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [
                float(step[tok].logprob) for tok, step in zip(ids, c.logprobs or [], strict=True)
            ]
            reason: FinishReason = "length" if c.finish_reason == "length" else "stop"
            out.append(Completion(token_ids=ids, logprobs=lps, finish_reason=reason))
        return out

    def update_weights(self, model: Any) -> None:
        """Copy the trainer's (merged) weights into vLLM's model in place."""
        if self._asleep:
            self.llm.wake_up(tags=["weights"])
        weights = list(iter_merged_weights(model))

        def _load(vllm_model: Any) -> None:
            vllm_model.load_weights(weights=weights)

        if hasattr(self.llm, "apply_model"):
            self.llm.apply_model(_load)
        else:  # older vLLM: reach the single driver worker directly
            executor = self.llm.llm_engine.model_executor
            _load(executor.driver_worker.worker.model_runner.model)
        self.llm.reset_prefix_cache()
        self.policy_version += 1

    def sleep(self) -> None:
        """Level 1: offload weights to CPU and drop the KV cache."""
        if self.sleep_enabled and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake_up(self) -> None:
        """Restore weights and KV cache."""
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False


def iter_merged_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of the base model with LoRA merged, in the base's naming.

    A peft model is merged on a copy of each adapted weight
    (``W + scale · B @ A``), so the trainer's adapters stay untouched.
    """
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    lora_deltas: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if hasattr(module, "lora_A") and hasattr(module, "get_delta_weight"):
            for adapter in getattr(module, "active_adapters", []):
                if adapter in module.lora_A:
                    delta = module.get_delta_weight(adapter).detach()
                    key = f"{name}.base_layer.weight"
                    lora_deltas[key] = lora_deltas[key] + delta if key in lora_deltas else delta
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            if "lora_" in name:
                continue
            merged = tensor + lora_deltas[name] if name in lora_deltas else tensor
            yield name.replace(".base_layer.", "."), merged

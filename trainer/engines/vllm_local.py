"""vLLM colocated in the trainer's process (one GPU): fast rollouts, in-place weight sync.

vLLM is an optional extra (``vllm>=0.33,<0.34``, checked against 0.33.0) imported only
when this engine is built. Defaults carry the 2025 lessons: ``enforce_eager`` (CUDA
graphs capture stale weight pointers and cost memory a colocated trainer needs),
prefix caching on (turn ``k+1`` of an episode re-reads turn ``k``'s context), sleep
mode optional.

*Colocated means in-process.* vLLM's ``LLM`` runs its engine core in a child process
by default, and ``apply_model`` then has to serialise the function, which vLLM refuses
(``vllm/v1/serial_utils.py``: "Object of type ... is not serializable"). The engine is
therefore built with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (read when ``LLMEngine`` is
made, ``vllm/v1/engine/llm_engine.py``; cached by vLLM after the first engine core
starts, ``vllm/envs.py``), which keeps the engine core and its single
``UniProcExecutor`` worker here, so ``apply_model`` calls the function directly
(``vllm/v1/executor/uniproc_executor.py``, ``vllm/v1/worker/worker_base.py``). The
engine checks that it got that and fails clearly otherwise.

Weights are copied in place through the model's own ``load_weights``; for a peft model
the adapters are merged into a copy of each weight first, so vLLM serves exactly the
trainer's policy without knowing about LoRA. Every weight is overwritten on each
update, so :meth:`VLLMEngine.sleep` uses level 2 (drop the weights instead of copying
them to CPU; ``vllm/entrypoints/llm.py``, ``LLM.sleep``) and an update wakes the
weights, loads, then wakes the KV cache.

Log-probabilities: ``logprobs_mode="processed_logprobs"`` (after temperature;
``vllm/v1/sample/sampler.py``), ``top_p < 1`` refused (see :mod:`.base`);
``generation_config="vllm"`` and ``ignore_eos`` so that only the learner's stop ids
and strings end a turn. A finish reason ``abort`` stays ``abort``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gymhub.errors import ConfigError, EngineError

from .base import Completion, FinishReason, GenerationRequest, SamplingConfig
from .weight_push import VersionGate, call_with_timeout

if TYPE_CHECKING:
    import torch

__all__ = ["VLLM_INSTALL_HINT", "VLLMEngine", "iter_merged_weights"]

#: vLLM's switch between an in-process and a child-process engine core.
IN_PROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"

#: What to install for the vLLM engines, said exactly: ``gymhub[train,vllm]`` cannot be
#: resolved (``train`` pins torch 2.13.0, the CPU build ``make`` tests with; vLLM 0.33 pins
#: torch 2.14.0), so the learner goes first and vLLM second, replacing torch (pip then warns
#: that gymhub wanted 2.13.0; the engines are checked against vLLM's torch).
VLLM_INSTALL_HINT = (
    "pip install 'gymhub[train]' && pip install 'vllm>=0.33,<0.34' (in that order: vLLM "
    "replaces the torch 2.13.0 that gymhub[train] pins with its own 2.14.0, and pip's warning "
    "about that pin is expected; 'gymhub[train,vllm]' in one command does not resolve)"
)


class VLLMEngine:
    """A colocated ``vllm.LLM``.

    Args:
        model: path of the model directory (weights are synced from the trainer later).
        gpu_memory_utilization: fraction of GPU memory vLLM may reserve.
        enforce_eager: disable CUDA graphs.
        enable_prefix_caching: reuse KV blocks across turns.
        enable_sleep_mode: make :meth:`sleep`/:meth:`wake_up` free and restore memory.
        seed: vLLM's seed.
        dtype: ``"bfloat16"``, ``"float16"``, ``"float32"`` or ``"auto"``.
        max_model_len: context length vLLM reserves for.
        sync_timeout: seconds one weight update may take before it fails.
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
        sync_timeout: float = 300.0,
        **llm_kwargs: Any,
    ) -> None:
        if os.environ.get(IN_PROCESS_ENV, "0") != "0":
            raise ConfigError(f"{IN_PROCESS_ENV}={os.environ[IN_PROCESS_ENV]} would run vLLM "
                              "in a child process; the colocated engine needs it unset or 0")
        os.environ[IN_PROCESS_ENV] = "0"
        try:
            import vllm
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise ImportError(f"engine 'vllm' needs vLLM: {VLLM_INSTALL_HINT}") from exc
        self._vllm = vllm
        self.sleep_enabled = enable_sleep_mode
        self.sync_timeout = sync_timeout
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
            generation_config="vllm",
            **llm_kwargs,
        )
        if getattr(self.llm.llm_engine, "model_executor", None) is None:
            raise EngineError(
                "vLLM started its engine core in another process, so weights cannot be "
                f"loaded in place: set {IN_PROCESS_ENV}=0 before anything builds a vLLM "
                "engine in this process"
            )
        self.policy_version = 0
        self._gate = VersionGate()
        self._asleep = False
        self._weights_dropped = False

    def sampling_params(self, request: GenerationRequest, sampling: SamplingConfig) -> Any:
        """``vllm.SamplingParams`` with every field that changes sampling explicit."""
        if sampling.top_p < 1.0:
            raise ConfigError(
                "vLLM reports log-probabilities renormalised over the top-p nucleus, "
                "which the trainer does not compute: use top_p = 1 with vLLM engines"
            )
        return self._vllm.SamplingParams(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=0,
            min_p=0.0,
            repetition_penalty=1.0,
            presence_penalty=0.0,
            frequency_penalty=0.0,
            min_tokens=0,
            ignore_eos=True,
            max_tokens=request.max_tokens,
            stop=list(sampling.stop) or None,
            stop_token_ids=list(sampling.stop_token_ids) or None,
            include_stop_str_in_output=True,
            logprobs=0,
            seed=request.seed,
            skip_special_tokens=False,
        )

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[Completion]:
        """One ``LLM.generate`` call over token prompts; ``logprobs=0`` (sampled id only)."""
        if not requests:
            return []
        if self._asleep:
            self.wake_up()
        if self._weights_dropped:
            raise EngineError("sleep level 2 dropped vLLM's weights: push weights "
                              "(update_weights) before generating")
        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        params = [self.sampling_params(r, sampling) for r in requests]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        out: list[Completion] = []
        for o in outputs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            steps = list(c.logprobs or [])
            if len(steps) != len(ids):
                raise EngineError(f"vLLM returned {len(ids)} ids but {len(steps)} logprobs")
            lps = [float(step[tok].logprob) for tok, step in zip(ids, steps, strict=True)]
            reason: FinishReason
            if c.finish_reason in ("stop", "length", "abort"):
                reason = c.finish_reason
            elif c.finish_reason in ("error", "repetition"):  # FINISH_REASON_STRINGS
                reason = "abort"
            else:
                raise EngineError(f"vLLM finished a request with {c.finish_reason!r}")
            extra = {} if reason != "abort" else {
                "error": f"vLLM finished the request with {c.finish_reason!r}"}
            out.append(Completion(token_ids=ids, logprobs=lps, finish_reason=reason,
                                  extra=extra))
        return out

    def update_weights(self, model: Any) -> None:
        """Copy the trainer's (merged) weights into vLLM's model in place."""
        version = self.policy_version + 1
        self._gate.check(version)
        if self._asleep:
            self.llm.wake_up(tags=["weights"])
        weights = list(iter_merged_weights(model))

        def _load(vllm_model: Any) -> None:
            vllm_model.load_weights(weights=weights)

        call_with_timeout(lambda: self.llm.apply_model(_load), self.sync_timeout,
                          f"in-process load of policy version {version}")
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False
        self._weights_dropped = False
        self.llm.reset_prefix_cache()
        self._gate.delivered(version)
        self.policy_version = version

    def sleep(self) -> None:
        """Level 2: drop weights and KV cache (the next update rewrites every weight)."""
        if self.sleep_enabled and not self._asleep:
            self.llm.sleep(level=2)
            self._asleep = True

    def wake_up(self) -> None:
        """Reallocate memory; the weights stay garbage until :meth:`update_weights`.

        The trainer's loop never needs this: its update wakes the engine on the way
        (weights first, then the KV cache), which is cheaper.
        """
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False
            self._weights_dropped = True


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

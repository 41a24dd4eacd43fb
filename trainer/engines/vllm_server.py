"""A vLLM server (``vllm serve``) over its OpenAI-compatible completions API.

Token ids go in as the ``prompt`` (a list of ints, which the completions endpoint
accepts) and come back through ``return_token_ids`` (vLLM ≥ 0.10.2) or, on older
servers started with ``--return-tokens-as-token-ids``, parsed from ``token_id:N``
strings; text is never re-tokenised. One HTTP request per sequence, sent concurrently
so the server batches them.

Weight sync: with LoRA the adapter is saved to ``adapter_dir`` (a path the server can
read) and loaded under a new name through ``/v1/load_lora_adapter`` (the server needs
``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``); requests then name
that adapter. Full fine-tuning needs a collective transport this engine does not
provide, so it raises. ``sleep``/``wake_up`` use the server's development endpoints
(``VLLM_SERVER_DEV_MODE=1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .base import Completion, FinishReason, GenerationRequest, SamplingConfig

__all__ = ["VLLMServerEngine"]


class VLLMServerEngine:
    """Generate through a remote vLLM server.

    Args:
        base_url: e.g. ``http://localhost:8000``.
        model: the served model name.
        adapter_dir: where LoRA adapters are written for the server to load.
        timeout: seconds per request.
        max_workers: concurrent requests.
        client: an ``httpx.Client`` to use (tests pass one with a mock transport).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        adapter_dir: str | None = None,
        timeout: float = 600.0,
        max_workers: int = 64,
        client: Any = None,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.base_model = model
        self.model = model
        self.adapter_dir = adapter_dir
        self.client = client or httpx.Client(
            timeout=timeout, limits=httpx.Limits(max_connections=max_workers)
        )
        self.max_workers = max_workers
        self.policy_version = 0

    def _one(self, request: GenerationRequest, sampling: SamplingConfig) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(request.prompt_ids),
            "max_tokens": request.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "n": 1,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.stop_token_ids:
            body["stop_token_ids"] = list(sampling.stop_token_ids)
        if request.seed is not None:
            body["seed"] = request.seed
        resp = self.client.post(f"{self.base_url}/v1/completions", json=body)
        resp.raise_for_status()
        choice = resp.json()["choices"][0]
        lp = choice.get("logprobs") or {}
        ids = choice.get("token_ids")
        if ids is None:
            ids = [_token_id(t) for t in lp.get("tokens") or []]
        lps = [float(x) for x in lp.get("token_logprobs") or []]
        if len(lps) != len(ids):
            raise RuntimeError(f"server returned {len(ids)} ids but {len(lps)} logprobs")
        reason: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
        return Completion(token_ids=[int(i) for i in ids], logprobs=lps, finish_reason=reason)

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[Completion]:
        """Send every request concurrently; results come back in order."""
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(requests))) as pool:
            return list(pool.map(lambda r: self._one(r, sampling), requests))

    def update_weights(self, model: Any) -> None:
        """Publish a LoRA adapter and switch requests to it.

        Raises:
            NotImplementedError: the model is not a peft model or no ``adapter_dir``.
        """
        if not hasattr(model, "peft_config") or self.adapter_dir is None:
            raise NotImplementedError(
                "vllm-server weight sync supports LoRA adapters only (set adapter_dir)"
            )
        name = f"policy-v{self.policy_version + 1}"
        path = Path(self.adapter_dir) / name
        model.save_pretrained(str(path))
        resp = self.client.post(
            f"{self.base_url}/v1/load_lora_adapter",
            json={"lora_name": name, "lora_path": str(path)},
        )
        resp.raise_for_status()
        self.model = name
        self.policy_version += 1

    def sleep(self) -> None:
        """Ask the server to offload its weights and free the KV cache."""
        self.client.post(f"{self.base_url}/sleep", params={"level": 1}).raise_for_status()

    def wake_up(self) -> None:
        """Undo :meth:`sleep`."""
        self.client.post(f"{self.base_url}/wake_up").raise_for_status()


def _token_id(token: str) -> int:
    """Parse ``token_id:123`` (``--return-tokens-as-token-ids``)."""
    prefix = "token_id:"
    if not token.startswith(prefix):
        raise RuntimeError(
            "the server returned text tokens; enable return_token_ids "
            "(vLLM >= 0.10.2) or start it with --return-tokens-as-token-ids"
        )
    return int(token[len(prefix) :])

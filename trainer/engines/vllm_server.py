"""A vLLM server (``gymhub vllm-serve``) over its OpenAI-compatible completions API.

Checked against vLLM 0.33.0 (the supported range is ``vllm>=0.33,<0.34``):

* Request (``vllm/entrypoints/openai/completion/protocol.py``, ``CompletionRequest``):
  token ids go in as ``prompt``; every sampling field is sent explicitly, because a
  field left out is taken from the model's ``generation_config.json`` (e.g. ``top_k``
  20 and a repetition penalty for Qwen instruct models; ``to_sampling_params``).
  ``ignore_eos`` keeps vLLM from stopping on end-of-sequence ids the other engines do
  not stop on (``vllm/sampling_params.py``, ``update_from_generation_config``).
* Response (``CompletionResponseChoice``, ``CompletionLogProbs``): ``token_ids`` come
  back with ``return_token_ids``; ``token_logprobs`` entries may be ``None`` and are
  clamped at ``-9999.0`` (``vllm/entrypoints/openai/completion/serving.py``,
  ``_create_completion_logprobs``). Either means the server cannot vouch for the
  sample, so the completion is reported as ``abort`` with a reason in ``extra`` and
  the rollout masks it. ``finish_reason`` ``abort`` stays ``abort``.
* Start-up (:func:`check_server`): ``GET /server_info?config_format=json``
  (``vllm/entrypoints/serve/dev/server_info/api_router.py``) must show the flags
  :mod:`gymhub.trainer.vllm_serve` passes; anything missing is one
  :class:`~gymhub.errors.EngineMisconfigured` that lists every problem.
* Weights: :mod:`.vllm_push` (LoRA adapters, or vLLM's NCCL weight-transfer routes
  for full fine-tuning). Sleep: ``POST /sleep?level=`` and ``/wake_up?tags=``
  (``vllm/entrypoints/serve/dev/sleep/api_router.py``); level 2 (drop the weights)
  with full fine-tuning, whose next push overwrites them anyway; level 1 with LoRA,
  whose base weights must survive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from gymhub.errors import ConfigError, EngineError, EngineMisconfigured, WeightSyncError

from .base import Completion, FinishReason, GenerationRequest, SamplingConfig
from .vllm_push import LoraAdapterPush, NcclRoutePush, RouteClient

__all__ = ["LOGPROB_FLOOR", "VLLMServerEngine", "check_server", "parse_choice"]

#: vLLM clamps reported log-probabilities here (``max(logprob, -9999.0)``).
LOGPROB_FLOOR = -9999.0
#: finish reasons of a request vLLM gave up on (retryable error, repetition detected)
_FAILED = ("error", "repetition")
_SERVE_HINT = "start the server with `gymhub vllm-serve MODEL` (see --help)"


class VLLMServerEngine:
    """Generate through a remote vLLM server.

    Args:
        base_url: e.g. ``http://localhost:8000``.
        model: the served model name (``gymhub vllm-serve``'s ``MODEL``).
        finetune: ``lora`` (adapters through ``adapter_dir``), ``full`` (NCCL), or
            ``None`` to generate only (evaluation: no pushes, no weight flags checked).
        adapter_dir: where LoRA adapters are written for the server to load.
        lora_rank: the run's LoRA rank; the server's ``--max-lora-rank`` must cover it.
        enable_sleep: use ``/sleep`` and ``/wake_up`` (needs ``--enable-sleep-mode``).
        timeout: seconds per generation request.
        sync_timeout: seconds for one weight push, after which it fails.
        max_workers: concurrent requests.
        client: an ``httpx.Client`` to use (tests pass one with a mock transport).
        check: verify the server's flags now (:func:`check_server`).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        finetune: Literal["lora", "full"] | None = "lora",
        adapter_dir: str | None = None,
        lora_rank: int = 16,
        enable_sleep: bool = False,
        timeout: float = 600.0,
        sync_timeout: float = 300.0,
        max_workers: int = 64,
        client: Any = None,
        check: bool = True,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.base_model = model
        self.model = model
        self.finetune = finetune
        self.client = client or httpx.Client(
            timeout=timeout, limits=httpx.Limits(max_connections=max_workers)
        )
        self.max_workers = max_workers
        self.policy_version = 0
        self.enable_sleep = enable_sleep
        self.sleep_level = 2 if finetune == "full" else 1
        self._asleep = False
        self._weights_dropped = False
        routes = RouteClient(self.client, self.base_url, sync_timeout)
        self.pusher: LoraAdapterPush | NcclRoutePush | None = None
        if finetune == "lora":
            if adapter_dir is None:
                raise ConfigError("engine 'vllm-server' with LoRA needs adapter_dir")
            self.pusher = LoraAdapterPush(routes, adapter_dir, sync_timeout)
        elif finetune == "full":
            self.pusher = NcclRoutePush(routes, sync_timeout)
        if check:
            check_server(self.client, self.base_url, model=model, finetune=finetune,
                         lora_rank=lora_rank, enable_sleep=enable_sleep)

    def request_body(self, request: GenerationRequest, sampling: SamplingConfig) -> dict[str, Any]:
        """The ``/v1/completions`` body: every field that changes sampling, explicit."""
        if sampling.top_p < 1.0:
            raise ConfigError(
                "vLLM reports log-probabilities renormalised over the top-p nucleus, "
                "which the trainer does not compute: use top_p = 1 with vLLM engines"
            )
        return {
            "model": self.model,
            "prompt": list(request.prompt_ids),
            "max_tokens": request.max_tokens,
            "n": 1,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": 0,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "min_tokens": 0,
            "ignore_eos": True,
            "stop": list(sampling.stop),
            "stop_token_ids": list(sampling.stop_token_ids),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "seed": request.seed,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "echo": False,
            "stream": False,
        }

    def _one(self, request: GenerationRequest, sampling: SamplingConfig) -> Completion:
        resp = self.client.post(f"{self.base_url}/v1/completions",
                                json=self.request_body(request, sampling))
        if resp.status_code >= 500:
            # A request that failed inside the engine (finish reason "error") reaches the
            # client as a 500 (vllm/entrypoints/openai/completion/serving.py): that sample is
            # lost, not the batch, so it comes back aborted and the rollout masks it.
            return Completion([], [], "abort", {"error": f"vLLM server answered "
                                                f"{resp.status_code}: {resp.text[:300]}"})
        if resp.status_code >= 400:
            raise EngineError(f"vLLM server answered {resp.status_code}: {resp.text[:300]}")
        choices = resp.json().get("choices") or []
        if len(choices) != 1:
            raise EngineError(f"vLLM server returned {len(choices)} choices for n=1")
        return parse_choice(choices[0])

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[Completion]:
        """Send every request concurrently; results come back in order."""
        if not requests:
            return []
        if self._asleep:
            self.wake_up()
        if self._weights_dropped:
            raise EngineError("the server dropped its weights (sleep level 2); push weights "
                              "(update_weights) before generating")
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(requests))) as pool:
            return list(pool.map(lambda r: self._one(r, sampling), requests))

    def update_weights(self, model: Any) -> None:
        """Push ``model`` as version ``policy_version + 1`` (see :mod:`.vllm_push`)."""
        version = self.policy_version + 1
        if self.pusher is None:
            raise WeightSyncError("this engine was built to generate only (finetune=None)")
        if self._asleep:
            # Both before the push: the push ends with /resume, and a scheduler resumed
            # over an unmapped KV cache must never run (vllm/v1/engine/core.py wake_up).
            self._post("wake_up", params={"tags": "weights"})
            self._post("wake_up", params={"tags": "kv_cache"})
            self._asleep = False
        self.pusher.push(model, version)
        if isinstance(self.pusher, LoraAdapterPush) and self.pusher.current is not None:
            self.model = self.pusher.current
        self._weights_dropped = False
        self.policy_version = version

    def sleep(self) -> None:
        """Free the server's GPU memory while the trainer steps (if sleep is enabled)."""
        if self.enable_sleep and not self._asleep:
            self._post("sleep", params={"level": self.sleep_level})
            self._asleep = True

    def wake_up(self) -> None:
        """Undo :meth:`sleep`; after level 2 the weights still need a push."""
        if self._asleep:
            self._post("wake_up")
            self._asleep = False
            self._weights_dropped = self.sleep_level == 2

    def close(self) -> None:
        """Unload adapters / tear down the NCCL group."""
        if self.pusher is not None:
            self.pusher.close()

    def _post(self, path: str, params: Any = None) -> None:
        resp = self.client.post(f"{self.base_url}/{path}", params=params)
        if resp.status_code >= 400:
            raise EngineError(f"POST /{path} answered {resp.status_code}: {resp.text[:300]}")


def parse_choice(choice: dict[str, Any]) -> Completion:
    """Turn one ``CompletionResponseChoice`` into a :class:`Completion`.

    Raises:
        EngineError: the body lacks token ids, its lists disagree in length, or the
            finish reason is not one vLLM 0.33 defines (``error`` and ``repetition``
            become ``abort``, with the reason in ``extra["error"]``).
    """
    lp = choice.get("logprobs") or {}
    ids = choice.get("token_ids")
    if ids is None:
        ids = [_token_id(t) for t in lp.get("tokens") or []]
    raw = list(lp.get("token_logprobs") or [])
    if len(raw) != len(ids):
        raise EngineError(f"vLLM returned {len(ids)} token ids but {len(raw)} log-probabilities")
    reason = choice.get("finish_reason")
    extra: dict[str, Any] = {}
    finish: FinishReason
    if reason in ("stop", "length", "abort"):
        finish = reason
    elif reason in _FAILED:  # vllm/v1/engine/__init__.py: FINISH_REASON_STRINGS
        finish = "abort"
        extra["error"] = f"vLLM finished the request with {reason!r}"
    else:
        raise EngineError(f"vLLM finished a request with {reason!r} "
                          f"(stop_reason {choice.get('stop_reason')!r})")
    missing = [i for i, x in enumerate(raw) if x is None]
    floored = [i for i, x in enumerate(raw) if x is not None and float(x) <= LOGPROB_FLOOR]
    logprobs = [-math.inf if x is None or float(x) <= LOGPROB_FLOOR else float(x) for x in raw]
    if missing or floored:
        finish = "abort"
        extra["error"] = (
            f"vLLM reported no log-probability for tokens {missing[:5]} and a clamped "
            f"one (<= {LOGPROB_FLOOR}) for tokens {floored[:5]}: the sample cannot be "
            "weighted, so it is masked"
        )
    if choice.get("finish_reason") == "abort":
        extra.setdefault("error", "vLLM aborted the request")
    if choice.get("stop_reason") is not None:
        extra["stop_reason"] = choice["stop_reason"]
    return Completion(token_ids=[int(i) for i in ids], logprobs=logprobs,
                      finish_reason=finish, extra=extra)


def check_server(
    client: Any, base_url: str, *, model: str, finetune: str | None, lora_rank: int,
    enable_sleep: bool,
) -> dict[str, Any]:
    """Verify the server was started the way the learner needs; returns its config.

    Raises:
        EngineMisconfigured: every missing flag, each with the fix.
    """
    base = base_url.rstrip("/")
    try:
        resp = client.get(f"{base}/server_info", params={"config_format": "json"})
    except Exception as exc:
        raise EngineMisconfigured(f"no vLLM server answers at {base} ({exc}); "
                                  f"{_SERVE_HINT}") from exc
    if resp.status_code == 404:
        raise EngineMisconfigured(
            f"{base} has no /server_info: the server runs without VLLM_SERVER_DEV_MODE=1, "
            f"so the sleep and weight-transfer routes are missing too; {_SERVE_HINT}")
    if resp.status_code >= 400:
        raise EngineMisconfigured(f"{base}/server_info answered {resp.status_code}")
    info = resp.json()
    cfg, env = info.get("vllm_config") or {}, info.get("vllm_env") or {}
    if not isinstance(cfg, dict):
        raise EngineMisconfigured("/server_info returned the text form of the config; "
                                  "this vLLM is outside the supported range (>=0.33,<0.34)")
    mc = cfg.get("model_config") or {}
    problems = []
    if mc.get("logprobs_mode") != "processed_logprobs":
        problems.append(f"logprobs_mode is {mc.get('logprobs_mode')!r}: the server reports "
                        "untempered log-probabilities (--logprobs-mode processed_logprobs)")
    if mc.get("generation_config") != "vllm":
        problems.append(f"generation_config is {mc.get('generation_config')!r}: the model's "
                        "generation_config.json adds stop ids and sampling defaults "
                        "(--generation-config vllm)")
    if finetune == "lora":
        lora = cfg.get("lora_config")
        if not lora:
            problems.append("LoRA is off (--enable-lora)")
        elif int(lora.get("max_lora_rank") or 0) < lora_rank:
            problems.append(f"--max-lora-rank {lora.get('max_lora_rank')} is below the run's "
                            f"lora_r {lora_rank}")
        if not _truthy(env.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")):
            problems.append("adapters cannot be loaded at run time "
                            "(VLLM_ALLOW_RUNTIME_LORA_UPDATING=1)")
    elif finetune == "full":
        wt = cfg.get("weight_transfer_config") or {}
        if wt.get("backend") != "nccl":
            problems.append("weight transfer is not set up for full fine-tuning "
                            "(--weight-transfer-config '{\"backend\": \"nccl\"}')")
    if enable_sleep and not mc.get("enable_sleep_mode"):
        problems.append("sleep mode is off (--enable-sleep-mode)")
    try:
        models = client.get(f"{base}/v1/models").json().get("data", [])
    except Exception:  # reported below as "not served"
        models = []
    served = [m.get("id") for m in models]
    if model not in served:
        problems.append(f"it does not serve {model!r} (it serves {served})")
    if problems:
        raise EngineMisconfigured(f"the vLLM server at {base} is not set up for training: "
                                  + "; ".join(problems) + f". {_SERVE_HINT}")
    return cfg


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true")


def _token_id(token: str) -> int:
    """Parse ``token_id:123`` (``return_tokens_as_token_ids``)."""
    prefix = "token_id:"
    if not token.startswith(prefix):
        raise EngineError("the server returned text tokens and no token_ids; "
                          "this vLLM is outside the supported range (>=0.33,<0.34)")
    return int(token[len(prefix):])


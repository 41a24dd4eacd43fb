"""vLLM 0.33.0's HTTP surface, as far as gymhub uses it, behind ``httpx.MockTransport``.

Only the wire is faked (the real boundary of the server engine); the shapes are taken
from vLLM's source: ``CompletionResponse`` / ``CompletionResponseChoice`` /
``CompletionLogProbs`` (``vllm/entrypoints/openai/completion/protocol.py``), the
clamping in ``_create_completion_logprobs`` (``.../completion/serving.py``), the
server-info JSON (``vllm/entrypoints/serve/dev/server_info/api_router.py``), the LoRA,
sleep and weight-transfer routes (``vllm/entrypoints/serve/lora/api_router.py``,
``.../dev/sleep/api_router.py``, ``vllm/entrypoints/rl/online/api_router.py``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

Generate = Callable[[dict[str, Any]], tuple[list[int], list[float | None], str]]


def completion_body(
    model: str, prompt: list[int], ids: list[int], logprobs: list[float | None], finish: str,
    stop_reason: int | str | None = None, *, with_token_ids: bool = True,
) -> dict[str, Any]:
    """A ``CompletionResponse`` as vLLM serialises it for ``n=1, logprobs=0``."""
    shown = [None if x is None else max(x, -9999.0) for x in logprobs]
    tokens = [f"token_id:{i}" for i in ids]
    offsets = [sum(len(t) for t in tokens[:k]) for k in range(len(tokens))]
    choice = {
        "index": 0,
        "text": "".join(tokens),
        "logprobs": {
            "text_offset": offsets,
            "token_logprobs": shown,
            "tokens": tokens,
            "top_logprobs": [None if x is None else {t: x} for t, x in zip(tokens, shown,
                                                                            strict=True)],
        },
        "finish_reason": finish,
        "stop_reason": stop_reason,
        "token_ids": ids if with_token_ids else None,
        "prompt_logprobs": None,
        "prompt_token_ids": prompt if with_token_ids else None,
        "routed_experts": None,
        "weight_versions": None,
    }
    return {
        "id": "cmpl-0123",
        "object": "text_completion",
        "created": 1764633600,
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(ids),
                  "completion_tokens": len(ids), "prompt_tokens_details": None},
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


class FakeVLLM:
    """State and routes of one server; ``calls`` records ``(method, path, query, body)``."""

    def __init__(
        self,
        model: str = "tiny",
        *,
        generate: Generate | None = None,
        dev_mode: bool = True,
        logprobs_mode: str = "processed_logprobs",
        generation_config: str = "vllm",
        lora_rank: int | None = 16,
        runtime_lora: bool = True,
        weight_transfer: str | None = None,
        sleep_mode: bool = False,
        world_size: int = 1,
    ) -> None:
        self.model = model
        self.generate = generate or (lambda body: ([5, 6], [-0.5, -1.25], "stop"))
        self.dev_mode = dev_mode
        self.logprobs_mode = logprobs_mode
        self.generation_config = generation_config
        self.lora_rank = lora_rank
        self.runtime_lora = runtime_lora
        self.weight_transfer = weight_transfer
        self.sleep_mode = sleep_mode
        self.world_size = world_size
        self.adapters: dict[str, str] = {}
        self.weight_version: str | None = None
        self.echo_version: str | None = None  # a server that mislabels its weights
        self.sleeping = False
        self.paused = False
        self.calls: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.hang_on: set[str] = set()
        self.reset_ok = True
        self.release = threading.Event()

    def server_info(self) -> dict[str, Any]:
        """``/server_info?config_format=json``: the pydantic dump of ``VllmConfig``."""
        lora = None if self.lora_rank is None else {
            "max_lora_rank": self.lora_rank, "max_loras": 1, "fully_sharded_loras": False,
            "max_cpu_loras": None, "lora_dtype": "auto", "default_mm_loras": None,
        }
        wt = None if self.weight_transfer is None else {"backend": self.weight_transfer}
        env = {"VLLM_SERVER_DEV_MODE": True, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": self.runtime_lora}
        return {
            "vllm_config": {
                "model_config": {
                    "model": self.model, "served_model_name": self.model,
                    "logprobs_mode": self.logprobs_mode,
                    "generation_config": self.generation_config,
                    "enforce_eager": True, "enable_sleep_mode": self.sleep_mode,
                    "dtype": "torch.bfloat16",
                },
                "cache_config": {"enable_prefix_caching": True},
                "lora_config": lora,
                "weight_transfer_config": wt,
            },
            "vllm_env": env,
            "system_env": {"os": "linux"},
        }

    def transport(self) -> httpx.MockTransport:
        """The transport to give an ``httpx.Client``."""
        return httpx.MockTransport(self.handle)

    def client(self) -> httpx.Client:
        """A client that talks to this server."""
        return httpx.Client(transport=self.transport())

    def paths(self) -> list[str]:
        """The paths called so far, in order."""
        return [path for _, path, _, _ in self.calls]

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        query = {k: request.url.params.get_list(k) for k in request.url.params}
        body = json.loads(request.content) if request.content else None
        self.calls.append((request.method, path, query, body))
        if path.lstrip("/") in self.hang_on:
            self.release.wait(10)
            return httpx.Response(500, json={"error": "released"})
        route = _ROUTES.get((request.method, path))
        if route is None or (path in _DEV_ROUTES and not self.dev_mode) or (
                path in _LORA_ROUTES and not self.runtime_lora):
            return httpx.Response(404, json={"detail": "Not Found"})
        result: httpx.Response = route(self, query, body)
        return result

    # --- routes
    def _completions(self, query: dict[str, Any], body: Any) -> httpx.Response:
        if self.paused:
            return httpx.Response(503, json={"error": "paused"})
        if body["model"] != self.model and body["model"] not in self.adapters:
            return _error(404, f"The model `{body['model']}` does not exist.")
        result = self.generate(body)
        if result is None:  # the engine failed the request: vLLM answers 500
            return _error(500, "EngineGenerateError: the request failed in the engine")
        ids, lps, finish = result
        return httpx.Response(200, json=completion_body(
            body["model"], body["prompt"], ids, lps, finish,
            with_token_ids=bool(body.get("return_token_ids"))))

    def _models(self, query: dict[str, Any], body: Any) -> httpx.Response:
        names = [self.model, *self.adapters]
        return httpx.Response(200, json={"object": "list", "data": [
            {"id": n, "object": "model", "created": 0, "owned_by": "vllm", "root": n,
             "parent": None if n == self.model else self.model, "max_model_len": 2048,
             "permission": []} for n in names]})

    def _server_info(self, query: dict[str, Any], body: Any) -> httpx.Response:
        return httpx.Response(200, json=self.server_info())

    def _load_lora(self, query: dict[str, Any], body: Any) -> httpx.Response:
        name = body["lora_name"]
        if name in self.adapters:
            return _error(400, f"The lora adapter '{name}' has already been loaded.")
        self.adapters[name] = body["lora_path"]
        return httpx.Response(200, text=f"Success: LoRA adapter '{name}' added successfully.")

    def _unload_lora(self, query: dict[str, Any], body: Any) -> httpx.Response:
        name = body["lora_name"]
        if self.adapters.pop(name, None) is None:
            return _error(404, f"The lora adapter '{name}' cannot be found.")
        return httpx.Response(200, text=f"Success: LoRA adapter '{name}' removed successfully.")

    def _sleep(self, query: dict[str, Any], body: Any) -> httpx.Response:
        self.sleeping = True
        return httpx.Response(200, json={"status": "sleeping",
                                         "level": int(query.get("level", ["1"])[0])})

    def _wake(self, query: dict[str, Any], body: Any) -> httpx.Response:
        tags = query.get("tags") or None
        if tags is None or "kv_cache" in tags:
            self.sleeping = False
        return httpx.Response(200, json={"status": "sleeping" if self.sleeping else "awake",
                                         "tags": tags})

    def _ok(self, query: dict[str, Any], body: Any) -> httpx.Response:
        return httpx.Response(200, json={"message": "ok"})

    def _reset_prefix_cache(self, query: dict[str, Any], body: Any) -> httpx.Response:
        return httpx.Response(200, json={"success": self.reset_ok})

    def _pause(self, query: dict[str, Any], body: Any) -> httpx.Response:
        self.paused = True
        return httpx.Response(200, json={"status": "paused"})

    def _resume(self, query: dict[str, Any], body: Any) -> httpx.Response:
        self.paused = False
        return httpx.Response(200, json={"status": "resumed"})

    def _finish(self, query: dict[str, Any], body: Any) -> httpx.Response:
        self.weight_version = (body or {}).get("weight_version")
        return httpx.Response(200, json={"message": "Weight update finished"})

    def _weight_info(self, query: dict[str, Any], body: Any) -> httpx.Response:
        shown = self.echo_version if self.echo_version is not None else self.weight_version
        return httpx.Response(200, json={"weight_version": shown})

    def _world_size(self, query: dict[str, Any], body: Any) -> httpx.Response:
        return httpx.Response(200, json={"world_size": self.world_size})


def _error(status: int, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": message, "type": "BadRequestError",
                                                  "param": None, "code": status}})


_ROUTES: dict[tuple[str, str], Callable[..., httpx.Response]] = {
    ("POST", "/v1/completions"): FakeVLLM._completions,
    ("GET", "/v1/models"): FakeVLLM._models,
    ("GET", "/server_info"): FakeVLLM._server_info,
    ("POST", "/v1/load_lora_adapter"): FakeVLLM._load_lora,
    ("POST", "/v1/unload_lora_adapter"): FakeVLLM._unload_lora,
    ("POST", "/sleep"): FakeVLLM._sleep,
    ("POST", "/wake_up"): FakeVLLM._wake,
    ("POST", "/reset_prefix_cache"): FakeVLLM._reset_prefix_cache,
    ("POST", "/pause"): FakeVLLM._pause,
    ("POST", "/resume"): FakeVLLM._resume,
    ("POST", "/init_weight_transfer_engine"): FakeVLLM._ok,
    ("POST", "/shutdown_weight_transfer_engine"): FakeVLLM._ok,
    ("POST", "/start_weight_update"): FakeVLLM._ok,
    ("POST", "/update_weights"): FakeVLLM._ok,
    ("POST", "/finish_weight_update"): FakeVLLM._finish,
    ("GET", "/weight_info"): FakeVLLM._weight_info,
    ("GET", "/get_world_size"): FakeVLLM._world_size,
}
_DEV_ROUTES = {p for _, p in _ROUTES} - {"/v1/completions", "/v1/models",
                                         "/v1/load_lora_adapter", "/v1/unload_lora_adapter"}
_LORA_ROUTES = {"/v1/load_lora_adapter", "/v1/unload_lora_adapter"}


class TrainerSideStandIn:
    """What vLLM's ``NCCLTrainerWeightTransferEngine.send_weights`` does over HTTP.

    NCCL cannot run without a GPU; the route calls are what the server sees
    (``vllm/distributed/weight_transfer/nccl_engine.py``), with ``update_weights``
    carrying the parameter metadata.
    """

    def __init__(self, client: Any, model: Any, delay: float = 0.0) -> None:
        self.client, self.model, self.delay = client, model, delay
        self.shut = False

    def send_weights(self) -> None:
        self.client.start_weight_update()
        names = [n for n, _ in self.model.named_parameters()]
        self.client.update_weights({"names": names, "dtype_names": ["float32"] * len(names),
                                    "shapes": [list(p.shape) for _, p in
                                               self.model.named_parameters()]})
        time.sleep(self.delay)
        self.client.finish_weight_update()

    def shutdown(self) -> None:
        self.shut = True

"""Weight pushes into a running vLLM server: LoRA adapters and vLLM's native NCCL routes.

Both are :class:`~gymhub.trainer.engines.weight_push.WeightPush` backends. Checked
against vLLM 0.33.0's source:

* LoRA: ``POST /v1/load_lora_adapter {lora_name, lora_path}`` and
  ``POST /v1/unload_lora_adapter {lora_name}``
  (``vllm/entrypoints/serve/lora/api_router.py``, ``.../lora/protocol.py``); the routes
  exist only with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``, and a name already loaded is
  refused with HTTP 400 (``vllm/entrypoints/openai/models/serving.py``). Adapter names
  carry a random per-process token, so a resumed run never collides with the names of
  the run it resumes; the previous adapter is unloaded and its files removed.
* Full weights: ``/pause`` → ``/start_weight_update`` → ``/update_weights`` (while
  the trainer broadcasts over NCCL) → ``/finish_weight_update {weight_version}`` →
  ``/reset_prefix_cache`` → ``/resume``, then ``GET /weight_info`` must echo the
  version (``vllm/entrypoints/rl/online/api_router.py``, registered only with
  ``VLLM_SERVER_DEV_MODE=1`` by ``vllm/entrypoints/launchers/api_server/routers.py``;
  the server needs ``--weight-transfer-config '{"backend": "nccl"}'``,
  ``vllm/v1/worker/gpu_worker.py``). The broadcast itself is vLLM's own trainer side,
  ``NCCLTrainerWeightTransferEngine`` over a ``WeightSource`` (:func:`cuda_source`)
  (``vllm/distributed/weight_transfer/nccl_engine.py``, ``.../base.py``), driven through
  :class:`RouteClient`, which is the structural ``VLLMWeightSyncClient`` of
  ``vllm/distributed/weight_transfer/clients.py`` with a timeout on every call.
"""

from __future__ import annotations

import secrets
import shutil
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gymhub.errors import WeightSyncError

from .weight_push import VersionGate, call_with_timeout

__all__ = ["LoraAdapterPush", "NcclRoutePush", "RouteClient"]


class RouteClient:
    """The server's weight-update routes over an ``httpx.Client``; non-2xx raises."""

    def __init__(self, client: Any, base_url: str, timeout: float) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        #: sent with ``/finish_weight_update`` (vLLM's trainer engine passes none)
        self.pending_version: str | None = None

    def post(self, path: str, json: Any = None, params: Any = None) -> Any:
        """POST; the JSON answer, the text of a plain one, or ``None`` when empty."""
        resp = self.client.post(
            f"{self.base_url}/{path.lstrip('/')}", json=json, params=params, timeout=self.timeout
        )
        if resp.status_code >= 400:
            raise WeightSyncError(f"POST /{path.lstrip('/')} answered {resp.status_code}: "
                                  f"{resp.text[:300]}")
        if not resp.content:
            return None
        if "json" in resp.headers.get("content-type", ""):
            return resp.json()
        return resp.text  # /v1/load_lora_adapter answers plain text ("Success: ...")

    def get(self, path: str) -> Any:
        """GET a JSON answer."""
        resp = self.client.get(f"{self.base_url}/{path.lstrip('/')}", timeout=self.timeout)
        if resp.status_code >= 400:
            raise WeightSyncError(f"GET /{path.lstrip('/')} answered {resp.status_code}: "
                                  f"{resp.text[:300]}")
        return resp.json()

    # --- the VLLMWeightSyncClient protocol (vllm/distributed/weight_transfer/base.py)
    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        """Have the server's workers join the NCCL group."""
        self.post("init_weight_transfer_engine", {"init_info": init_info})

    def shutdown_weight_transfer_engine(self) -> None:
        """Release the server's side of the group."""
        self.post("shutdown_weight_transfer_engine")

    def start_weight_update(self) -> None:
        """Begin a (layerwise) reload on the server."""
        self.post("start_weight_update")

    def update_weights(self, update_info: Any) -> None:
        """Receive the broadcast (blocks until every tensor has arrived)."""
        self.post("update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """Finalise the reload and label the new weights."""
        version = weight_version if weight_version is not None else self.pending_version
        self.post("finish_weight_update", {"weight_version": version} if version else None)


class LoraAdapterPush:
    """Publish the peft adapter to ``adapter_dir`` and load it under a fresh name.

    Args:
        routes: the server.
        adapter_dir: a directory the server can read (same machine or shared disk).
        timeout: seconds for one whole push.
    """

    def __init__(self, routes: RouteClient, adapter_dir: str | Path, timeout: float) -> None:
        self.routes = routes
        self.adapter_dir = Path(adapter_dir)
        self.timeout = timeout
        self.token = secrets.token_hex(4)
        self.gate = VersionGate()
        #: the adapter requests must name; ``None`` until the first push
        self.current: str | None = None

    def name_for(self, version: int) -> str:
        """``gymhub-<token>-v<version>``: unique across resumes of one run."""
        return f"gymhub-{self.token}-v{version}"

    def push(self, model: Any, version: int) -> None:
        """Save, load, confirm in ``/v1/models``, then unload the previous adapter."""
        if not hasattr(model, "peft_config"):
            raise WeightSyncError("LoRA weight push needs a peft model (finetune = 'lora')")
        self.gate.check(version)
        name = self.name_for(version)
        path = self.adapter_dir / name

        def run() -> None:
            model.save_pretrained(str(path))
            self.routes.post("v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
            served = {m.get("id") for m in self.routes.get("v1/models").get("data", [])}
            if name not in served:
                raise WeightSyncError(f"the server accepted adapter {name} but does not list it")

        call_with_timeout(run, self.timeout, f"LoRA push of policy version {version}")
        previous, self.current = self.current, name
        self.gate.delivered(version)
        if previous is not None:
            self._drop(previous)

    def _drop(self, name: str) -> None:
        try:
            self.routes.post("v1/unload_lora_adapter", {"lora_name": name})
        except WeightSyncError as exc:
            if " 404:" not in str(exc):  # already gone is fine; anything else is a leak
                raise
        shutil.rmtree(self.adapter_dir / name, ignore_errors=True)

    def close(self) -> None:
        """Unload the current adapter."""
        if self.current is not None:
            name, self.current = self.current, None
            self._drop(name)


class NcclRoutePush:
    """Full fine-tuning: broadcast every parameter to the server over NCCL.

    The NCCL group (this process as rank 0, the server's workers after it) is set up
    on the first push. ``address`` is where the server reaches this process; by
    default the local address that routes to the server's host.
    """

    def __init__(
        self, routes: RouteClient, timeout: float, *, address: str | None = None,
        port: int | None = None,
    ) -> None:
        self.routes = routes
        self.timeout = timeout
        self.address = address
        self.port = port
        self.gate = VersionGate()
        self._engine: Any = None
        self._broken = False

    def _connect(self, model: Any) -> Any:
        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerInitInfo,
            NCCLTrainerWeightTransferEngine,
        )

        workers = int(self.routes.get("get_world_size")["world_size"])
        info = NCCLTrainerInitInfo(
            master_address=self.address or local_address_towards(self.routes.base_url),
            master_port=self.port or free_port(),
            world_size=1 + workers,
            rank=0,
        )
        return NCCLTrainerWeightTransferEngine.trainer_init(
            info, client=self.routes, source=cuda_source(model)
        )

    def push(self, model: Any, version: int) -> None:
        """Pause, broadcast, label, resume, drop the prefix cache, confirm the label."""
        if self._broken:
            raise WeightSyncError("an earlier weight push failed; restart the vLLM server")
        if hasattr(model, "peft_config"):
            raise WeightSyncError("the NCCL push sends full weights; LoRA uses adapters")
        self.gate.check(version)

        def run() -> None:
            if self._engine is None:
                self._engine = self._connect(model)
            self.routes.post("pause", params={"mode": "wait"})
            self.routes.pending_version = str(version)
            self._engine.send_weights()
            # /pause already cleared the caches (vllm/v1/engine/async_llm.py pause_generation,
            # clear_cache=True); this reset is the belt to those braces, sent while still
            # paused because it fails while blocks are held by running requests
            # (vllm/entrypoints/serve/dev/cache/api_router.py), and it must not fail quietly.
            reset = self.routes.post("reset_prefix_cache")
            if isinstance(reset, dict) and reset.get("success") is False:
                raise WeightSyncError("the server could not reset its prefix cache after the "
                                      "weight update: cached prefixes may hold old KV values")
            self.routes.post("resume")
            echoed = self.routes.get("weight_info").get("weight_version")
            if echoed != str(version):
                raise WeightSyncError(f"the server reports weight version {echoed!r} after "
                                      f"receiving version {version}")

        try:
            call_with_timeout(run, self.timeout, f"NCCL push of policy version {version}")
        except WeightSyncError:
            self._broken = True
            raise
        self.gate.delivered(version)

    def close(self) -> None:
        """Tear down the NCCL group on both sides."""
        engine, self._engine = self._engine, None
        if engine is not None and not self._broken:
            self.routes.shutdown_weight_transfer_engine()
            engine.shutdown()


def cuda_source(model: Any) -> Any:
    """A vLLM ``WeightSource`` over ``model.named_parameters()``, sent from the GPU.

    vLLM's own ``ModuleSource`` yields the parameters where they are; NCCL sends only
    CUDA tensors, and the learner may hold its model on the CPU. Names, dtypes and
    shapes are the checkpoint's, which the server's ``load_weights`` maps.
    """
    from functools import cached_property

    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class _Source(WeightSource):  # type: ignore[misc]
        @cached_property
        def metadata(self) -> list[Any]:
            return [ParamMeta(n, p.dtype, tuple(p.shape)) for n, p in model.named_parameters()]

        def iter_full(self) -> Any:
            for name, param in model.named_parameters():
                yield name, param.detach().to("cuda", non_blocking=True)

    return _Source()


def local_address_towards(url: str) -> str:
    """This machine's address on the route to ``url``'s host (no packet is sent)."""
    host = urlsplit(url).hostname or "127.0.0.1"
    if host in ("localhost", "127.0.0.1", "::1"):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            return str(s.getsockname()[0])
    except OSError as exc:
        raise WeightSyncError(f"cannot find this machine's address towards {host}: {exc}") from exc


def free_port() -> int:
    """A TCP port free right now on this machine."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])

"""The vLLM server engine against a real ``gymhub vllm-serve`` on a GPU.

One server per weight-update mode for the whole module. Full fine-tuning pushes over
NCCL, which cannot pair two ranks on one GPU: it needs a second GPU for the server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pytest.importorskip("vllm")
httpx = pytest.importorskip("httpx")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from gymhub.errors import EngineMisconfigured  # noqa: E402
from gymhub.trainer.engines import GenerationRequest, SamplingConfig  # noqa: E402
from gymhub.trainer.engines.vllm_server import VLLMServerEngine, check_server  # noqa: E402

from .vllm_gpu_util import (  # noqa: E402
    close_enough,
    forward_logprobs,
    perturbed,
    vllm_ready_model,
)

PROMPT = [5, 17, 42, 99, 7, 3]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _start(path: Path, config: str, gpu: str | None) -> tuple[subprocess.Popen[bytes], str]:
    cfg = path / "train.toml"
    cfg.write_text(config)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    log = open(path / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "gymhub.cli", "vllm-serve", str(path), "--config", str(cfg),
         "--port", str(port), "--gpu-memory-utilization", "0.25", "--", "--dtype", "bfloat16"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm-serve exited: {(path / 'server.log').read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(2)
    proc.kill()
    raise RuntimeError("vllm-serve did not come up within 300 s")


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("vllm-server")
    model = vllm_ready_model(len(tokenizer))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    proc, url = _start(path, "lora_r = 8\nvllm_enable_sleep_mode = true\n"
                             "max_context_tokens = 512\n", None)
    yield url, str(path), model.cuda()
    proc.terminate()
    proc.wait(60)


def _engine(url, path, tmp_path, **kw):
    return VLLMServerEngine(url, path, adapter_dir=str(tmp_path / "adapters"), lora_rank=8,
                            enable_sleep=True, sync_timeout=120, **kw)


def _check(engine, model, temperature=0.8):
    out = engine.generate([GenerationRequest(PROMPT, 8, seed=1)],
                          SamplingConfig(temperature=temperature))[0]
    assert len(out.token_ids) == 8 and out.finish_reason == "length"
    want = forward_logprobs(model, PROMPT, out.token_ids, temperature)
    assert close_enough(out.logprobs, want), (out.logprobs, want)


def test_started_right_and_tempered_logprobs(lora_server, tmp_path):
    url, path, model = lora_server
    engine = _engine(url, path, tmp_path)
    _check(engine, model)
    _check(engine, model, temperature=0.0)
    with pytest.raises(EngineMisconfigured, match="max-lora-rank"):
        check_server(httpx.Client(), url, model=path, finetune="lora", lora_rank=64,
                     enable_sleep=True)


def test_lora_updates_unload_and_resume_without_collision(lora_server, tmp_path):
    from gymhub.trainer.policy import apply_lora

    url, path, model = lora_server
    peft_model = apply_lora(model, r=8, alpha=16, dropout=0.0,
                            target_modules=["q_proj", "v_proj"])
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    engine = _engine(url, path, tmp_path)
    engine.update_weights(peft_model)
    first = engine.model
    _check(engine, peft_model)
    engine.update_weights(peft_model)
    served = {m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]}
    assert first not in served and engine.model in served
    resumed = _engine(url, path, tmp_path)
    resumed.policy_version = 1  # a resumed run pushes version 2 again: no HTTP 400
    resumed.update_weights(peft_model)
    _check(resumed, peft_model)
    engine.sleep()  # level 1 keeps the base weights
    _check(engine, peft_model)
    resumed.close()
    engine.close()
    peft_model.unload()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL push needs a second GPU")
def test_full_weight_push_over_nccl(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("vllm-full")
    model = vllm_ready_model(len(tokenizer))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    proc, url = _start(path, 'finetune = "full"\nvllm_enable_sleep_mode = true\n'
                             "max_context_tokens = 512\n", "1")
    try:
        model = model.cuda()
        engine = VLLMServerEngine(url, str(path), finetune="full", enable_sleep=True,
                                  sync_timeout=120)
        engine.policy_version = 9  # a resume pushes the checkpoint's weights first
        engine.update_weights(perturbed(model, 1))
        assert httpx.get(f"{url}/weight_info").json()["weight_version"] == "10"
        _check(engine, model)
        engine.sleep()  # level 2: the weights go, the next push brings them
        engine.update_weights(perturbed(model, 2))
        _check(engine, model)
        engine.close()
    finally:
        proc.terminate()
        proc.wait(60)

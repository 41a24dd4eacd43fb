"""The vLLM server engine on the wire: request bodies, response parsing, start-up checks,
LoRA adapters and NCCL-route pushes, sleep, against vLLM 0.33.0's HTTP shapes."""

from __future__ import annotations

import math
import time

import pytest

httpx = pytest.importorskip("httpx")
torch = pytest.importorskip("torch")

from gymhub.errors import (  # noqa: E402
    ConfigError,
    EngineError,
    EngineMisconfigured,
    WeightSyncError,
)
from gymhub.trainer.engines import GenerationRequest, SamplingConfig  # noqa: E402
from gymhub.trainer.engines.vllm_server import VLLMServerEngine, parse_choice  # noqa: E402
from gymhub.trainer.engines.weight_push import VersionGate, call_with_timeout  # noqa: E402

from .fake_vllm import FakeVLLM, TrainerSideStandIn, completion_body  # noqa: E402

URL = "http://vllm.test"

# vLLM 0.33's CompletionRequest._DEFAULT_SAMPLING_PARAMS: the fields a request that
# leaves them out gets from generation_config.json instead.
GENERATION_CONFIG_FIELDS = {"repetition_penalty", "presence_penalty", "frequency_penalty",
                            "temperature", "top_p", "top_k", "min_p"}


def _engine(server: FakeVLLM, tmp_path, **kw) -> VLLMServerEngine:
    kw.setdefault("adapter_dir", str(tmp_path / "adapters"))
    return VLLMServerEngine(URL, server.model, client=server.client(), **kw)


def _choice(ids, lps, finish, **kw):
    return completion_body("tiny", [1, 2], ids, lps, finish, **kw)["choices"][0]


# ------------------------------------------------------------------ requests
def test_every_sampling_field_is_sent_explicitly(tmp_path):
    server = FakeVLLM()
    engine = _engine(server, tmp_path)
    out = engine.generate([GenerationRequest([1, 2, 3], 4, seed=7)],
                          SamplingConfig(temperature=0.7, stop=("</s>",), stop_token_ids=(9,)))
    body = server.calls[-1][3]
    assert {k for k, v in body.items() if v is not None} >= GENERATION_CONFIG_FIELDS
    assert body["temperature"] == 0.7 and body["top_p"] == 1.0 and body["top_k"] == 0
    assert body["repetition_penalty"] == 1.0 and body["min_p"] == 0.0
    assert body["ignore_eos"] is True and body["stop_token_ids"] == [9]
    assert body["stop"] == ["</s>"] and body["include_stop_str_in_output"] is True
    assert body["logprobs"] == 0 and body["return_token_ids"] is True
    assert body["prompt"] == [1, 2, 3] and body["seed"] == 7 and body["max_tokens"] == 4
    assert out[0].token_ids == [5, 6] and out[0].logprobs == [-0.5, -1.25]
    assert out[0].finish_reason == "stop"


def test_top_p_below_one_is_refused(tmp_path):
    engine = _engine(FakeVLLM(), tmp_path)
    with pytest.raises(ConfigError, match="top_p = 1"):
        engine.generate([GenerationRequest([1], 2)], SamplingConfig(top_p=0.9))


def test_config_refuses_top_p_below_one_for_vllm_engines():
    from gymhub.trainer.config import GRPOConfig

    with pytest.raises(ConfigError, match="top_p"):
        GRPOConfig(engine="vllm", top_p=0.9)
    assert GRPOConfig(engine="transformers", top_p=0.9).top_p == 0.9


# ------------------------------------------------------------------ parsing
def test_token_ids_come_from_return_token_ids_or_token_id_strings():
    c = parse_choice(_choice([11, 12], [-0.1, -0.2], "length"))
    assert c.token_ids == [11, 12] and c.finish_reason == "length"
    fallback = parse_choice(_choice([11, 12], [-0.1, -0.2], "stop", with_token_ids=False))
    assert fallback.token_ids == [11, 12]
    text = _choice([11], [-0.1], "stop", with_token_ids=False)
    text["logprobs"]["tokens"] = ["hello"]
    with pytest.raises(EngineError, match="text tokens"):
        parse_choice(text)


def test_abort_is_not_a_stop():
    c = parse_choice(_choice([11], [-0.1], "abort"))
    assert c.finish_reason == "abort" and "aborted" in c.extra["error"]


@pytest.mark.parametrize("bad", [None, -math.inf, -12000.0])
def test_missing_or_clamped_logprobs_mask_the_sample(bad):
    choice = _choice([11, 12], [-0.1, bad], "stop")
    assert choice["logprobs"]["token_logprobs"][1] in (None, -9999.0)  # vLLM's clamp
    c = parse_choice(choice)
    assert c.finish_reason == "abort" and c.logprobs[0] == -0.1
    assert c.logprobs[1] == -math.inf and "masked" in c.extra["error"]


def test_failed_finish_reasons_mask_and_unknown_ones_and_ragged_lists_raise():
    for failed in ("error", "repetition"):
        c = parse_choice(_choice([11], [-0.1], failed))
        assert c.finish_reason == "abort" and repr(failed) in c.extra["error"]
    with pytest.raises(EngineError, match="'weird'"):
        parse_choice(_choice([11], [-0.1], "weird"))
    ragged = _choice([11, 12], [-0.1, -0.2], "stop")
    ragged["token_ids"] = [11]
    with pytest.raises(EngineError, match="1 token ids but 2"):
        parse_choice(ragged)


def test_aborted_turn_masks_its_trajectory(tokenizer):
    import asyncio

    from gymhub.trainer.backends import InProcessBackend
    from gymhub.trainer.chat import ChatRenderer
    from gymhub.trainer.parsers import HermesParser
    from gymhub.trainer.rollout import Budgets, run_group_batch

    server = FakeVLLM(generate=lambda body: ([tokenizer.eos_token_id], [-0.3], "abort"))
    engine = VLLMServerEngine(URL, "tiny", client=server.client(), adapter_dir="unused")
    trajs = asyncio.run(run_group_batch(
        backend=InProcessBackend(), engine=engine, renderer=ChatRenderer(tokenizer),
        parser=HermesParser(), sampling=SamplingConfig(), budgets=Budgets(),
        tasks=[("echo-v0", "echo-0000")], group_size=2, seed=0))
    assert all(t.errored and "GenerationAborted" in (t.error or "") for t in trajs)


# ------------------------------------------------------------------ start-up
def test_a_server_started_by_vllm_serve_passes(tmp_path):
    _engine(FakeVLLM(), tmp_path)
    _engine(FakeVLLM(weight_transfer="nccl", lora_rank=None), tmp_path, finetune="full")


def test_missing_flags_are_named_together(tmp_path):
    server = FakeVLLM(logprobs_mode="raw_logprobs", generation_config="auto", lora_rank=8,
                      runtime_lora=False)
    with pytest.raises(EngineMisconfigured) as err:
        _engine(server, tmp_path, lora_rank=16, enable_sleep=True)
    msg = str(err.value)
    for fix in ("--logprobs-mode processed_logprobs", "--generation-config vllm",
                "--max-lora-rank 8", "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1",
                "--enable-sleep-mode", "gymhub vllm-serve"):
        assert fix in msg
    assert isinstance(err.value, ConfigError)  # `gymhub train` reports it as a config error


def test_lora_off_full_without_nccl_and_wrong_model(tmp_path):
    with pytest.raises(EngineMisconfigured, match="--enable-lora"):
        _engine(FakeVLLM(lora_rank=None), tmp_path)
    with pytest.raises(EngineMisconfigured, match="weight-transfer-config"):
        _engine(FakeVLLM(), tmp_path, finetune="full")
    server = FakeVLLM(model="other")
    with pytest.raises(EngineMisconfigured, match="does not serve 'tiny'"):
        VLLMServerEngine(URL, "tiny", client=server.client(), adapter_dir="x")


def test_a_generate_only_engine_accepts_any_weight_mode(tmp_path, tiny_model):
    engine = VLLMServerEngine(URL, "tiny", client=FakeVLLM(lora_rank=None).client(),
                              finetune=None)
    assert engine.generate([GenerationRequest([1], 2)], SamplingConfig())[0].token_ids
    with pytest.raises(WeightSyncError, match="generate only"):
        engine.update_weights(tiny_model)


def test_without_dev_mode_the_check_says_so(tmp_path):
    with pytest.raises(EngineMisconfigured, match="VLLM_SERVER_DEV_MODE=1"):
        _engine(FakeVLLM(dev_mode=False), tmp_path)


def test_no_server_at_all_is_a_clear_error(tmp_path):
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(EngineMisconfigured, match="no vLLM server answers"):
        VLLMServerEngine(URL, "tiny", adapter_dir="x",
                         client=httpx.Client(transport=httpx.MockTransport(refuse)))


# ------------------------------------------------------------------ LoRA pushes
@pytest.fixture
def peft_model(tiny_model):
    pytest.importorskip("peft")
    from gymhub.trainer.policy import apply_lora

    return apply_lora(tiny_model, r=4, alpha=8, dropout=0.0, target_modules=["q_proj"])


def test_lora_pushes_rename_unload_and_clean_up(tmp_path, peft_model):
    server = FakeVLLM()
    engine = _engine(server, tmp_path)
    engine.update_weights(peft_model)
    first = engine.model
    assert engine.policy_version == 1 and first.endswith("-v1") and first in server.adapters
    engine.update_weights(peft_model)
    assert engine.policy_version == 2 and list(server.adapters) == [engine.model]
    assert not (tmp_path / "adapters" / first).exists()  # the old adapter's files are gone
    engine.generate([GenerationRequest([1], 2)], SamplingConfig())
    assert server.calls[-1][3]["model"] == engine.model
    engine.close()
    assert server.adapters == {}


def test_resumed_run_never_collides_with_loaded_names(tmp_path, peft_model):
    server = FakeVLLM()
    before = _engine(server, tmp_path)
    before.update_weights(peft_model)
    after = _engine(server, tmp_path)  # a resumed process, same server, same version
    after.update_weights(peft_model)
    assert after.model != before.model and after.model in server.adapters


def test_lora_push_needs_a_peft_model(tmp_path, tiny_model):
    with pytest.raises(WeightSyncError, match="peft"):
        _engine(FakeVLLM(), tmp_path).update_weights(tiny_model)


# ------------------------------------------------------------------ versions, timeouts
def test_versions_must_increase():
    gate = VersionGate()
    gate.check(5)  # the first push of a session resyncs to any version
    gate.delivered(5)
    for stale in (5, 4):
        with pytest.raises(WeightSyncError, match="strictly increase"):
            gate.check(stale)
    gate.check(6)


def test_a_hanging_push_fails_within_its_timeout():
    import threading

    release = threading.Event()
    t0 = time.perf_counter()
    with pytest.raises(WeightSyncError, match=r"within 0\.2s"):
        call_with_timeout(lambda: release.wait(10), 0.2, "test push")
    assert time.perf_counter() - t0 < 2
    release.set()
    with pytest.raises(WeightSyncError, match="ZeroDivisionError"):
        call_with_timeout(lambda: 1 / 0, 1, "bad push")


def _full_engine(server, tmp_path, model, timeout=5.0, **kw):
    engine = _engine(server, tmp_path, finetune="full", sync_timeout=timeout, **kw)
    pusher = engine.pusher
    pusher._engine = TrainerSideStandIn(pusher.routes, model)  # NCCL needs a GPU
    return engine


def test_full_push_follows_vllms_route_order_and_labels_the_version(tmp_path, tiny_model):
    server = FakeVLLM(weight_transfer="nccl", lora_rank=None)
    engine = _full_engine(server, tmp_path, tiny_model)
    engine.policy_version = 6  # a resume at version 7
    engine.update_weights(tiny_model)
    push = server.paths()[server.paths().index("/pause"):]
    assert push == ["/pause", "/start_weight_update", "/update_weights",
                    "/finish_weight_update", "/reset_prefix_cache", "/resume", "/weight_info"]
    assert server.calls[server.paths().index("/pause")][2] == {"mode": ["wait"]}
    assert server.weight_version == "7" and engine.policy_version == 7
    engine.policy_version = 3  # something rewound the counter: refused, not replayed
    with pytest.raises(WeightSyncError, match="strictly increase"):
        engine.update_weights(tiny_model)


def test_full_push_checks_the_servers_label(tmp_path, tiny_model):
    server = FakeVLLM(weight_transfer="nccl", lora_rank=None)
    server.echo_version = "0"
    engine = _full_engine(server, tmp_path, tiny_model)
    with pytest.raises(WeightSyncError, match="reports weight version '0'"):
        engine.update_weights(tiny_model)
    assert engine.policy_version == 0
    with pytest.raises(WeightSyncError, match="restart the vLLM server"):
        engine.update_weights(tiny_model)


def test_full_push_times_out_clearly(tmp_path, tiny_model):
    server = FakeVLLM(weight_transfer="nccl", lora_rank=None)
    server.hang_on.add("update_weights")
    engine = _full_engine(server, tmp_path, tiny_model, timeout=0.3)
    t0 = time.perf_counter()
    with pytest.raises(WeightSyncError, match=r"did not finish within 0\.3s"):
        engine.update_weights(tiny_model)
    assert time.perf_counter() - t0 < 3 and engine.policy_version == 0
    server.release.set()


# ------------------------------------------------------------------ sleep
def test_full_finetuning_sleeps_at_level_2_and_wakes_through_the_push(tmp_path, tiny_model):
    server = FakeVLLM(weight_transfer="nccl", lora_rank=None, sleep_mode=True)
    engine = _full_engine(server, tmp_path, tiny_model, enable_sleep=True)
    engine.sleep()
    assert server.calls[-1][2] == {"level": ["2"]} and server.sleeping
    engine.update_weights(tiny_model)
    wakes = [q for _, p, q, _ in server.calls if p == "/wake_up"]
    assert wakes == [{"tags": ["weights"]}, {"tags": ["kv_cache"]}] and not server.sleeping
    engine.sleep()
    with pytest.raises(EngineError, match="push weights"):
        engine.generate([GenerationRequest([1], 2)], SamplingConfig())


def test_lora_sleeps_at_level_1_and_generate_wakes(tmp_path):
    server = FakeVLLM(sleep_mode=True)
    engine = _engine(server, tmp_path, enable_sleep=True)
    engine.sleep()
    assert server.calls[-1][2] == {"level": ["1"]}
    engine.generate([GenerationRequest([1], 2)], SamplingConfig())
    assert "/wake_up" in server.paths() and not server.sleeping


def test_sleep_disabled_sends_nothing(tmp_path):
    server = FakeVLLM()
    engine = _engine(server, tmp_path)
    n = len(server.calls)
    engine.sleep()
    engine.wake_up()
    assert len(server.calls) == n


def test_an_engine_failure_aborts_that_sample_not_the_batch(tmp_path):
    server = FakeVLLM(generate=lambda body: None if body["seed"] == 2 else
                      ([5, 6], [-0.5, -1.25], "stop"))
    engine = _engine(server, tmp_path)
    outs = engine.generate([GenerationRequest([1], 2, seed=s) for s in (1, 2, 3)],
                           SamplingConfig())
    assert [o.finish_reason for o in outs] == ["stop", "abort", "stop"]
    assert "500" in outs[1].extra["error"] and outs[1].token_ids == []
    engine.model = "other"  # a model the server does not have: a 404, a real error
    with pytest.raises(EngineError, match="404"):
        engine.generate([GenerationRequest([1], 2)], SamplingConfig())


def test_a_failed_prefix_cache_reset_fails_the_push(tmp_path, tiny_model):
    server = FakeVLLM(weight_transfer="nccl", lora_rank=None)
    server.reset_ok = False
    engine = _full_engine(server, tmp_path, tiny_model)
    with pytest.raises(WeightSyncError, match="prefix cache"):
        engine.update_weights(tiny_model)


def test_vllm_engines_need_a_temperature_vllm_keeps():
    from gymhub.trainer.config import GRPOConfig

    for bad in (2.5, 0.005):
        with pytest.raises(ConfigError, match="temperature"):
            GRPOConfig(engine="vllm", temperature=bad)
    for good in (0.0, 0.01, 1.0, 2.0):
        assert GRPOConfig(engine="vllm", temperature=good).temperature == good
    assert GRPOConfig(engine="transformers", temperature=3.0).temperature == 3.0

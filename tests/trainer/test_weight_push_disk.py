"""The ``disk`` weight push: safetensors per version, announced by a version file written last."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from gymhub.errors import ConfigError, WeightSyncError  # noqa: E402
from gymhub.trainer.engines.weight_push import (  # noqa: E402
    WeightPush,
    WeightReceiver,
    make_weight_push,
    make_weight_receiver,
)
from gymhub.trainer.engines.weight_push_disk import (  # noqa: E402
    DiskPush,
    read_version,
    version_dir,
)
from gymhub.trainer.engines.weight_state import weights_checksum  # noqa: E402

from .weight_push_util import Net  # noqa: E402


def _pair(tmp_path):
    push = make_weight_push("disk", directory=tmp_path / "w", timeout=30.0)
    receiver = make_weight_receiver("disk", Net(seed=1), directory=tmp_path / "w")
    assert isinstance(push, WeightPush) and isinstance(receiver, WeightReceiver)
    return push, receiver


def test_each_pushed_version_reaches_the_receiver_and_old_ones_are_collected(tmp_path):
    push, receiver = _pair(tmp_path)
    net = Net(seed=0)
    assert receiver.poll() is None  # nothing announced yet
    push.push(net, 1)
    net.bump(0.25)
    push.push(net, 2)
    assert receiver.poll() == 2 and receiver.version == 2
    assert weights_checksum(receiver.model) == weights_checksum(net)
    assert receiver.model.head.weight is receiver.model.embed.weight  # still tied
    net.bump(0.25)
    push.push(net, 3)
    assert receiver.wait_for(3, timeout=5.0) == 3
    assert weights_checksum(receiver.model) == weights_checksum(net)
    kept = sorted(p.name for p in (tmp_path / "w").iterdir())
    assert kept == ["VERSION", "v00000002", "v00000003"]  # the last 2 versions
    with pytest.raises(WeightSyncError, match=r"version 4 did not appear .* holds 3"):
        receiver.wait_for(4, timeout=0.2)


def test_stale_versions_are_refused_on_both_sides(tmp_path):
    push, receiver = _pair(tmp_path)
    net = Net(seed=0)
    push.push(net, 5)
    with pytest.raises(WeightSyncError, match="refused"):
        push.push(net, 5)  # the sender's gate
    assert receiver.poll() == 5
    # a learner resumed from an older checkpoint announces a lower version
    make_weight_push("disk", directory=tmp_path / "w").push(net, 4)
    assert read_version(tmp_path / "w") == 4
    assert not version_dir(tmp_path / "w", 5).exists()  # the other run's newer version
    with pytest.raises(WeightSyncError, match="lower than version 5"):
        receiver.poll()
    assert receiver.version == 5


def test_a_version_half_written_is_never_loaded(tmp_path, monkeypatch):
    push, receiver = _pair(tmp_path)
    net = Net(seed=0)
    push.push(net, 1)
    v1 = weights_checksum(net)

    def crash(self, version):  # the writer dies after the tensors, before the version file
        raise OSError("killed")

    monkeypatch.setattr(DiskPush, "_announce", crash)
    net.bump(1.0)
    with pytest.raises(WeightSyncError, match="disk push of policy version 2 failed"):
        push.push(net, 2)
    assert version_dir(tmp_path / "w", 2).is_dir()  # complete, but never announced
    # a dead writer's temporary directory, with a torn file in it
    torn = tmp_path / "w" / ".tmp-v3-1-dead"
    torn.mkdir()
    (torn / "model.safetensors").write_bytes(b"\x08\x00")
    assert receiver.poll() == 1
    assert weights_checksum(receiver.model) == v1
    with pytest.raises(WeightSyncError, match="earlier"):
        push.push(net, 3)


def test_a_mislabelled_version_is_refused(tmp_path):
    push, receiver = _pair(tmp_path)
    push.push(Net(seed=0), 1)
    version_dir(tmp_path / "w", 1).rename(version_dir(tmp_path / "w", 2))
    (tmp_path / "w" / "VERSION").write_text("2\n")
    with pytest.raises(WeightSyncError, match="labelled version '1', announced as 2"):
        receiver.poll()


def test_a_transformers_engine_takes_the_version_and_drops_its_caches(tmp_path, tokenizer):
    from gymhub.trainer.engines import GenerationRequest, SamplingConfig, TransformersEngine
    from gymhub.trainer.tiny import build_model

    learner = build_model(len(tokenizer), seed=0)
    engine = TransformersEngine(build_model(len(tokenizer), seed=1), tokenizer)
    engine.generate([GenerationRequest([5, 6, 7], 2, seed=1, session="s")], SamplingConfig())
    assert len(engine.caches) == 1
    push = make_weight_push("disk", directory=tmp_path / "w")
    receiver = make_weight_receiver("disk", engine, directory=tmp_path / "w")
    push.push(learner, 7)
    assert receiver.poll() == 7
    assert engine.policy_version == 7 and len(engine.caches) == 0
    assert weights_checksum(engine.model) == weights_checksum(learner)


def test_lora_pushes_the_adapters_only(tmp_path, tokenizer):
    from safetensors import safe_open

    from gymhub.trainer.policy import apply_lora
    from gymhub.trainer.tiny import build_model

    def peft(seed):
        torch.manual_seed(seed)  # the adapters' random start differs between the two
        return apply_lora(build_model(len(tokenizer), seed=0), r=4, alpha=8, dropout=0.0,
                          target_modules=["q_proj", "v_proj"])

    learner, worker = peft(1), peft(2)
    with torch.no_grad():
        for name, p in learner.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.02)
    push = make_weight_push("disk", directory=tmp_path / "w")
    receiver = make_weight_receiver("disk", worker, directory=tmp_path / "w")
    push.push(learner, 1)
    with safe_open(str(version_dir(tmp_path / "w", 1) / "model.safetensors"), "pt") as f:
        sent = set(f.keys())
    assert sent and all("lora_" in name for name in sent)
    assert len(sent) == 2 * 2 * 2  # A and B, q and v, 2 layers
    assert receiver.poll() == 1
    assert weights_checksum(worker) == weights_checksum(learner)
    # a worker without the adapters cannot take them
    plain = make_weight_receiver("disk", build_model(len(tokenizer), seed=0),
                                 directory=tmp_path / "w")
    with pytest.raises(WeightSyncError, match="LoRA settings"):
        plain.poll()


def test_unknown_kinds_are_configuration_errors(tmp_path):
    with pytest.raises(ConfigError, match="'nfs'"):
        make_weight_push("nfs")
    with pytest.raises(ConfigError, match="'nfs'"):
        make_weight_receiver("nfs", Net(seed=0))


def test_a_push_past_its_timeout_fails_and_never_takes_effect_later(tmp_path, monkeypatch):
    import time

    import safetensors.torch

    push, receiver = _pair(tmp_path)
    push.push(Net(seed=0), 1)
    push.timeout = 0.3
    real = safetensors.torch.save_file

    def slow(*args, **kwargs):  # a stalled disk
        time.sleep(0.6)
        real(*args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "save_file", slow)
    start = time.monotonic()
    with pytest.raises(WeightSyncError, match=r"policy version 2 did not finish within 0\.[23]"):
        push.push(Net(seed=3), 2)
    assert time.monotonic() - start < 0.3 + 0.5
    time.sleep(0.8)  # the abandoned writer has finished writing by now
    assert read_version(tmp_path / "w") == 1 and receiver.poll() == 1
    assert not version_dir(tmp_path / "w", 2).exists()

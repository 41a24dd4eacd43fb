"""Weight-sync time for SmolLM2-135M: gloo broadcast, disk (safetensors), and a memcpy floor.

Why this exists: rollout workers get the learner's weights through a ``WeightPush``
(``gymhub.trainer.engines.weight_push_broadcast`` / ``weight_push_disk``). This measures
what one push of SmolLM2-135M's weights costs each way, in one run, against the
physical floor of moving the same bytes once in memory:

* ``memcpy``: one ``copy_`` of a flat buffer of the same bytes (the floor).
* ``disk``: ``DiskPush.push`` (safetensors written, fsynced, renamed, announced) then
  ``DiskReceiver.poll`` (read back and ``load_state_dict``) on the same machine, so
  the read is served from the page cache the write just filled.
* ``gloo``: ``BroadcastPush.push`` from this process to one receiver process over
  loopback TCP (version header, manifest, 64 MiB buckets, ack), then the receiver's
  ``poll`` (staging → its model, ``load_state_dict``), timed in the receiver.

The weights are SmolLM2-135M-Instruct's (float32, tied embedding sent once: ~538 MB)
when the demo has cached the model (``gymhub.trainer.models.prepare_smollm2``), else
random tensors of the same shapes (``LlamaConfig`` of SmolLM2-135M). Each figure is
the median of ``--repeats`` pushes; the receiver's checksum is compared with the
learner's once at the end.

    python benchmarks/bench_weight_sync.py [--repeats 3] [--bucket-mib 64] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from gymhub.trainer.engines.weight_push import make_weight_push, make_weight_receiver
from gymhub.trainer.engines.weight_state import dedupe, full_state_dict, weights_checksum

#: SmolLM2-135M(-Instruct)'s config.json, for when the model is not cached
SMOLLM2_135M = {
    "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
    "max_position_embeddings": 8192, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
}


def cached_dir() -> Path | None:
    from gymhub.trainer.models import _MODEL_DIR, cache_root

    path = cache_root() / _MODEL_DIR
    return path if (path / "config.json").is_file() else None


def build(seed: int) -> tuple[Any, str]:
    """SmolLM2-135M in float32: the cached weights, or random ones of the same shapes."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    path = cached_dir()
    if path is not None and seed == 0:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        return model.eval(), f"SmolLM2-135M-Instruct from {path}"
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M))
    model = model.to_empty(device="cpu").float()
    model.tie_weights()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
        for name, b in model.named_buffers():  # rotary inv_freq: not pushed, but keep it sane
            if "inv_freq" in name:
                b.copy_(1.0 / (SMOLLM2_135M["rope_theta"] ** (
                    torch.arange(0, 64, 2, dtype=torch.float32) / 64)))
    return model.eval(), "random tensors of SmolLM2-135M's shapes (model not cached)"


def receiver_main(init: str, repeats: int, queue: Any) -> None:
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    model, _ = build(seed=1)
    receiver = make_weight_receiver("broadcast", model, init_method=init, rank=1,
                                    world_size=2, timeout=600.0)
    for v in range(1, repeats + 1):
        _wait_staged(receiver, v)
        start = time.perf_counter()
        assert receiver.poll() == v
        queue.put(("apply", v, time.perf_counter() - start))
    queue.put(("checksum", repeats, weights_checksum(model)))
    deadline = time.monotonic() + 60
    while not receiver.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    receiver.close()


def _wait_staged(receiver: Any, version: int) -> None:
    """Until ``version`` is received (not yet loaded), so that loading is timed alone."""
    while (receiver.received or 0) < version:
        if receiver.closed:
            receiver.poll()  # raises the channel's error
            raise RuntimeError("the weight group closed early")
        time.sleep(0.001)


def payload_bytes(model: Any) -> int:
    unique, _ = dedupe(full_state_dict(model))
    return sum(t.numel() * t.element_size() for t in unique.values())


def bench_memcpy(nbytes: int, repeats: int) -> list[float]:
    src = torch.empty(nbytes, dtype=torch.uint8).random_()
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault the pages in
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return times


def bench_disk(model: Any, directory: Path, repeats: int) -> tuple[list[float], list[float]]:
    target, _ = build(seed=2)
    push = make_weight_push("disk", directory=directory, timeout=600.0)
    receiver = make_weight_receiver("disk", target, directory=directory)
    writes, reads = [], []
    for v in range(1, repeats + 1):
        start = time.perf_counter()
        push.push(model, v)
        writes.append(time.perf_counter() - start)
        start = time.perf_counter()
        assert receiver.poll() == v
        reads.append(time.perf_counter() - start)
    assert weights_checksum(target) == weights_checksum(model)
    return writes, reads


def bench_gloo(model: Any, tmp: Path, repeats: int, bucket: int) -> tuple[list[float],
                                                                       list[float], bool]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    init = f"file://{tmp / 'rendezvous'}"
    child = ctx.Process(target=receiver_main, args=(init, repeats, queue), daemon=True)
    child.start()
    push = make_weight_push("broadcast", init_method=init, receivers=1, timeout=600.0,
                            bucket_bytes=bucket)
    push.connect()  # meeting the group is a one-off, not part of a push
    sends, applies = [], []
    try:
        for v in range(1, repeats + 1):
            start = time.perf_counter()
            push.push(model, v)
            sends.append(time.perf_counter() - start)
            kind, version, seconds = queue.get(timeout=600)
            assert (kind, version) == ("apply", v)
            applies.append(seconds)
        kind, _, checksum = queue.get(timeout=600)
        same = checksum == weights_checksum(model)
    finally:
        push.close()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
        elif child.exitcode != 0:
            print(f"the receiver process exited with {child.exitcode}", file=sys.stderr)
    return sends, applies, same


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bucket-mib", type=int, default=64)
    p.add_argument("--dir", default=None, help="where the disk push writes (default: a "
                   "temporary directory)")
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    model, source = build(seed=0)
    nbytes = payload_bytes(model)
    params = sum(p.numel() for p in model.parameters())
    print(f"weights: {source}; {params / 1e6:.1f}M parameters, {nbytes / 1e6:.0f} MB pushed "
          f"(float32, tied embedding once); torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, median of {args.repeats}")
    med = statistics.median
    memcpy = med(bench_memcpy(nbytes, max(args.repeats, 5)))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        writes, reads = bench_disk(model, Path(tmp) / "weights", args.repeats)
        sends, applies, same = bench_gloo(model, Path(tmp), args.repeats,
                                          args.bucket_mib << 20)
    disk = med(writes) + med(reads)
    gloo = med(sends) + med(applies)

    def row(name: str, seconds: float, detail: str = "") -> None:
        print(f"  {name:<34} {seconds * 1000:8.0f} ms  {nbytes / seconds / 1e9:6.2f} GB/s  "
              f"{seconds / memcpy:6.1f}x memcpy  {detail}")

    row("memcpy (floor)", memcpy)
    row("disk: write (safetensors+fsync)", med(writes))
    row("disk: read + load_state_dict", med(reads))
    row("disk: total", disk)
    row(f"gloo broadcast ({args.bucket_mib} MiB buckets)", med(sends), "sender: until acked")
    row("gloo: receiver load_state_dict", med(applies))
    row("gloo: total", gloo)
    print(f"receiver's checksum equals the learner's: {same}")
    print(f"gloo / disk time per push: {gloo / disk:.2f}x; gloo / memcpy: {gloo / memcpy:.1f}x; "
          f"disk / memcpy: {disk / memcpy:.1f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

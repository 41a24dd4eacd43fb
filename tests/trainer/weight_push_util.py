"""Helpers of the weight-push tests: a small module of awkward shapes, and the receiver
processes that the broadcast tests spawn (a spawned child imports its target by name)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import torch
from torch import nn


class Net(nn.Module):
    """A tensor larger than the tests' bucket, many small ones, bf16, a buffer, tied weights."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(300, 64)  # 76.8 kB: many 4 kB buckets
        self.small = nn.ModuleList(nn.Linear(3, 2) for _ in range(40))
        self.bf16 = nn.Parameter(torch.randn(5, 7).to(torch.bfloat16))
        self.register_buffer("count", torch.tensor(seed, dtype=torch.int64))
        self.head = nn.Linear(64, 300, bias=False)
        self.head.weight = self.embed.weight  # tied: one storage, two names

    def bump(self, by: float) -> None:
        """Change every weight (a training step's stand-in)."""
        with torch.no_grad():
            for p in self.parameters():
                p.add_(by)
            self.count += 1


def receive(rank: int, world: int, init: str, out: str, versions: list[int],
            die_after: int | None = None, stop: bool = False,
            leave_after: int | None = None) -> None:
    """A rollout worker: wait for each version, report its checksum, maybe die or leave."""
    from gymhub.trainer.engines.weight_push import make_weight_receiver
    from gymhub.trainer.engines.weight_state import weights_checksum

    torch.set_num_threads(1)
    net = Net(seed=1000 + rank)  # different weights from the learner's
    receiver = make_weight_receiver("broadcast", net, init_method=init, rank=rank,
                                    world_size=world, timeout=20.0)
    if stop:  # freeze once in the group: alive, sockets open, never answering
        while not receiver.connected:
            time.sleep(0.01)
        Path(out, f"{rank}.ready").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
    for v in versions:
        held = receiver.wait_for(v, 60.0)
        report = {"version": held, "checksum": weights_checksum(net)}
        tmp = Path(out, f".{rank}-{v}.tmp")
        tmp.write_text(json.dumps(report))
        tmp.replace(Path(out, f"{rank}-{v}.json"))
        if die_after == v:
            Path(out, f"{rank}-dead").touch()
            os._exit(3)
        if leave_after == v:
            start = time.monotonic()
            receiver.close()
            took = time.monotonic() - start
            Path(out, f"{rank}-left").write_text(f"{took} {receiver.closed}")
            return
    deadline = time.monotonic() + 30
    while receiver.poll() == versions[-1] and not receiver.closed and time.monotonic() < deadline:
        time.sleep(0.05)  # until the learner closes the group
    receiver.close()


def read_report(out: Path, rank: int, version: int, timeout: float = 30.0) -> dict[str, object]:
    """The child's report of ``version`` (waits for it)."""
    path = out / f"{rank}-{version}.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"rank {rank} never reported version {version}"
        time.sleep(0.05)
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def learner(rank: int, world: int, init: str, weights_init: str, out: str) -> None:
    """One rank of a 2-rank FSDP2 learner (gloo, CPU) pushing to one receiver, then failing."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from gymhub.errors import WeightSyncError
    from gymhub.trainer.engines.weight_push import make_weight_push
    from gymhub.trainer.engines.weight_state import full_state_dict, weights_checksum

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        want = weights_checksum(Net(seed=0))
        net = Net(seed=0)
        fully_shard(net, mesh=init_device_mesh("cpu", (world,)))
        assert isinstance(net.embed.weight, DTensor)
        state = full_state_dict(net, keep=rank == 0)  # a collective: every rank calls it
        assert (weights_checksum(state) == want) if rank == 0 else state == {}
        push = make_weight_push("broadcast", init_method=weights_init, receivers=1,
                                timeout=5.0, bucket_bytes=4096)
        push.connect(timeout=60.0)  # the worker's start-up is not the push's to bound
        push.push(net, 1)
        Path(out, f"learner{rank}-1.json").write_text(json.dumps({"checksum": want}))
        while not Path(out, "1-dead").exists():
            time.sleep(0.05)
        start = time.monotonic()
        try:
            push.push(net, 2)
            result = "pushed"
        except WeightSyncError as exc:
            result = f"{time.monotonic() - start:.1f}s {exc}"
        Path(out, f"learner{rank}-2.txt").write_text(result)
        push.close()
    finally:
        dist.destroy_process_group()

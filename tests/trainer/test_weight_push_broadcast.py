"""The ``broadcast`` weight push over gloo, with receivers in spawned processes."""

from __future__ import annotations

import itertools
import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

from gymhub.errors import WeightSyncError  # noqa: E402
from gymhub.trainer.engines.weight_push import make_weight_push  # noqa: E402
from gymhub.trainer.engines.weight_push_broadcast import Segment, plan_buckets  # noqa: E402
from gymhub.trainer.engines.weight_state import weights_checksum  # noqa: E402

from .weight_push_util import Net, learner, read_report, receive  # noqa: E402

BUCKET = 4096  # the Net's embedding spans 19 buckets; its 80 small tensors share some


def _spawn(tmp_path, world, kwargs):
    ctx = mp.get_context("spawn")
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = []
    for rank in range(1, world):
        p = ctx.Process(target=receive, args=(rank, world, init, str(tmp_path)),
                        kwargs=kwargs[rank], daemon=True)
        p.start()
        procs.append(p)
    return init, procs


def _reap(procs):
    for p in procs:
        p.join(timeout=20)
        if p.is_alive():
            p.kill()
            p.join()


def test_buckets_cut_large_tensors_and_pack_small_ones():
    plan = plan_buckets([10, 3, 0, 3, 25], 8)
    assert [sum(s.length for s in b) for b in plan] == [8, 8, 8, 8, 8, 1]
    assert plan[0] == [Segment(0, 0, 0, 8)]  # the first 8 bytes of the 10-byte tensor
    assert plan[1] == [Segment(0, 8, 0, 2), Segment(1, 0, 2, 3), Segment(3, 0, 5, 3)]
    assert plan[-1] == [Segment(4, 24, 0, 1)]
    # every byte of every tensor exactly once
    for entry, size in enumerate([10, 3, 0, 3, 25]):
        pieces = sorted((s.offset, s.length) for b in plan for s in b if s.entry == entry)
        assert sum(n for _, n in pieces) == size
        assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(pieces))
    assert plan_buckets([], 8) == []


def test_two_receivers_hold_each_version_the_learner_pushed(tmp_path):
    init, procs = _spawn(tmp_path, 3, {r: {"versions": [1, 2, 3]} for r in (1, 2)})
    net = Net(seed=0)
    push = make_weight_push("broadcast", init_method=init, receivers=2, timeout=60.0,
                            bucket_bytes=BUCKET)
    try:
        for version in (1, 2, 3):
            push.push(net, version)
            want = weights_checksum(net)
            for rank in (1, 2):
                assert read_report(tmp_path, rank, version) == {"version": version,
                                                                "checksum": want}
            net.bump(0.5)
        with pytest.raises(WeightSyncError, match="version 3 refused"):
            push.push(net, 3)  # versions only go up
    finally:
        push.close()
        _reap(procs)
    assert [p.exitcode for p in procs] == [0, 0]


def test_a_receiver_that_dies_fails_the_push_in_time_naming_the_version(tmp_path):
    init, procs = _spawn(tmp_path, 3, {1: {"versions": [1, 2]},
                                         2: {"versions": [1, 2], "die_after": 1}})
    net = Net(seed=0)
    push = make_weight_push("broadcast", init_method=init, receivers=2, timeout=5.0,
                            bucket_bytes=BUCKET)
    try:
        push.connect(timeout=60.0)  # the workers' start-up is not the push's to bound
        push.push(net, 1)
        read_report(tmp_path, 2, 1)
        procs[1].join(timeout=20)
        assert procs[1].exitcode == 3
        net.bump(1.0)
        start = time.monotonic()
        with pytest.raises(WeightSyncError, match="policy version 2"):
            push.push(net, 2)
        assert time.monotonic() - start < 5.0 + 1.0
        with pytest.raises(WeightSyncError, match="earlier"):
            push.push(net, 3)  # the group is in an unknown state: no more pushes
    finally:
        push.close()
        for p in procs:
            p.kill()
        _reap(procs)


def test_a_receiver_that_leaves_does_so_at_once_and_the_next_push_fails(tmp_path):
    init, procs = _spawn(tmp_path, 2, {1: {"versions": [1], "leave_after": 1}})
    push = make_weight_push("broadcast", init_method=init, receivers=1, timeout=5.0,
                            bucket_bytes=BUCKET)
    try:
        push.connect(timeout=60.0)
        push.push(Net(seed=0), 1)
        procs[0].join(timeout=30)
        assert procs[0].exitcode == 0  # a clean exit, not an abort in gloo's teardown
        took, closed = (tmp_path / "1-left").read_text().split()
        assert float(took) < 1.0 and closed == "True"  # idle: it was not inside a collective
        with pytest.raises(WeightSyncError, match="policy version 2 failed: a weight receiver"):
            push.push(Net(seed=0), 2)
    finally:
        push.close()
        _reap(procs)


def test_a_frozen_receiver_times_the_push_out_instead_of_hanging(tmp_path):
    init, procs = _spawn(tmp_path, 2, {1: {"versions": [1], "stop": True}})
    push = make_weight_push("broadcast", init_method=init, receivers=1, timeout=3.0,
                            bucket_bytes=BUCKET)
    try:
        push.connect(timeout=60.0)
        deadline = time.monotonic() + 30
        while not (tmp_path / "1.ready").exists():  # it froze itself after meeting the group
            assert time.monotonic() < deadline
            time.sleep(0.05)
        start = time.monotonic()
        with pytest.raises(WeightSyncError, match="policy version 7"):
            push.push(Net(seed=0), 7)
        assert time.monotonic() - start < 3.0 + 1.0
    finally:
        push.close()
        for p in procs:
            if p.pid:
                os.kill(p.pid, signal.SIGKILL)
        _reap(procs)


def test_an_fsdp2_learner_gathers_on_every_rank_and_fails_together(tmp_path):
    """2 learner ranks (FSDP2 shards, gloo) push to 1 receiver; it dies; both ranks fail."""
    ctx = mp.get_context("spawn")
    weights_init = f"file://{tmp_path / 'weights-rendezvous'}"
    worker = ctx.Process(target=receive, args=(1, 2, weights_init, str(tmp_path)),
                         kwargs={"versions": [1], "die_after": 1}, daemon=True)
    worker.start()
    learners = [ctx.Process(target=learner, args=(rank, 2, f"file://{tmp_path / 'learner'}",
                                                   weights_init, str(tmp_path)), daemon=True)
                for rank in (0, 1)]
    for p in learners:
        p.start()
    try:
        report = read_report(tmp_path, 1, 1, timeout=60)
        assert report["version"] == 1
        assert report["checksum"] == weights_checksum(Net(seed=0))  # the unsharded weights
        for p in learners:
            p.join(timeout=60)
        assert [p.exitcode for p in learners] == [0, 0]
        for rank in (0, 1):
            verdict = (tmp_path / f"learner{rank}-2.txt").read_text()
            assert "policy version 2" in verdict and float(verdict.split("s ")[0]) < 6.0
    finally:
        for p in [worker, *learners]:
            p.kill()
        _reap([worker, *learners])

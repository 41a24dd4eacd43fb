"""The ``broadcast`` weight push: ``torch.distributed`` from learner rank 0 to rollout workers.

The weight group is its own process group, apart from the learner's: learner rank 0 is
its rank 0 and the ``K`` rollout workers are ranks ``1..K`` (gloo on the CPU, NCCL on
GPUs), met at ``init_method`` (``tcp://host:port``, or ``file://path`` on one machine).
The other learner ranks are not in it: they take part in gathering their FSDP2 shards
(:func:`~.weight_state.full_state_dict`, before anything is sent) and then wait for
rank 0's verdict, so every learner rank returns from a push or fails it together.

One push, all from rank 0::

    key      push/<n> set in the group's store       receivers wait for it, not in a
                                                     collective (see _Channel)
    header   int64 [op, version, manifest bytes]     the version first
    manifest JSON: names, dtypes, shapes, aliases (tied weights), partial (LoRA)
    buckets  the tensors' bytes as one stream, cut into buckets of at most
             ``bucket_bytes`` (64 MiB): a tensor larger than a bucket spans several,
             small ones share one, so memory stays bounded whatever the shapes; a
             bucket that is one piece of one tensor is sent from (and received into)
             that tensor itself, without a copy
    ack      all-reduce MIN of the version each receiver accepted (-1: refused)

Sending a bucket overlaps with packing the next (two buffers, asynchronous
broadcasts); receiving, likewise, with unpacking. Receivers receive on a thread of
their own into staging tensors and ack; the worker loads a version into its model only
when it asks (:meth:`BroadcastReceiver.poll`), so weights never change under a
generation, and the learner is not held up by a worker's generation in progress.

**A push ends within its timeout or fails.** Every collective is given the time left
until the push's deadline (gloo honours a per-operation timeout), and the whole send
runs under :func:`~.weight_push.call_with_timeout` as well. A receiver that died closes
its sockets, so gloo fails at once ("Connection closed by peer"); one that hangs is cut
off by the deadline. Either way the push raises :class:`~gymhub.errors.WeightSyncError`
naming the policy version, and the pusher is unusable afterwards (the group is in an
unknown state: restart the workers and the group).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gymhub.errors import WeightSyncError

from .weight_push import VersionGate, call_with_timeout, receiver_target
from .weight_state import (
    agree_on_failure,
    dedupe,
    dtype_from_name,
    gather_for_push,
    learner_rank,
    load_payload,
)

if TYPE_CHECKING:
    import torch

__all__ = ["BroadcastPush", "BroadcastReceiver", "Segment", "plan_buckets"]

#: header operations
OP_WEIGHTS = 1
OP_CLOSE = 2
_PREFIX = "gymhub/weights"
#: seconds between a receiver's looks for the next push's key (see _Channel)
_POLL = 0.02


@dataclass(frozen=True)
class Segment:
    """One piece of one tensor inside one bucket (all offsets in bytes)."""

    entry: int  #: index of the tensor in the manifest
    offset: int  #: where the piece starts in the tensor
    start: int  #: where it starts in the bucket
    length: int


def plan_buckets(sizes: list[int], bucket_bytes: int) -> list[list[Segment]]:
    """Cut tensors of ``sizes`` bytes, laid end to end, into buckets of ``bucket_bytes``.

    Every bucket but the last is exactly ``bucket_bytes`` long; sender and receivers
    compute the same plan from the manifest, so only the bytes travel.
    """
    if bucket_bytes < 1:
        raise ValueError("bucket_bytes must be positive")
    buckets: list[list[Segment]] = []
    current: list[Segment] = []
    fill = 0
    for entry, size in enumerate(sizes):
        offset = 0
        while offset < size:
            length = min(size - offset, bucket_bytes - fill)
            current.append(Segment(entry, offset, fill, length))
            offset += length
            fill += length
            if fill == bucket_bytes:
                buckets.append(current)
                current, fill = [], 0
    if current:
        buckets.append(current)
    return buckets


def _bucket_size(segments: list[Segment]) -> int:
    last = segments[-1]
    return last.start + last.length


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    import torch

    return t.reshape(-1).view(torch.uint8)


def _td(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(seconds, 0.001))


def _connect(
    init_method: str, rank: int, world_size: int, backend: str, timeout: float
) -> _Channel:
    """A process group of its own (not the default one), met at ``init_method``."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import PrefixStore
    from torch.distributed.rendezvous import rendezvous

    store, _, _ = next(rendezvous(init_method, rank, world_size, timeout=_td(timeout)))
    store.set_timeout(_td(timeout))
    store = PrefixStore(_PREFIX, store)
    if backend == "gloo":
        return _Channel(dist.ProcessGroupGloo(store, rank, world_size, _td(timeout)), store)
    if backend == "nccl":
        nccl = getattr(dist, "ProcessGroupNCCL", None)
        if nccl is None:
            raise WeightSyncError("backend 'nccl' needs a CUDA build of torch")
        options = nccl.Options()
        options._timeout = _td(timeout)
        return _Channel(nccl(store, rank, world_size, options), store)
    raise WeightSyncError(f"unknown backend {backend!r}: expected 'gloo' or 'nccl'")


class _Channel:
    """The collectives of one side, each bounded by a deadline, and the push announcements.

    Before each push (and the close) the sender sets the store key ``push/<n>``; a
    receiver waits for that key, not in a collective. A collective cannot be
    interrupted (neither ``shutdown`` nor ``abort`` of a gloo group ends a wait in
    progress), so a receiver idling in one could never leave; looking for a key every
    20 ms it can (:meth:`BroadcastReceiver.close`), and every collective then runs only
    within a push, under the push's timeout. (``Store.wait`` would block instead, but
    a FileStore rounds its timeout up to whole seconds and a TCPStore logs every expiry.)
    """

    def __init__(self, group: Any, store: Any) -> None:
        self.group = group
        self.store = store
        self.deadline = float("inf")
        self.seq = 0

    def announce(self) -> None:
        """Sender: the next push starts now."""
        self.seq += 1
        self.store.set(f"push/{self.seq}", b"1")

    def announced(self) -> bool:
        """Receiver: whether the next push has started (then its collectives follow)."""
        if not self.store.check([f"push/{self.seq + 1}"]):
            return False
        self.seq += 1
        return True

    def forget(self) -> None:
        """Sender, after the ack: every receiver has seen this push's key."""
        with contextlib.suppress(RuntimeError):
            self.store.delete_key(f"push/{self.seq}")

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WeightSyncError("the push's deadline passed")
        return left

    def broadcast(self, tensor: torch.Tensor) -> Any:
        """Start a broadcast from rank 0 (``wait`` it)."""
        return self.group.broadcast(tensor, 0, _td(self.left()))

    def wait(self, work: Any) -> None:
        """Wait for ``work``, at most until the deadline."""
        if work.wait(_td(self.left())) is False:
            raise WeightSyncError("a collective of the weight group timed out")

    def ack(self, value: int, device: Any) -> int:
        """All-reduce MIN of one int64 per rank."""
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.int64, device=device)
        self.wait(self.group.allreduce(t, dist.ReduceOp.MIN, _td(self.left())))
        return int(t.item())


class BroadcastPush:
    """Broadcast each version from learner rank 0 to ``receivers`` rollout workers.

    Built, and :meth:`push` called, on every learner rank (see the module docstring).

    Args:
        init_method: where the weight group meets (``tcp://host:port``: rank 0 listens
            there; ``file://path``). Not the learner's own ``MASTER_ADDR``/``PORT``.
        receivers: how many rollout workers receive (ranks ``1..receivers``).
        timeout: seconds for one push, meeting the group on the first one included.
        bucket_bytes: bytes per broadcast at most (two such buffers are allocated).
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (CUDA tensors).
        device: where the tensors travel from (default: ``cpu`` for gloo, the current
            CUDA device for NCCL).
        learner_group: the learner's process group (default: the default group).
    """

    def __init__(
        self, init_method: str, receivers: int, *, timeout: float = 300.0,
        bucket_bytes: int = 64 << 20, backend: str = "gloo", device: Any = None,
        learner_group: Any = None,
    ) -> None:
        if receivers < 1:
            raise ValueError("a broadcast push needs at least one receiver")
        self.init_method = init_method
        self.receivers = receivers
        self.timeout = timeout
        self.bucket_bytes = bucket_bytes
        self.backend = backend
        self.device = device if device is not None else ("cuda" if backend == "nccl" else "cpu")
        self.learner_group = learner_group
        self.gate = VersionGate()
        self._channel: _Channel | None = None
        self._broken = False
        self._buffers: list[torch.Tensor] = []

    def connect(self, timeout: float | None = None) -> None:
        """Meet the receivers now rather than in the first push (learner rank 0 only).

        Rollout workers take a while to start (imports, model load); meeting them here,
        with a ``timeout`` of its own (default: :attr:`timeout`), keeps their start-up
        out of the first push's time.

        Raises:
            WeightSyncError: not every receiver joined within ``timeout``.
        """
        if self._channel is None and learner_rank(self.learner_group)[0] == 0:
            wait = self.timeout if timeout is None else timeout
            self._channel = call_with_timeout(
                lambda: _connect(self.init_method, 0, self.receivers + 1, self.backend, wait),
                wait, f"meeting {self.receivers} weight receiver(s) at {self.init_method}")

    def push(self, model: Any, version: int) -> None:
        """Gather on every learner rank, then broadcast ``version`` from rank 0 and check the ack.

        Raises:
            WeightSyncError: stale version; a receiver died, refused or did not answer
                within ``timeout`` (on every learner rank); or an earlier failure.
        """
        if self._broken:
            raise WeightSyncError("an earlier broadcast weight push failed; the weight group "
                                  "is in an unknown state: restart the rollout workers")
        self.gate.check(version)
        deadline = time.monotonic() + self.timeout
        rank, partial, tensors = gather_for_push(model, self.learner_group, self.device)
        error: WeightSyncError | None = None
        if rank == 0:
            what = f"broadcast push of policy version {version}"
            try:
                call_with_timeout(lambda: self._send(tensors, partial, version, deadline),
                                  max(deadline - time.monotonic(), 0.0), what)
            except WeightSyncError as exc:
                error = exc if what in str(exc) else WeightSyncError(f"{what}: {exc}")
        if agree_on_failure(error is not None, self.learner_group):
            self._broken = True
            raise error or WeightSyncError(
                f"broadcast push of policy version {version} failed on learner rank 0")
        self.gate.delivered(version)

    def _send(self, tensors: dict[str, Any], partial: bool, version: int,
              deadline: float) -> None:
        import torch

        if self._channel is None:
            self._channel = _connect(self.init_method, 0, self.receivers + 1, self.backend,
                                     max(deadline - time.monotonic(), 0.001))
        ch = self._channel
        ch.deadline = deadline
        unique, aliases = dedupe(tensors)
        names = list(unique)
        views = [_bytes_of(unique[n].contiguous()) for n in names]
        manifest = json.dumps({
            "version": version, "partial": partial, "aliases": aliases,
            "bucket_bytes": self.bucket_bytes,
            "entries": [[n, str(unique[n].dtype), list(unique[n].shape)] for n in names],
        }).encode()
        try:
            ch.announce()
            header = torch.tensor([OP_WEIGHTS, version, len(manifest)], dtype=torch.int64,
                                  device=self.device)
            ch.wait(ch.broadcast(header))
            ch.wait(ch.broadcast(torch.frombuffer(bytearray(manifest), dtype=torch.uint8)
                                 .to(self.device)))
            plan = plan_buckets([v.numel() for v in views], self.bucket_bytes)
            pending: list[Any] = [None, None]
            for k, segments in enumerate(plan):
                slot = k % 2
                if pending[slot] is not None:
                    ch.wait(pending[slot])
                if len(segments) == 1:  # one piece of one tensor: send it where it lies
                    s = segments[0]
                    bucket = views[s.entry][s.offset:s.offset + s.length]
                else:
                    bucket = self._buffer(slot)[:_bucket_size(segments)]
                    for s in segments:
                        bucket[s.start:s.start + s.length].copy_(
                            views[s.entry][s.offset:s.offset + s.length])
                pending[slot] = ch.broadcast(bucket)
            for work in pending:
                if work is not None:
                    ch.wait(work)
            accepted = ch.ack(version, self.device)
            ch.forget()
        except RuntimeError as exc:  # gloo/NCCL: a peer closed its sockets or timed out
            raise WeightSyncError(
                f"broadcast push of policy version {version} failed: a weight receiver died "
                f"or stopped answering ({str(exc).splitlines()[0][:300]})") from exc
        if accepted != version:
            raise WeightSyncError(
                f"broadcast push of policy version {version}: a receiver refused it (it holds "
                "a newer version; restart the rollout workers after resuming a run)")

    def _buffer(self, slot: int) -> torch.Tensor:
        import torch

        while len(self._buffers) <= slot:
            self._buffers.append(torch.empty(self.bucket_bytes, dtype=torch.uint8,
                                             device=self.device))
        return self._buffers[slot]

    def close(self) -> None:
        """Tell the receivers the run is over and leave the group (idempotent)."""
        import torch

        channel, self._channel = self._channel, None
        self._buffers = []
        if channel is None or self._broken:
            return
        channel.deadline = time.monotonic() + min(self.timeout, 30.0)
        try:
            channel.announce()
            header = torch.tensor([OP_CLOSE, 0, 0], dtype=torch.int64, device=self.device)
            channel.wait(channel.broadcast(header))
            channel.ack(0, self.device)  # every receiver has read it before the sockets go
        except (RuntimeError, WeightSyncError):
            pass  # a receiver already gone: nothing left to tell it
        _shutdown(channel.group)


def _shutdown(group: Any) -> None:
    shutdown = getattr(group, "shutdown", None)
    if callable(shutdown):
        with contextlib.suppress(RuntimeError):  # already torn down by a dead peer
            shutdown()


@dataclass
class _Staged:
    version: int
    tensors: dict[str, Any]
    aliases: dict[str, str]
    partial: bool


class BroadcastReceiver:
    """A rollout worker's end of a :class:`BroadcastPush` (rank ``rank`` of the group).

    Receiving runs on a thread of its own from construction on: it meets the group,
    then takes every push into staging tensors and acks it. :meth:`poll` and
    :meth:`wait_for` load the newest staged version into ``target``'s model.

    Args:
        target: a model, or an engine holding one in ``.model`` (see
            :class:`~.weight_push.WeightReceiver`).
        init_method: the pusher's ``init_method``.
        rank: this worker's rank, ``1..world_size - 1`` (rollout worker ``i`` is ``i + 1``).
        world_size: receivers + 1.
        timeout: seconds for meeting the group and for each push's transfer.
        backend: the pusher's backend.
        device: where staging tensors are received (``cpu`` for gloo).
    """

    def __init__(
        self, target: Any, init_method: str, rank: int, world_size: int, *,
        timeout: float = 300.0, backend: str = "gloo", device: Any = None,
    ) -> None:
        if not 1 <= rank < world_size:
            raise ValueError(f"receiver rank {rank} outside 1..{world_size - 1}")
        self.model, self._loaded = receiver_target(target)
        self.init_method = init_method
        self.rank = rank
        self.world_size = world_size
        self.timeout = timeout
        self.backend = backend
        self.device = device if device is not None else ("cuda" if backend == "nccl" else "cpu")
        self.version: int | None = None
        self._cond = threading.Condition()
        self._staged: _Staged | None = None
        self._newest: int | None = None  # newest version received (staged or loaded)
        self._error: BaseException | None = None
        self._done = False
        self._connected = False
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gymhub-weights-rank{rank}",
                                        daemon=True)
        self._thread.start()

    # --- the receiving thread
    def _run(self) -> None:
        try:
            import torch

            device = torch.device(self.device)
            if self.backend == "nccl" and device.index is not None:
                torch.cuda.set_device(device)  # NCCL works on this thread's current device
            ch = _connect(self.init_method, self.rank, self.world_size, self.backend,
                          self.timeout)
            with self._cond:
                self._connected = True
                self._cond.notify_all()
            try:
                while self._receive_one(ch):
                    pass
            finally:
                # Released here, before `closed` turns true: a group still alive when the
                # interpreter exits is destroyed with its gloo threads running, and the
                # process aborts ("terminate called without an active exception").
                _shutdown(ch.group)
                del ch
        except BaseException as exc:  # reported by poll/wait_for
            with self._cond:
                self._error = exc
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _receive_one(self, ch: _Channel) -> bool:
        import torch

        while not ch.announced():
            if self._closing.is_set():
                return False
            time.sleep(_POLL)
        ch.deadline = time.monotonic() + self.timeout
        header = torch.zeros(3, dtype=torch.int64, device=self.device)
        ch.wait(ch.broadcast(header))
        op, version, size = (int(x) for x in header.tolist())
        if op == OP_CLOSE:
            ch.ack(0, self.device)
            return False
        raw = torch.empty(size, dtype=torch.uint8, device=self.device)
        ch.wait(ch.broadcast(raw))
        manifest = json.loads(bytes(raw.cpu().numpy()))
        names = [e[0] for e in manifest["entries"]]
        staging = {name: torch.empty(shape, dtype=dtype_from_name(dtype), device=self.device)
                   for name, dtype, shape in manifest["entries"]}
        views = [_bytes_of(staging[n]) for n in names]
        plan = plan_buckets([v.numel() for v in views], int(manifest["bucket_bytes"]))
        buffers = [torch.empty(0, dtype=torch.uint8, device=self.device)] * 2

        def post(k: int) -> tuple[Any, torch.Tensor]:
            segments = plan[k]
            if len(segments) == 1:  # received straight into its tensor
                s = segments[0]
                target = views[s.entry][s.offset:s.offset + s.length]
            else:
                slot = k % 2
                if buffers[slot].numel() < _bucket_size(segments):
                    buffers[slot] = torch.empty(_bucket_size(segments), dtype=torch.uint8,
                                                device=self.device)
                target = buffers[slot][:_bucket_size(segments)]
            return ch.broadcast(target), target

        posted = post(0) if plan else None
        for k, segments in enumerate(plan):
            assert posted is not None
            work, bucket = posted
            ch.wait(work)
            posted = post(k + 1) if k + 1 < len(plan) else None
            if len(segments) > 1:
                for s in segments:
                    views[s.entry][s.offset:s.offset + s.length].copy_(
                        bucket[s.start:s.start + s.length])
        with self._cond:
            accept = self._newest is None or version > self._newest
        ch.ack(version if accept else -1, self.device)
        with self._cond:
            if accept:
                self._newest = version
                self._staged = _Staged(version, staging, dict(manifest["aliases"]),
                                       bool(manifest["partial"]))
            else:
                self._error = WeightSyncError(
                    f"policy version {version} refused: this receiver already holds version "
                    f"{self._newest} (versions only go up; restart the rollout worker after "
                    "resuming a run)")
            self._cond.notify_all()
        return accept

    # --- the worker's side
    @property
    def received(self) -> int | None:
        """The newest version received (acked to the learner), loaded or not yet."""
        with self._cond:
            return self._newest

    @property
    def connected(self) -> bool:
        """This receiver has met the group (the learner's ``connect`` or first push)."""
        with self._cond:
            return self._connected

    @property
    def closed(self) -> bool:
        """The channel ended: the learner closed the group, or it broke (see :meth:`poll`)."""
        with self._cond:
            return self._done

    def poll(self) -> int | None:
        """See :meth:`WeightReceiver.poll <.weight_push.WeightReceiver.poll>`."""
        with self._cond:
            staged, self._staged = self._staged, None
            error = self._error
        if staged is not None:
            load_payload(self.model, staged.tensors, staged.aliases, partial=staged.partial,
                         version=staged.version)
            self.version = staged.version
            self._loaded(staged.version)
        if error is not None:
            if isinstance(error, WeightSyncError):
                raise error
            raise WeightSyncError(f"the weight channel broke (is the learner gone?): "
                                  f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
                                  ) from error
        return self.version

    def wait_for(self, version: int, timeout: float) -> int:
        """See :meth:`WeightReceiver.wait_for <.weight_push.WeightReceiver.wait_for>`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not (
                (self._newest is not None and self._newest >= version)
                or self._error is not None or self._done
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        held = self.poll()
        if held is None or held < version:
            why = "the learner closed the group" if self._done else f"within {timeout:g}s"
            raise WeightSyncError(f"policy version {version} did not arrive {why} "
                                  f"(this receiver holds {held})")
        return held

    def close(self, timeout: float | None = None) -> None:
        """Leave the group: the receiving thread ends and releases it (idempotent).

        Idle, the thread ends within ~20 ms; in the middle of a push, once that push is
        received (or its ``timeout`` passes). The learner's next push then fails, as for
        a worker that died. Call this before the process exits (see :meth:`_run`).
        Waits at most ``timeout`` seconds (default: the push timeout, plus a second).
        """
        self._closing.set()
        self._thread.join(self.timeout + 1.0 if timeout is None else timeout)

"""Pushing the trainer's weights into an inference engine, one numbered version at a time.

Every backend (vLLM's native NCCL routes, a LoRA adapter on disk, a safetensors
directory (:mod:`.weight_push_disk`) and a ``torch.distributed`` group
(:mod:`.weight_push_broadcast`)) is one :class:`WeightPush`: ``push(model, version)``.
The last two also have a receiving side, :class:`WeightReceiver`, for rollout workers
that hold their own copy of the policy (:func:`make_weight_push`,
:func:`make_weight_receiver`). Two rules hold for all of them, because both failure modes
are silent otherwise:

* **Versions only go up.** :class:`VersionGate` refuses a version that is not greater
  than the last one this pusher delivered (a replayed or out-of-order push would
  make the engine sample from an older policy while every turn is tagged with the
  newer number). The first push of a session may carry any version: that is the
  resync after a resume, whatever the receiver held before. Receivers that can
  report their version are asked afterwards and must echo the one sent.
* **A push ends within ``timeout`` seconds or fails.** A collective transfer whose
  peer died waits forever inside NCCL; :func:`call_with_timeout` turns that into a
  :class:`~gymhub.errors.WeightSyncError` naming the step, and the pusher is then
  unusable (the channel is in an unknown state).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from gymhub.errors import ConfigError, WeightSyncError

__all__ = [
    "VersionGate",
    "WeightPush",
    "WeightReceiver",
    "call_with_timeout",
    "make_weight_push",
    "make_weight_receiver",
    "receiver_target",
]

T = TypeVar("T")


@runtime_checkable
class WeightPush(Protocol):
    """Moves the trainer's weights to one inference engine."""

    timeout: float

    def push(self, model: Any, version: int) -> None:
        """Deliver ``model``'s weights as policy ``version`` (greater than the last one).

        Raises:
            WeightSyncError: stale version, the receiver refused, or ``timeout`` passed.
        """
        ...

    def close(self) -> None:
        """Release the channel (idempotent)."""
        ...


class VersionGate:
    """The monotonic-version rule of :class:`WeightPush`, shared by every backend."""

    def __init__(self) -> None:
        self.last: int | None = None

    def check(self, version: int) -> None:
        """Refuse a ``version`` that does not exceed the last delivered one.

        Raises:
            WeightSyncError: ``version`` is stale.
        """
        if self.last is not None and version <= self.last:
            raise WeightSyncError(
                f"weight push of policy version {version} refused: version {self.last} "
                "was already delivered (versions must strictly increase)"
            )

    def delivered(self, version: int) -> None:
        """Record that ``version`` reached the receiver."""
        self.last = version


def call_with_timeout(fn: Callable[[], T], timeout: float, what: str) -> T:
    """Run ``fn`` in a daemon thread and wait at most ``timeout`` seconds for it.

    The thread cannot be killed (it may sit in an NCCL call); it is abandoned, and
    being a daemon it does not keep the process alive.

    Raises:
        WeightSyncError: ``fn`` did not return in time, or raised (chained).
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"gymhub-{what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise WeightSyncError(
            f"{what} did not finish within {timeout:g}s; the weight channel is in an "
            "unknown state: restart the engine (and raise the timeout if the model is "
            "simply large)"
        )
    if "error" in box:
        err = box["error"]
        if isinstance(err, WeightSyncError):
            raise err
        raise WeightSyncError(f"{what} failed: {type(err).__name__}: {err}") from err
    value: T = box["value"]
    return value


@runtime_checkable
class WeightReceiver(Protocol):
    """The rollout worker's side of a push: it holds a model and takes new versions.

    Built around a *target*: a model (``nn.Module``) or an engine holding one in
    ``.model`` (the transformers engine). Weights are loaded into that model in place,
    only when the worker asks (:meth:`poll`, :meth:`wait_for`), so they never change
    under a generation in progress; an engine is then told through its
    ``weights_replaced(version)`` (the transformers engine drops its KV caches and tags
    later turns with ``version``).

    Versions only go up here too: a version lower than the one held is refused with a
    :class:`~gymhub.errors.WeightSyncError` (a learner that went back, e.g. resumed from an
    older checkpoint, while this worker lived on).
    """

    #: the policy version loaded into the target (``None`` before the first)
    version: int | None

    def poll(self) -> int | None:
        """Load the newest version that arrived, if newer than the one held; return the held one.

        Raises:
            WeightSyncError: the newest version is lower than the one held, does not fit
                the model, or the channel broke (the sender died).
        """
        ...

    def wait_for(self, version: int, timeout: float) -> int:
        """Block until ``version`` (or a newer one) is loaded; return the version held.

        Raises:
            WeightSyncError: it did not arrive within ``timeout`` seconds (naming it), or
                as in :meth:`poll`.
        """
        ...

    def close(self) -> None:
        """Leave the channel (idempotent)."""
        ...


def receiver_target(target: Any) -> tuple[Any, Callable[[int], None]]:
    """``(model, loaded)``: where weights go, and what to call after ``version`` went there.

    ``target`` is a model, or an engine with ``.model`` (and, optionally,
    ``weights_replaced(version)``).
    """
    from torch import nn

    # a module is the model itself, even one with a ``.model`` submodule (every
    # transformers causal LM has one, and peft forwards it): only an engine is unwrapped
    model = target if isinstance(target, nn.Module) else getattr(target, "model", None)
    if model is None or not hasattr(model, "load_state_dict"):
        raise TypeError(f"a weight receiver needs a torch module or an engine holding one "
                        f"in .model, not {type(target).__name__}")

    def loaded(version: int) -> None:
        hook = getattr(target, "weights_replaced", None)
        if target is not model and callable(hook):
            hook(version)

    return model, loaded


def make_weight_push(kind: str, **kwargs: Any) -> WeightPush:
    """The learner's side of a ``kind`` push, built on every learner rank.

    * ``"disk"``: :class:`~.weight_push_disk.DiskPush` (``directory``, ``timeout``, ``keep``).
    * ``"broadcast"``: :class:`~.weight_push_broadcast.BroadcastPush` (``init_method``,
      ``receivers``, ``timeout``, ``bucket_bytes``, ``backend``).

    ``push`` is then called on every learner rank (FSDP2 shards are gathered by all of
    them); only learner rank 0 writes or sends.
    """
    if kind == "disk":
        from .weight_push_disk import DiskPush

        return DiskPush(**kwargs)
    if kind == "broadcast":
        from .weight_push_broadcast import BroadcastPush

        return BroadcastPush(**kwargs)
    raise ConfigError(f"unknown weight push {kind!r}: expected 'disk' or 'broadcast'")


def make_weight_receiver(kind: str, target: Any, **kwargs: Any) -> WeightReceiver:
    """A rollout worker's receiver for a ``kind`` push into ``target`` (model or engine).

    * ``"disk"``: :class:`~.weight_push_disk.DiskReceiver` (``directory``).
    * ``"broadcast"``: :class:`~.weight_push_broadcast.BroadcastReceiver` (``init_method``,
      ``rank`` — rollout worker ``i`` is rank ``i + 1`` —, ``world_size`` = workers + 1,
      ``timeout``, ``backend``).
    """
    if kind == "disk":
        from .weight_push_disk import DiskReceiver

        return DiskReceiver(target, **kwargs)
    if kind == "broadcast":
        from .weight_push_broadcast import BroadcastReceiver

        return BroadcastReceiver(target, **kwargs)
    raise ConfigError(f"unknown weight push {kind!r}: expected 'disk' or 'broadcast'")

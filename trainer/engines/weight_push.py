"""Pushing the trainer's weights into an inference engine, one numbered version at a time.

Every backend (vLLM's native NCCL routes, a LoRA adapter on disk, and later a plain
checkpoint directory or a ``torch.distributed`` group) is one :class:`WeightPush`:
``push(model, version)``. Two rules hold for all of them, because both failure modes
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

from gymhub.errors import WeightSyncError

__all__ = ["VersionGate", "WeightPush", "call_with_timeout"]

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

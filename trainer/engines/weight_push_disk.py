"""The ``disk`` weight push: safetensors in a directory, announced by a version file.

For any receiver that can reload from files (a rollout worker on this machine or on a
shared disk). The layout::

    DIR/
      v00000007/model.safetensors     one directory per version, complete when renamed in
      v00000008/model.safetensors
      VERSION                         "8" and a newline: the newest complete version, written last

**A reader never sees a half-written version.** A version is written into a hidden
``.tmp-*`` directory (file and directory fsynced), renamed to ``vNNNNNNNN`` (a rename
is atomic), and only then announced: ``VERSION`` is written to a temporary file and
``os.replace``-d over the old one. Readers trust nothing but ``VERSION``, so a writer
that dies anywhere before that last step leaves the previous version in force; the
safetensors header repeats the version, and a mismatch is refused.

**Old versions are collected**: after announcing version ``n``, all but the newest
``keep`` (default 2) directories go. A reader that read ``VERSION`` just before its
directory went simply reads ``VERSION`` again (a newer version exists by then); one
that already opened the file keeps reading it (POSIX keeps unlinked files readable).

A push that runs past its timeout fails, and its abandoned writer announces nothing
afterwards. A push is delivered once announced; receivers read at their own pace and
report the version they hold (:meth:`DiskReceiver.wait_for` is how a worker confirms).

What is written is :func:`~.weight_state.push_payload`'s choice: the full state dict,
or for LoRA the adapter weights only (see :mod:`.weight_state` for why). There is a
single writer per directory: learner rank 0.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from gymhub.errors import WeightSyncError

from .weight_push import VersionGate, call_with_timeout, receiver_target
from .weight_state import (
    agree_on_failure,
    dedupe,
    gather_for_push,
    load_payload,
)

__all__ = ["DiskPush", "DiskReceiver", "read_version", "version_dir"]

VERSION_FILE = "VERSION"
WEIGHTS_FILE = "model.safetensors"
_META_VERSION = "gymhub.policy_version"
_META_ALIASES = "gymhub.aliases"
_META_PARTIAL = "gymhub.partial"


def version_dir(directory: Path, version: int) -> Path:
    """The directory of ``version`` (zero-padded, so names sort like numbers)."""
    return directory / f"v{version:08d}"


def _versions_on_disk(directory: Path) -> list[int]:
    out = []
    for p in directory.glob("v*"):
        if p.is_dir() and p.name[1:].isdigit():
            out.append(int(p.name[1:]))
    return sorted(out)


def read_version(directory: str | Path) -> int | None:
    """The newest announced version in ``directory`` (``None`` before the first)."""
    try:
        text = (Path(directory) / VERSION_FILE).read_text()
    except FileNotFoundError:
        return None
    try:
        return int(text.strip())
    except ValueError as exc:  # os.replace never leaves a torn file: something else wrote it
        raise WeightSyncError(f"{Path(directory) / VERSION_FILE} holds {text[:40]!r}, not a "
                              "version number") from exc


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DiskPush:
    """Write each version into ``directory``; learner rank 0 writes, every rank calls push.

    Args:
        directory: where versions go (created).
        timeout: seconds for one push (gathering shards included), after which it fails.
        keep: versions kept on disk (at least 1; the newest ``keep`` survive).
        learner_group: the learner's process group (default: the default group, when
            one is initialised).
    """

    def __init__(
        self, directory: str | Path, *, timeout: float = 300.0, keep: int = 2,
        learner_group: Any = None,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory = Path(directory)
        self.timeout = timeout
        self.keep = keep
        self.learner_group = learner_group
        self.gate = VersionGate()
        self._broken = False
        self._first = True
        #: set when a push timed out: its abandoned writer must not announce afterwards
        self._cancelled = threading.Event()

    def push(self, model: Any, version: int) -> None:
        """Gather, write ``version``, announce it, collect old versions.

        Raises:
            WeightSyncError: stale version, a failed or timed-out write (on every
                learner rank), or an earlier failure.
        """
        if self._broken:
            raise WeightSyncError("an earlier disk weight push failed; the directory was "
                                  "left as it was, with the last announced version in force")
        self.gate.check(version)
        deadline = time.monotonic() + self.timeout
        rank, partial, tensors = gather_for_push(model, self.learner_group, "cpu")
        error: WeightSyncError | None = None
        if rank == 0:
            try:
                call_with_timeout(lambda: self._write(tensors, partial, version),
                                  max(deadline - time.monotonic(), 0.0),
                                  f"disk push of policy version {version}")
            except WeightSyncError as exc:
                self._cancelled.set()
                error = exc
        if agree_on_failure(error is not None, self.learner_group):
            self._broken = True
            raise error or WeightSyncError(
                f"disk push of policy version {version} failed on learner rank 0")
        self.gate.delivered(version)

    def _write(self, tensors: dict[str, Any], partial: bool, version: int) -> None:
        from safetensors.torch import save_file

        self.directory.mkdir(parents=True, exist_ok=True)
        if self._first:
            self._start_session(version)
        unique, aliases = dedupe(tensors)
        tmp = self.directory / f".tmp-v{version}-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        try:
            path = tmp / WEIGHTS_FILE
            save_file({k: t.contiguous() for k, t in unique.items()}, str(path), metadata={
                _META_VERSION: str(version),
                _META_ALIASES: json.dumps(aliases),
                _META_PARTIAL: "1" if partial else "0",
            })
            _fsync(path)
            _fsync(tmp)
            final = version_dir(self.directory, version)
            if final.exists():  # never announced by this session (see _start_session)
                shutil.rmtree(final)
            if self._cancelled.is_set():
                raise WeightSyncError(f"disk push of policy version {version} was given up")
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if self._cancelled.is_set():  # the push already failed: it must not take effect now
            return
        self._announce(version)
        self._collect(version)

    def _start_session(self, version: int) -> None:
        """First push: drop other writers' leftovers and versions at or after ``version``.

        Those belong to a run that got further before it stopped (this one resumed
        from an earlier checkpoint): left there, a receiver would take them for newer
        than what this run pushes. A live receiver that holds one refuses the lower
        version this run announces, which is the point: it must be restarted.
        """
        for p in self.directory.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)
        for v in _versions_on_disk(self.directory):
            if v >= version:
                shutil.rmtree(version_dir(self.directory, v), ignore_errors=True)
        self._first = False

    def _announce(self, version: int) -> None:
        tmp = self.directory / f".{VERSION_FILE}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        with open(tmp, "w") as f:
            f.write(f"{version}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / VERSION_FILE)
        _fsync(self.directory)

    def _collect(self, version: int) -> None:
        kept = [v for v in _versions_on_disk(self.directory) if v <= version][-self.keep:]
        for v in _versions_on_disk(self.directory):
            if v not in kept:
                shutil.rmtree(version_dir(self.directory, v), ignore_errors=True)

    def close(self) -> None:
        """Nothing to release: the directory stays for receivers and later runs."""


class DiskReceiver:
    """Load the newest announced version from ``directory`` into ``target`` when asked.

    Args:
        target: a model, or an engine holding one in ``.model`` (see
            :class:`~.weight_push.WeightReceiver`).
        directory: the pusher's directory.
        poll_interval: seconds between looks at ``VERSION`` in :meth:`wait_for`.
        device: where tensors are read to before loading (``"cpu"``; the model's own
            device is reached by ``load_state_dict``'s copy).
    """

    def __init__(
        self, target: Any, directory: str | Path, *, poll_interval: float = 0.05,
        device: str = "cpu",
    ) -> None:
        self.model, self._loaded = receiver_target(target)
        self.directory = Path(directory)
        self.poll_interval = poll_interval
        self.device = device
        self.version: int | None = None

    def poll(self) -> int | None:
        """See :meth:`WeightReceiver.poll <.weight_push.WeightReceiver.poll>`."""
        for _ in range(10):  # each retry means a newer version was announced meanwhile
            newest = read_version(self.directory)
            if newest is None or newest == self.version:
                return self.version
            if self.version is not None and newest < self.version:
                raise WeightSyncError(
                    f"{self.directory} announces policy version {newest}, lower than version "
                    f"{self.version} this receiver holds: versions only go up (did the learner "
                    "resume from an older checkpoint? restart the rollout worker)"
                )
            try:
                self._load(newest)
            except FileNotFoundError:
                continue  # collected between reading VERSION and opening it
            return self.version
        raise WeightSyncError(f"could not read a stable version from {self.directory}")

    def _load(self, version: int) -> None:
        from safetensors import safe_open

        path = version_dir(self.directory, version) / WEIGHTS_FILE
        with safe_open(str(path), framework="pt", device=self.device) as f:
            meta = f.metadata() or {}
            if meta.get(_META_VERSION) != str(version):
                raise WeightSyncError(f"{path} is labelled version {meta.get(_META_VERSION)!r}, "
                                      f"announced as {version}")
            tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
        aliases = json.loads(meta.get(_META_ALIASES, "{}"))
        load_payload(self.model, tensors, aliases, partial=meta.get(_META_PARTIAL) == "1",
                     version=version)
        self.version = version
        self._loaded(version)

    def wait_for(self, version: int, timeout: float) -> int:
        """See :meth:`WeightReceiver.wait_for <.weight_push.WeightReceiver.wait_for>`."""
        deadline = time.monotonic() + timeout
        while True:
            held = self.poll()
            if held is not None and held >= version:
                return held
            if time.monotonic() >= deadline:
                raise WeightSyncError(
                    f"policy version {version} did not appear in {self.directory} within "
                    f"{timeout:g}s (this receiver holds {held})")
            time.sleep(self.poll_interval)

    def close(self) -> None:
        """Nothing to release."""

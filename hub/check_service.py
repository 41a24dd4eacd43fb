"""The hub's check in the service: a background worker after uploads, signed attestations.

An upload must not wait for a check (seconds, and untrusted code), yet every published
version must end up with a result. So the upload enqueues the new version and returns;
one worker thread, owned by the app, checks versions in order and records each result.
The queue is bounded: when it is full the version is recorded ``unchecked`` at once
(with the reason) rather than blocking uploads or growing without limit; an operator
reruns it with ``gymhub hub check``. Any error in the worker is recorded the same way.

Routes (added when the app has a key):

* ``GET /.well-known/gymhub-hub-key``: :meth:`HubKey.public_json`;
* ``GET /api/v1/packages/{owner}/{name}/{version}/attestation``: ``{"statement",
  "signature", "key_id", "details"}`` for the version's newest check, 404 when the
  version does not exist or was never checked.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from gymhub.errors import InvalidHubInput, VersionNotFound
from gymhub.hub.checker import DEFAULT_TIMEOUT_S, check_version, unchecked
from gymhub.hub.signing import HubKey, sign_statement, statement_for
from gymhub.hub.store import HubStore

__all__ = ["CheckWorker", "signing_router"]

log = logging.getLogger("gymhub.hub")


class CheckWorker:
    """One thread checking uploaded versions in order (see the module docstring).

    Args:
        store: where versions are read and results recorded.
        maxsize: versions waiting at most; beyond it they are recorded unchecked.
        timeout_s: each check's limit.
    """

    def __init__(self, store: HubStore, *, maxsize: int = 64,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.store = store
        self.timeout_s = timeout_s
        self._queue: queue.Queue[tuple[str, str, str] | None] = queue.Queue(maxsize)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, owner: str, name: str, version: str) -> bool:
        """Queue a version; ``False`` (and recorded unchecked) when the queue is full."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="gymhub-hub-check",
                                                daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait((owner, name, version))
            return True
        except queue.Full:
            self._record_unchecked(owner, name, version, "the hub's check queue was full; "
                                   "an operator can run 'gymhub hub check'")
            return False

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every queued check is recorded; ``False`` on timeout (tests, CLI)."""
        done = threading.Event()

        def join() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=join, daemon=True).start()
        return done.wait(timeout)

    def close(self) -> None:
        """Let the queued checks finish, then stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._check(*item)
            finally:
                self._queue.task_done()

    def _check(self, owner: str, name: str, version: str) -> None:
        try:
            check_version(self.store, owner, name, version, timeout_s=self.timeout_s)
        except Exception as exc:
            log.exception("checking %s/%s %s failed", owner, name, version)
            self._record_unchecked(owner, name, version,
                                   f"the checker failed: {type(exc).__name__}: {exc}")

    def _record_unchecked(self, owner: str, name: str, version: str, reason: str) -> None:
        with contextlib.suppress(Exception):  # the version may have been deleted meanwhile
            self.store.record_check(owner, name, version, "unchecked", unchecked(reason))


def signing_router(store: HubStore, key: HubKey) -> APIRouter:
    """The hub key and attestation routes (see the module docstring)."""
    router = APIRouter()

    @router.get("/.well-known/gymhub-hub-key")
    async def hub_key() -> dict[str, str]:
        return key.public_json()

    @router.get("/api/v1/packages/{owner}/{name}/{version}/attestation")
    async def attestation(owner: str, name: str, version: str) -> dict[str, Any]:
        def load() -> dict[str, Any]:
            try:
                info = store.resolve(owner, name, f"=={version}")
            except InvalidHubInput:
                raise VersionNotFound(f"{owner}/{name} has no version {version!r}") from None
            check = store.latest_check(owner, name, info.version)
            if check is None:
                raise VersionNotFound(f"{owner}/{name} {info.version} has not been checked yet")
            statement = statement_for(info, check)
            return {"statement": statement, "signature": sign_statement(key, statement),
                    "key_id": key.key_id, "details": dict(check.details)}

        return await run_in_threadpool(load)

    return router

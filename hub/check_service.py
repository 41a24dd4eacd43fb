"""The hub's check in the service: a background worker after uploads, signed attestations.

An upload must not wait for a check (seconds, and untrusted code), yet every published
version must end up with a result. So the upload queues the new version in the database
(:mod:`gymhub.hub.check_queue`) and returns; a worker thread, owned by the app, claims
queued versions (owners served round-robin), checks each and records the result. The
queue is a table, not memory: it has no bound that could turn a version away, it
survives a restart (a new worker picks up what the old one left, a dead worker's claim
is taken over after the check's deadline), and several hub processes on one database
share it without checking a version twice. The worker wakes at once on a local
:meth:`CheckWorker.submit` and polls every ``poll_s`` for jobs queued elsewhere. Any error
of the checker is recorded ``unchecked`` with the reason; an operator reruns it with
``gymhub hub check``.

Routes (added when the app has a key):

* ``GET /.well-known/gymhub-hub-key``: :meth:`HubKey.public_json`;
* ``GET /api/v1/packages/{owner}/{name}/{version}/attestation``: ``{"statement",
  "signature", "key_id", "details"}`` for the version's newest check, 404 when the
  version does not exist or was never checked; a version still waiting for its check
  answers 404 too (clients read it as "not checked") with ``"check": {"status":
  "queued"}`` beside the error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from gymhub.errors import InvalidHubInput, VersionNotFound
from gymhub.hub.check_queue import (
    QueuedJob,
    claim,
    enqueue,
    enqueue_unchecked,
    finish,
    pending_count,
    queued_versions,
)
from gymhub.hub.checker import DEFAULT_TIMEOUT_S, check_version, unchecked
from gymhub.hub.signing import HubKey, sign_statement, statement_for
from gymhub.hub.store import HubStore

__all__ = ["DEFAULT_MAX_ATTEMPTS", "CheckWorker", "signing_router"]

log = logging.getLogger("gymhub.hub")

#: Claims of one job before it is given up as ``unchecked`` (each earlier worker died).
DEFAULT_MAX_ATTEMPTS = 3
#: Added to the check's own timeout before its claim counts as a dead worker's.
_CLAIM_MARGIN_S = 60.0


class CheckWorker:
    """One thread checking queued versions (see the module docstring).

    Args:
        store: where versions are read and results recorded; its database holds the queue.
        maxsize: ignored; kept so existing callers still construct a worker. The queue is
            a database table and never refuses a version.
        timeout_s: each check's limit.
        poll_s: how often an idle worker looks for jobs queued by another process.
        stale_after_s: age at which a claim is taken to be a dead worker's and claimed
            again; default ``timeout_s`` plus a minute.
        max_attempts: claims of one job before it is recorded ``unchecked`` (a version
            that kills its worker every time must not block the queue forever).
        recover: on start, also queue versions that have neither a result nor a job
            (a publish that died before queueing, a hub that ran without a checker).
    """

    def __init__(self, store: HubStore, *, maxsize: int | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, poll_s: float = 2.0,
                 stale_after_s: float | None = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 recover: bool = True) -> None:
        del maxsize  # the queue lives in the database now
        self.store = store
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.stale_after_s = timeout_s + _CLAIM_MARGIN_S if stale_after_s is None \
            else stale_after_s
        self.max_attempts = max_attempts
        self.recover = recover
        self.worker_id = f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(4)}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._started = threading.Event()  # set once the thread's recovery sweep is done
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the thread (idempotent); the app calls this on startup.

        Jobs already in the database (queued before a restart, or by another process)
        are picked up from here on, without waiting for a new upload.
        """
        with self._lock:
            if self._thread is None:
                self._stop.clear()
                self._started.clear()
                self._thread = threading.Thread(target=self._loop, name="gymhub-hub-check",
                                                daemon=True)
                self._thread.start()

    def submit(self, owner: str, name: str, version: str) -> bool:
        """Queue a version and wake the worker; ``False`` when there is no such version.

        Never refuses for lack of room: the queue is a database table.
        """
        try:
            queued = enqueue(self.store.db, owner, name, version)
        except InvalidHubInput:
            queued = False
        if not queued:
            log.warning("not queueing %s/%s %s for the check: no such version",
                        owner, name, version)
        self.start()
        self._wake.set()
        return queued

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no job is left in the queue; ``False`` on timeout (tests, CLI).

        Counts every job in the database, this worker's or not, so it returns once
        every queued check is recorded. Starts the worker if it is not running.
        """
        self.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._started.wait(timeout):  # what the start-up sweep queues counts too
            return False
        while pending_count(self.store.db) > 0:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with self._progress:  # woken by each finished job; polled for other workers'
                self._progress.wait(0.2 if left is None else min(left, 0.2))
        return True

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread after the check it is running, if any.

        Jobs still queued stay in the database for the next start; nothing is lost. A
        ``timeout`` bounds the wait for a running check: the thread is a daemon, and a
        check cut short by the process's exit is claimed again once its claim is stale.
        """
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            self._wake.set()
            thread.join(timeout)

    def _loop(self) -> None:
        if self.recover:
            try:
                if count := enqueue_unchecked(self.store.db):
                    log.info("queued %d version(s) that had no check result", count)
            except Exception:
                log.exception("could not queue the versions that have no check result")
        self._started.set()
        while not self._stop.is_set():
            self._wake.clear()  # before claiming: a submit from here on wakes the next wait
            try:
                job = claim(self.store.db, self.worker_id, stale_after_s=self.stale_after_s)
            except Exception:
                log.exception("claiming a check job failed")
                job = None
            if job is None:
                self._wake.wait(self.poll_s)
                continue
            self._run(job)
            with self._progress:
                self._progress.notify_all()

    def _run(self, job: QueuedJob) -> None:
        """Check one claimed job and remove it from the queue (its result is recorded)."""
        try:
            if job.attempts > self.max_attempts:
                self._record_unchecked(
                    job.owner, job.name, job.version,
                    f"the check was abandoned: {job.attempts - 1} workers stopped while "
                    "checking this version; an operator can run 'gymhub hub check'")
            else:
                self._check(job.owner, job.name, job.version)
        finally:
            try:
                finish(self.store.db, job.id, self.worker_id)
            except Exception:  # the claim turns stale and the job is checked again
                log.exception("could not remove check job %d from the queue", job.id)

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

    @router.get("/api/v1/packages/{owner}/{name}/{version}/attestation", response_model=None)
    async def attestation(owner: str, name: str,
                          version: str) -> dict[str, Any] | JSONResponse:
        def load() -> dict[str, Any] | JSONResponse:
            try:
                info = store.resolve(owner, name, f"=={version}")
            except InvalidHubInput:
                raise VersionNotFound(f"{owner}/{name} has no version {version!r}") from None
            check = store.latest_check(owner, name, info.version)
            if check is None:
                if info.version in queued_versions(store.db, owner, name):
                    exc = VersionNotFound(f"{owner}/{name} {info.version} is queued for the "
                                          "hub's check")
                    return JSONResponse({"error": {"code": exc.code, "message": str(exc)},
                                         "check": {"status": "queued"}}, status_code=404)
                raise VersionNotFound(f"{owner}/{name} {info.version} has not been checked yet")
            statement = statement_for(info, check)
            return {"statement": statement, "signature": sign_statement(key, statement),
                    "key_id": key.key_id, "details": dict(check.details)}

        return await run_in_threadpool(load)

    return router

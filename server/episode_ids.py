"""Episode ids that say which server start issued them, and fresh seeds.

Episodes live in one server process's memory, so a restarted server (a crash, a
redeploy, a Ray actor restarted on another node) holds none of its predecessor's
episodes. Answering a step for such an episode "not found" hides an infrastructure
failure behind what looks like the caller's mistake, and learners then scored those
rollouts 0. So every start draws a random *incarnation* and writes it into each id it
issues, ``<incarnation>-<random>``: a server that sees a well-formed id of another
incarnation knows the episode was lost with a previous start and answers
``episode_lost`` (410), while an unknown id of its own incarnation stays
``episode_not_found`` (404).

Ids stay unguessable (96 random bits after the incarnation), URL-safe and 25
characters long.
"""

from __future__ import annotations

import base64
import os
import re
import secrets

__all__ = ["IdSource", "incarnation_of", "new_incarnation"]

#: ``<8 hex digits>-<16 URL-safe base64 characters>``, as :meth:`IdSource.episode_id` writes.
_EPISODE_ID = re.compile(r"([0-9a-f]{8})-[A-Za-z0-9_-]{16}")


def new_incarnation() -> str:
    """A fresh incarnation: 8 hex digits, 32 random bits (a repeat is 1 in 4 billion)."""
    return secrets.token_hex(4)


def incarnation_of(episode_id: str) -> str | None:
    """The incarnation written into a well-formed episode id, else ``None``.

    A malformed id (a typo, an id from a server before incarnations) names no
    incarnation, so it is answered as unknown, as it always was.
    """
    match = _EPISODE_ID.fullmatch(episode_id)
    return match.group(1) if match else None


class IdSource:
    """Unguessable episode ids of one incarnation and fresh seeds, from the OS generator.

    One ``os.urandom`` call per id was a syscall per episode, and with busy worker
    threads each syscall meant waiting to take the GIL back (~70 us a call under load).
    Reading 4 KiB at a time keeps the same source at 1/256 of the calls.

    Attributes:
        incarnation: written at the front of every id (see :func:`new_incarnation`).
    """

    def __init__(self, incarnation: str) -> None:
        self.incarnation = incarnation
        self._buf = b""
        self._at = 0

    def _take(self, n: int) -> bytes:
        if self._at + n > len(self._buf):
            self._buf, self._at = os.urandom(4096), 0
        out = self._buf[self._at:self._at + n]
        self._at += n
        return out

    def episode_id(self) -> str:
        """``<incarnation>-`` and 16 URL-safe characters carrying 96 random bits."""
        return f"{self.incarnation}-{base64.urlsafe_b64encode(self._take(12)).decode()}"

    def seed(self) -> int:
        """A uniform seed in [0, 2**31)."""
        return int.from_bytes(self._take(4), "big") >> 1

"""A file that lists environment servers, one URL per line, re-read when it changes.

Launchers (``gymhub launch ray --urls-file``, a Kubernetes operator, a script) start
servers concurrently and write each URL as it accepts requests; a server that Ray
restarts elsewhere comes back under a new URL. The learner therefore reads the list
from a file rather than from its own command line, and re-reads it while it trains.

The format is what a shell script can write: one ``http(s)://host:port`` per line;
blank lines and ``#`` comments are ignored; a repeated URL counts once. Writers
should replace the file atomically (:func:`write_urls_file` does), so a reader never
sees half a line.

Reading is cheap but not free, and an :class:`~gymhub.client.pool.EnvPool` asks on
every episode it opens, so :class:`UrlFile` looks at the file at most every
``check_s`` seconds, and parses it only when its inode, size or modification time
changed.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from gymhub.errors import ConfigError

__all__ = ["UrlFile", "parse_urls", "write_urls_file"]


def parse_urls(text: str, where: str = "the URL list") -> list[str]:
    """The server URLs of a list's text, in order, each once.

    Raises:
        ConfigError: a line that is not an ``http://`` or ``https://`` URL with a host
            (named by its line number).
    """
    urls: dict[str, None] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = urlsplit(line)
        if parts.scheme not in ("http", "https") or not parts.netloc or " " in line:
            raise ConfigError(f"{where}:{number}: not a server URL: {line!r} "
                              "(expected http://host:port, one per line)")
        urls[line.rstrip("/")] = None
    return list(urls)


def write_urls_file(path: str | os.PathLike[str], urls: Iterable[str]) -> None:
    """Write ``urls`` to ``path`` atomically (a reader sees the old list or the new one)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(f"{u}\n" for u in urls)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class UrlFile:
    """The current server list of one file.

    Args:
        path: the file; it may not exist yet (a launcher has not written it).
        check_s: look at the file at most this often (seconds).

    Attributes:
        urls: the list as last read (empty while the file is missing or lists none).
        exists: whether the file existed at the last look.
    """

    def __init__(self, path: str | os.PathLike[str], *, check_s: float = 1.0) -> None:
        self.path = Path(path)
        self.check_s = check_s
        self.urls: list[str] = []
        self.exists = False
        self._signature: tuple[int, int, int] | None = None
        self._checked = float("-inf")

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read the file if it changed (and ``check_s`` passed); True when ``urls`` did.

        Raises:
            ConfigError: a line is not a URL, or the file cannot be read.
        """
        now = time.monotonic()
        if not force and now - self._checked < self.check_s:
            return False
        self._checked = now
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self.exists, self._signature = False, None
            return self._set([])
        signature = (st.st_ino, st.st_size, st.st_mtime_ns)
        self.exists = True
        if signature == self._signature:
            return False
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:  # replaced between the stat and the read: next look
            return False
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{self.path}: cannot read the server URL list: {exc}") from exc
        urls = parse_urls(text, str(self.path))
        self._signature = signature
        return self._set(urls)

    def _set(self, urls: list[str]) -> bool:
        changed = urls != self.urls
        self.urls = urls
        return changed

    def problem(self) -> str:
        """Why the file gives no server, for an error message ("" when it lists some)."""
        if self.urls:
            return ""
        if not self.exists:
            return f"the server URL file {self.path} does not exist"
        return f"the server URL file {self.path} lists no server"

"""Read a zip archive in memory, member by member, refusing anything ambiguous or unsafe.

Nothing is ever extracted: the hub reads bytes it holds in memory and never creates a
file named by an archive. The threats are the ones registries have met:

* **Parser confusion** (uv CVE-2025-54368, "nullifAI"): two tools that read one archive
  differently. The hub therefore accepts only a zip that every reader must read one way:
  the end record exactly at the end (no comment, no trailing data, no zip64), the central
  directory right before it, local records laid end to end from offset 0 (no gaps, no
  prepended data, no overlaps), local headers agreeing with the central directory, no
  Info-ZIP Unicode-path fields (an alternative name some unzippers prefer), and the
  standard library's :mod:`zipfile` must see the same names at the same offsets.
* **Escapes**: absolute names, ``..``, backslashes, drive letters, NUL and control
  characters, symbolic links and other non-regular files, setuid bits.
* **Collisions**: the same name twice, or two names one file system folds together
  (case, Unicode NFC), or a file used as a directory.
* **Zip bombs**: caps on member count, per-member and total size and compression ratio
  from the declared sizes, and then the *actual* inflated bytes are counted while
  streaming, stopping one byte past the declared size, so a size that lies costs nothing.

Only stored and deflated members are read: the two methods every wheel tool writes;
each extra decoder is one more place for two readers to disagree.
"""

from __future__ import annotations

import hashlib
import io
import re
import stat
import struct
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from gymhub.errors import ArchiveTooLarge, CorruptArchive, DuplicateMember, UnsafeMember

__all__ = ["ArchiveLimits", "Member", "ZipContents", "scan_zip"]

_MiB = 1 << 20
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_EOCD = struct.Struct("<4sHHHHIIH")
_LOCAL_SIG, _CENTRAL_SIG, _EOCD_SIG = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
_ZIP64_LOCATOR_SIG, _DESCRIPTOR_SIG = b"PK\x06\x07", b"PK\x07\x08"
_FLAG_ENCRYPTED, _FLAG_DESCRIPTOR, _FLAG_STRONG, _FLAG_UTF8, _FLAG_MASKED = 1, 8, 64, 2048, 8192
_REFUSED_EXTRA = {0x0001: "a zip64 field", 0x7075: "an Info-ZIP Unicode path field"}
_CHUNK = 64 * 1024
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps on what one upload may cost the hub to read.

    The defaults fit environment packages (code, tasks, fixtures) with a wide margin;
    a hub serving bigger fixtures raises them explicitly.

    Attributes:
        max_archive_bytes: size of the uploaded file.
        max_members: entries in the central directory.
        max_member_bytes: uncompressed size of any one member.
        max_total_bytes: uncompressed size of all members together.
        max_ratio: uncompressed / compressed size of one member, checked for members
            larger than ``ratio_floor_bytes`` (small files may compress well and are
            bounded by the size caps anyway).
        ratio_floor_bytes: see ``max_ratio``.
        max_name_bytes: length of a member name, in UTF-8 bytes.
        max_metadata_bytes: size of each ``.dist-info`` file read into memory.
        entry_point_groups: the entry-point groups a wheel may declare. Others run code
            on the installer's machine outside an environment (``console_scripts``
            shadowing ``pip``, ``pytest11`` plugins), so they are refused.
    """

    max_archive_bytes: int = 64 * _MiB
    max_members: int = 5_000
    max_member_bytes: int = 32 * _MiB
    max_total_bytes: int = 256 * _MiB
    max_ratio: float = 100.0
    ratio_floor_bytes: int = 1 * _MiB
    max_name_bytes: int = 512
    max_metadata_bytes: int = 1 * _MiB
    entry_point_groups: frozenset[str] = field(default_factory=lambda: frozenset({"gymhub.envs"}))


@dataclass(frozen=True)
class Member:
    """One entry as the hub read it: sizes and digest are of the real inflated bytes."""

    name: str
    is_dir: bool
    size: int
    sha256: bytes
    mode: int


@dataclass(frozen=True)
class ZipContents:
    """Every member in archive order, and the contents of those the caller asked to keep."""

    members: tuple[Member, ...]
    kept: dict[str, bytes]


def scan_zip(data: bytes, limits: ArchiveLimits,
             keep: Callable[[str], bool] = lambda name: False) -> ZipContents:
    """Check the whole archive and stream every member once.

    Args:
        data: the archive, in memory.
        limits: the caps.
        keep: which members' contents to return (each at most ``max_metadata_bytes``).

    Raises:
        CorruptArchive, UnsafeMember, DuplicateMember, ArchiveTooLarge: naming the
            member at fault where there is one.
    """
    if len(data) > limits.max_archive_bytes:
        raise ArchiveTooLarge(f"archive is {len(data)} bytes, over the cap of "
                              f"{limits.max_archive_bytes}")
    cd_offset, count = _end_record(data, limits)
    entries = list(_central_entries(data, cd_offset, count, limits))
    _check_names(entries)
    _agree_with_zipfile(data, entries)
    members, kept = [], {}
    expected_offset = 0
    for e in sorted(entries, key=lambda e: e.offset):
        if e.offset < expected_offset:
            prev = next(p for p in entries if p.offset <= e.offset < p.end and p is not e)
            if prev.offset == e.offset:
                raise DuplicateMember(f"shares its stored record with {prev.name!r} "
                                      "(two names for one file, a hard link)", e.name)
            raise CorruptArchive(f"its record overlaps that of {prev.name!r}", e.name)
        if e.offset > expected_offset:
            raise CorruptArchive(f"{e.offset - expected_offset} unaccounted bytes before "
                                 "this member's record (hidden or prepended data)", e.name)
        expected_offset = e.end = _local_record(data, e)
        members.append(e)
    if expected_offset != cd_offset:
        raise CorruptArchive(f"{cd_offset - expected_offset} unaccounted bytes between the "
                             "last member and the central directory")
    out = []
    for e in sorted(members, key=lambda e: e.index):
        digest, body = _inflate(data, e, limits, keep(e.name))
        if body is not None:
            kept[e.name] = body
        out.append(Member(e.name, e.is_dir, e.usize, digest, e.mode))
    return ZipContents(tuple(out), kept)


@dataclass
class _Entry:
    index: int
    name: str
    raw_name: bytes
    flags: int
    method: int
    crc: int
    csize: int
    usize: int
    offset: int
    mode: int
    is_dir: bool
    data_start: int = 0
    end: int = 0


def _end_record(data: bytes, limits: ArchiveLimits) -> tuple[int, int]:
    size = len(data)
    if size < _EOCD.size or (data[:4] not in (_LOCAL_SIG, _EOCD_SIG)
                             and _EOCD_SIG not in data[-65_557:]):
        raise CorruptArchive("not a zip archive")
    if data[-_EOCD.size:-_EOCD.size + 4] != _EOCD_SIG:
        raise CorruptArchive("the end-of-central-directory record is not at the end of the "
                             "file (truncated, or a comment or trailing data follows it)")
    _, disk, cd_disk, n_disk, n_total, cd_size, cd_offset, comment = _EOCD.unpack(
        data[-_EOCD.size:])
    eocd = size - _EOCD.size
    if comment:
        raise CorruptArchive("the end record claims a comment that the file does not hold")
    if disk or cd_disk or n_disk != n_total:
        raise CorruptArchive("multi-disk archives are not accepted")
    if data[eocd - 20:eocd - 16] == _ZIP64_LOCATOR_SIG or 0xFFFFFFFF in (cd_size, cd_offset) \
            or n_total == 0xFFFF:
        raise CorruptArchive("zip64 archives are not accepted (the size caps never need them)")
    if n_total > limits.max_members:
        raise ArchiveTooLarge(f"{n_total} members, over the cap of {limits.max_members}")
    if cd_offset + cd_size != eocd:
        raise CorruptArchive(f"the central directory ({cd_size} bytes at {cd_offset}) does "
                             f"not end where the end record starts ({eocd}): truncated or "
                             "padded archive")
    if _EOCD_SIG in data[cd_offset:eocd]:
        raise CorruptArchive("a second end-of-central-directory record precedes the last one")
    return cd_offset, n_total


def _central_entries(data: bytes, pos: int, count: int,
                     limits: ArchiveLimits) -> Iterator[_Entry]:
    total = 0
    for index in range(count):
        end_of_cd = len(data) - _EOCD.size
        if data[pos:pos + 4] != _CENTRAL_SIG or pos + _CENTRAL.size > end_of_cd:
            raise CorruptArchive(f"central directory entry {index} is missing or damaged")
        (_, _, _, flags, method, _, _, crc, csize, usize, nlen, xlen, clen, disk, _,
         attr, offset) = _CENTRAL.unpack_from(data, pos)
        if pos + _CENTRAL.size + nlen + xlen + clen > end_of_cd or disk:
            raise CorruptArchive(f"central directory entry {index} runs past its directory")
        raw = bytes(data[pos + 46:pos + 46 + nlen])
        name = _decode_name(raw, flags, index, limits)
        _check_extra(data[pos + 46 + nlen:pos + 46 + nlen + xlen], name)
        pos += 46 + nlen + xlen + clen
        if flags & (_FLAG_ENCRYPTED | _FLAG_STRONG | _FLAG_MASKED):
            raise CorruptArchive("encrypted member", name)
        if method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise CorruptArchive(f"compression method {method} (only stored and deflate)", name)
        mode, is_dir = _file_type(name, attr, usize)
        if usize > limits.max_member_bytes:
            raise ArchiveTooLarge(f"declares {usize} bytes, over the per-member cap of "
                                  f"{limits.max_member_bytes}", name)
        total += usize
        if total > limits.max_total_bytes:
            raise ArchiveTooLarge(f"the members declare more than the total cap of "
                                  f"{limits.max_total_bytes} bytes", name)
        if usize > limits.ratio_floor_bytes and usize > limits.max_ratio * max(csize, 1):
            raise ArchiveTooLarge(f"compression ratio {usize / max(csize, 1):.0f}:1 "
                                  f"({csize} -> {usize} bytes) is over the cap of "
                                  f"{limits.max_ratio:.0f}:1 (a zip bomb?)", name)
        yield _Entry(index, name, raw, flags, method, crc, csize, usize, offset, mode, is_dir)
    if pos != len(data) - _EOCD.size:
        raise CorruptArchive("the central directory holds more than its entry count says")


def _decode_name(raw: bytes, flags: int, index: int, limits: ArchiveLimits) -> str:
    if len(raw) > limits.max_name_bytes:
        raise UnsafeMember(f"name of {len(raw)} bytes, over {limits.max_name_bytes}",
                           raw[:80].decode("utf-8", "replace") + "...")
    try:
        # cp437 and UTF-8 agree only on ASCII: anything else needs the UTF-8 flag.
        return raw.decode("utf-8" if flags & _FLAG_UTF8 else "ascii")
    except UnicodeDecodeError:
        raise UnsafeMember("name is not valid UTF-8 (or lacks the UTF-8 flag)",
                           raw.decode("utf-8", "replace")) from None


def _check_extra(extra: bytes, name: str) -> None:
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, pos)
        if tag in _REFUSED_EXTRA:
            raise CorruptArchive(f"carries {_REFUSED_EXTRA[tag]} that readers treat "
                                 "differently", name)
        pos += 4 + size


def _file_type(name: str, attr: int, usize: int) -> tuple[int, bool]:
    mode = attr >> 16
    kind = stat.S_IFMT(mode)
    is_dir = name.endswith("/")
    if kind == stat.S_IFLNK:
        raise UnsafeMember("symbolic link (only regular files are accepted)", name)
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise UnsafeMember(f"special file of type {kind:o} (only regular files)", name)
    if mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX):
        raise UnsafeMember(f"setuid, setgid or sticky bit in mode {mode:o}", name)
    if (kind == stat.S_IFDIR or attr & 0x10) != is_dir or (is_dir and kind == stat.S_IFREG):
        raise UnsafeMember("directory flag and trailing '/' disagree", name)
    if is_dir and usize:
        raise UnsafeMember("directory entry with content", name)
    return mode, is_dir


def _agree_with_zipfile(data: bytes, entries: list[_Entry]) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            theirs = [(i.filename, i.header_offset) for i in zf.infolist()]
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, struct.error) as exc:
        raise CorruptArchive(f"the standard zip reader refuses it: {exc}") from None
    ours = [(e.name, e.offset) for e in entries]
    if theirs != ours:
        raise CorruptArchive("the standard zip reader sees different members than the hub "
                             "(an archive crafted for parser confusion)")


def _check_names(entries: list[_Entry]) -> None:
    seen: dict[str, str] = {}
    files: set[str] = set()
    for e in entries:
        _check_path(e.name)
        key = unicodedata.normalize("NFC", e.name.rstrip("/")).casefold()
        if (other := seen.get(key)) is not None:
            why = "appears twice" if other == e.name else (
                f"collides with {other!r} after case folding or Unicode normalisation")
            raise DuplicateMember(why, e.name)
        seen[key] = e.name
        if not e.is_dir:
            files.add(key)
    for key, name in seen.items():
        parts = key.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                raise DuplicateMember(f"is inside {'/'.join(parts[:i])!r}, which is a file",
                                      name)


def _check_path(name: str) -> None:
    if not name or name == "/":
        raise UnsafeMember("empty name", name)
    if _CONTROL.search(name):
        raise UnsafeMember("NUL or control character in the name", name)
    if "\\" in name:
        raise UnsafeMember("backslash in the name (a separator on Windows)", name)
    if name.startswith("/"):
        raise UnsafeMember("absolute path", name)
    if _DRIVE.match(name) or ":" in name:
        raise UnsafeMember("drive letter or ':' in the name", name)
    parts = name[:-1].split("/") if name.endswith("/") else name.split("/")
    if ".." in parts:
        raise UnsafeMember("'..' component (path traversal)", name)
    if "." in parts or "" in parts:
        raise UnsafeMember("'.' or empty path component", name)


def _local_record(data: bytes, e: _Entry) -> int:
    """Cross-check the local header with the central entry; returns the record's end."""
    if data[e.offset:e.offset + 4] != _LOCAL_SIG or e.offset + _LOCAL.size > len(data):
        raise CorruptArchive("no local file header where the central directory points",
                             e.name)
    (_, _, flags, method, _, _, crc, csize, usize, nlen, xlen) = _LOCAL.unpack_from(
        data, e.offset)
    start = e.offset + _LOCAL.size
    if bytes(data[start:start + nlen]) != e.raw_name:
        raise CorruptArchive("local header and central directory name it differently",
                             e.name)
    _check_extra(data[start + nlen:start + nlen + xlen], e.name)
    if flags != e.flags or method != e.method:
        raise CorruptArchive("local header and central directory disagree on flags or "
                             "method", e.name)
    e.data_start = start + nlen + xlen
    end = e.data_start + e.csize
    if flags & _FLAG_DESCRIPTOR:
        sig = data[end:end + 4] == _DESCRIPTOR_SIG
        body = data[end + 4 * sig:end + 4 * sig + 12]
        if len(body) < 12 or struct.unpack("<III", body) != (e.crc, e.csize, e.usize):
            raise CorruptArchive("data descriptor disagrees with the central directory",
                                 e.name)
        if (crc, csize, usize) not in ((0, 0, 0), (e.crc, e.csize, e.usize)):
            raise CorruptArchive("local header sizes disagree with the central directory",
                                 e.name)
        end += 4 * sig + 12
    elif (crc, csize, usize) != (e.crc, e.csize, e.usize):
        raise CorruptArchive(f"local header says {usize} bytes (crc {crc:08x}), central "
                             f"directory {e.usize} (crc {e.crc:08x})", e.name)
    if end > len(data):
        raise CorruptArchive("member data runs past the end of the archive", e.name)
    return end


def _inflate(data: bytes, e: _Entry, limits: ArchiveLimits,
             keep: bool) -> tuple[bytes, bytes | None]:
    """Stream one member: real size, CRC and sha256, stopping one byte past the claim."""
    if keep and e.usize > limits.max_metadata_bytes:
        raise ArchiveTooLarge(f"{e.usize} bytes, over the {limits.max_metadata_bytes}-byte "
                              "cap for metadata files", e.name)
    sha, crc, produced = hashlib.sha256(), 0, 0
    body = bytearray() if keep else None
    raw = memoryview(data)[e.data_start:e.data_start + e.csize]
    inflater = None
    if e.method == zipfile.ZIP_STORED:
        if e.csize != e.usize:
            raise CorruptArchive(f"stored member of {e.csize} bytes declares {e.usize}",
                                 e.name)
        chunks: Iterator[bytes] = (bytes(raw[i:i + _CHUNK]) for i in range(0, len(raw), _CHUNK))
    else:
        inflater = zlib.decompressobj(-15)
        chunks = _deflate_chunks(inflater, raw, e.usize + 1, e.name)
    try:
        for chunk in chunks:
            produced += len(chunk)
            if produced > e.usize:
                raise ArchiveTooLarge(f"inflates past its declared {e.usize} bytes (a size "
                                      "that lies); stopped reading", e.name)
            sha.update(chunk)
            crc = zlib.crc32(chunk, crc)
            if body is not None:
                body += chunk
    except zlib.error as exc:
        raise CorruptArchive(f"damaged deflate data: {exc}", e.name) from None
    if inflater is not None and (not inflater.eof or inflater.unused_data):
        why = "ends before" if not inflater.eof else "has bytes after"
        raise CorruptArchive(f"the compressed data {why} the end of its deflate stream",
                             e.name)
    if produced != e.usize:
        raise CorruptArchive(f"inflates to {produced} bytes but declares {e.usize}", e.name)
    if crc != e.crc:
        raise CorruptArchive(f"CRC {crc:08x} does not match the declared {e.crc:08x}", e.name)
    return sha.digest(), None if body is None else bytes(body)


def _deflate_chunks(inflater: zlib._Decompress, raw: memoryview, room: int,
                    name: str) -> Iterator[bytes]:
    """Inflate 64 KiB at a time, in and out, never more than ``room`` bytes in all."""
    pos, pending = 0, b""
    while room > 0 and not inflater.eof:
        if not pending and pos >= len(raw):
            out = inflater.decompress(b"", min(_CHUNK, room))  # drain what zlib holds
            if not out:
                return
        else:
            if not pending:
                pending, pos = bytes(raw[pos:pos + _CHUNK]), pos + _CHUNK
            out = inflater.decompress(pending, min(_CHUNK, room))
            pending = inflater.unconsumed_tail
        room -= len(out)
        if out:
            yield out
    if inflater.eof and pos < len(raw):
        raise CorruptArchive("the compressed data has bytes after the end of its deflate "
                             "stream", name)

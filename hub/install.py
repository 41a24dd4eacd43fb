"""``gymhub install``: one exact file from one hub, verified before pip sees it.

The anchors' install failures came from letting an installer *resolve*: a name looked up
on several indexes lets the highest version anywhere win (dependency confusion), and a
yanked or unchecked version slips in by range. So this installs by digest instead:

1. resolve ``OWNER/NAME[@VERSION]`` on the hub's JSON API (latest skips yanked versions;
   an exact pin may take one, with a warning); an unknown name gets suggestions, never a
   near name;
2. fetch the hub's signing key and pin it in the lock on first use; a different key later
   is refused unless ``--accept-new-key`` (a key change is a question about the hub, not
   about one package, so ``--trust`` does not answer it);
3. verify the check attestation offline against the pinned key and match its statement to
   the very file chosen; a failed or missing check is refused unless ``--trust`` (or the
   lock already trusts this sha256). An attestation older (``checked_at``) than one the
   lock already recorded for the same digest is refused: a replayed "passed" cannot
   hide a newer "failed";
4. download ``/files/{sha256}/{filename}``, hash what arrived, validate the wheel with
   the hub's own :func:`~gymhub.hub.archive.validate_wheel` (its own namespace only, no
   ``.pth``, no scripts: a compromised hub must not serve what an honest one refuses),
   and install that file with ``pip --isolated --no-index --no-deps``: no index is
   consulted for the hub package, so no other index can serve a "higher" version of it;
   its ordinary dependencies then come from the user's normal index in a separate pip
   call (hub packages never do);
5. record the install in ``gymhub.lock``.
"""

from __future__ import annotations

import base64
import importlib.metadata
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from packaging.markers import default_environment
from packaging.requirements import Requirement

from gymhub.errors import (
    AttestationMismatch,
    ConfigError,
    DigestMismatch,
    KeyMismatch,
    PackageNotFound,
    SignatureInvalid,
    UntrustedPackage,
)
from gymhub.hub.archive import validate_wheel
from gymhub.hub.client import HubClient
from gymhub.hub.lock import Lock, now_iso
from gymhub.hub.names import DIST_PREFIX, not_found_message
from gymhub.hub.records import VersionInfo, pick_version
from gymhub.hub.signing import STATEMENT_TYPE, key_id, verify_statement

__all__ = ["install", "install_locked"]

_MATCHED = ("owner", "name", "version", "filename", "sha256")

Say = Callable[[str], None]


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _resolve(client: HubClient, owner: str, name: str, version: str | None,
             say: Say) -> dict[str, Any]:
    """The version row to install; an unknown package only ever gets suggestions."""
    try:
        page = client.package(owner, name)
    except PackageNotFound:
        ids = {str(r["id"]) for text in (name, owner) for r in client.search(text)}
        raise PackageNotFound(not_found_message("environment", f"{owner}/{name}", ids)) \
            from None
    rows = {r["version"]: r for r in page["versions"]}
    # pick_version reads only ``version`` and ``yanked``, which the API rows carry as keys.
    infos = [cast(VersionInfo, _Row(r["version"], bool(r["yanked"]))) for r in rows.values()]
    row: dict[str, Any] = rows[pick_version(infos, version, f"{owner}/{name}").version]
    if row["yanked"]:
        say(f"warning: {owner}/{name} {row['version']} is yanked: "
            f"{row.get('yank_reason') or 'no reason given'}")
    return row


class _Row:
    def __init__(self, version: str, yanked: bool) -> None:
        self.version, self.yanked = version, yanked


def _hub_key(client: HubClient, lock: Lock, accept_new_key: bool,
             say: Say) -> dict[str, Any] | None:
    """The key to verify with: the pinned one, pinning it on first use."""
    served = client.hub_key()
    if served is None:
        known = lock.pinned_key(client.url)
        return known if known is not None and "key_id" in known else None
    raw = base64.b64decode(str(served.get("public_key", "")))
    kid = key_id(raw)
    if served.get("algorithm") != "ed25519" or len(raw) != 32 or served.get("key_id") != kid:
        raise SignatureInvalid(f"the hub at {client.url} serves a malformed signing key")
    pinned = lock.pinned_key(client.url)
    if pinned is None or "key_id" not in pinned:
        say(f"pinned the signing key {kid} of {client.url} in {lock.path} "
            "(trust on first use)")
    elif pinned["key_id"] != kid:
        if not accept_new_key:
            raise KeyMismatch(
                f"the hub at {client.url} now signs with key {kid}, not the key "
                f"{pinned['key_id']} pinned in {lock.path}; if the hub's operator confirms "
                "the key was rotated, re-run with --accept-new-key to pin the new one "
                "(--trust does not do this)")
        say(f"warning: re-pinned {client.url} from key {pinned['key_id']} to {kid} "
            "(--accept-new-key)")
    else:
        return pinned
    seen = (pinned or {}).get("seen_checks")
    lock.pin_key(client.url, kid, str(served["public_key"]))
    if seen is not None:
        _seen_checks(lock, client.url).update(seen)
    return lock.pinned_key(client.url)


def _check_status(client: HubClient, key: dict[str, Any] | None, row: dict[str, Any],
                  seen: str | None) -> tuple[str, str | None]:
    """The signed check status of exactly this file, and the check's ``checked_at``.

    ``seen``: the newest ``checked_at`` the lock recorded for this digest; an older
    attestation is a replay and is refused.
    """
    att = client.attestation(row["owner"], row["name"], row["version"])
    if att is None or key is None:
        return "unchecked", None
    statement = att.get("statement")
    refusal = (f"the check attestation of {row['id']} {row['version']} does not verify under "
               f"the pinned key {key['key_id']}: refusing it (--trust does not override this)")
    if not isinstance(statement, dict) or att.get("key_id") != key["key_id"]:
        raise SignatureInvalid(refusal)
    try:
        verify_statement(key["public_key"], statement, str(att.get("signature", "")))
    except SignatureInvalid as exc:
        raise SignatureInvalid(f"{refusal}: {exc}") from None
    wrong = [k for k in _MATCHED if statement.get(k) != row[k]]
    if statement.get("type") != STATEMENT_TYPE or wrong:
        raise AttestationMismatch(
            f"the signed check of {row['id']} {row['version']} is about other "
            f"{', '.join(wrong) or 'statement type'}: refusing it")
    checked_at = str(statement.get("checked_at", ""))
    if seen is not None and checked_at < seen:  # both iso_z: the strings order as times
        raise AttestationMismatch(
            f"the hub's check of {row['id']} {row['version']} is dated {checked_at}, older "
            f"than the check of {seen} recorded in the lock for the same sha256: a replayed "
            "attestation cannot stand for the newer result; refusing it")
    return str(statement.get("status", "unchecked")), checked_at


def _seen_checks(lock: Lock, hub: str) -> dict[str, str]:
    """The newest ``checked_at`` seen per sha256 on ``hub``, kept in the hub's lock entry.

    Kept across key rotations and across refused installs: a "failed" seen once must
    not be hidden later by replaying the older "passed" of the same bytes.
    """
    entry = lock.hubs.setdefault(hub.rstrip("/"), {})
    seen = entry.get("seen_checks")
    if not isinstance(seen, dict):
        seen = entry["seen_checks"] = {}
    return seen


def _pip(args: list[str], what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise ConfigError(f"pip failed installing {what}:\n{proc.stdout}{proc.stderr}")


def _requirements(wheel: Path, target: Path | None) -> list[str]:
    """The wheel's ``Requires-Dist`` not already satisfied, for the normal index.

    Raises:
        UntrustedPackage: it needs another hub package that is not installed; that one must
            come from a hub by digest too, never by name from an index.
    """
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist()
                    if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    paths = ([str(target)] if target else []) + sys.path
    env = cast(dict[str, str], default_environment())
    missing = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.partition(":")[2].strip())
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            continue
        found = next(iter(importlib.metadata.distributions(name=req.name, path=paths)), None)
        if found is not None and req.specifier.contains(found.version, prereleases=True):
            continue
        if req.name.lower().replace("_", "-").startswith(DIST_PREFIX):
            raise UntrustedPackage(f"{wheel.name} needs the hub package {req}: install it "
                                   "with `gymhub install` first (never from an index)")
        missing.append(str(req))
    return missing


def install(ref: tuple[str, str, str | None], hub: str, *, trust: bool = False,
            accept_new_key: bool = False, target: str | Path | None = None,
            lock_path: str | Path = "gymhub.lock", expect_sha256: str | None = None,
            say: Say = _say) -> dict[str, Any]:
    """Install one hub environment by digest and record it in the lock.

    Args:
        ref: ``(owner, name, version or None)``.
        hub: the hub's base URL; it is the only place the package comes from.
        trust: install even if the check failed or is missing.
        accept_new_key: pin the hub's signing key even though the lock pinned another.
        target: a directory for ``pip --target`` (default: the current environment).
        lock_path: the lock file to read and update.
        expect_sha256: the digest a re-install from the lock must get.
        say: where warnings and notices go (stderr).

    Returns:
        The lock entry written.

    Raises:
        PackageNotFound, VersionNotFound: nothing to install (with suggestions).
        KeyMismatch, SignatureInvalid, AttestationMismatch, UntrustedPackage: refused.
        DigestMismatch: the bytes are not the ones the hub (or the lock) names.
        InvalidArchive: the downloaded wheel breaks a rule of the hub's archive checker
            (another top-level name, a ``.pth``, scripts...): nothing is installed.
    """
    owner, name, version = ref
    lock = Lock.load(lock_path)
    tgt = Path(target).resolve() if target else None
    with HubClient(hub) as client:
        row = _resolve(client, owner, name, version, say)
        pid = f"{owner}/{name}"
        locked = lock.entry(pid)
        if expect_sha256 is not None and row["sha256"] != expect_sha256:
            raise DigestMismatch(f"{pid} {row['version']} on {client.url} is now sha256 "
                                 f"{row['sha256']}, not the {expect_sha256} in {lock.path}")
        if (locked is not None and locked["version"] == row["version"]
                and locked["sha256"] != row["sha256"]):
            raise DigestMismatch(f"{pid} {row['version']} was sha256 {locked['sha256']} "
                                 f"when locked; the hub now serves {row['sha256']}")
        key = _hub_key(client, lock, accept_new_key, say)
        seen = _seen_checks(lock, client.url)
        status, checked_at = _check_status(client, key, row, seen.get(row["sha256"]))
        if checked_at is not None:
            seen[row["sha256"]] = max(checked_at, seen.get(row["sha256"], ""))
        trusted_before = (locked is not None and locked["sha256"] == row["sha256"]
                          and bool(locked.get("trusted")))
        if status != "passed" and not (trust or trusted_before):
            lock.save()  # remember the newest check seen, so an older one cannot replace it
            queued = (row.get("check") or {}).get("status") == "queued"
            why = ("failed its check" if status == "failed" else
                   "is still waiting for the hub's check (queued; try again shortly)"
                   if queued else "has no signed check")
            raise UntrustedPackage(f"{pid} {row['version']} (sha256 {row['sha256']}) {why} "
                                   "on the hub; install it anyway with --trust")
        if status != "passed" and trust and not trusted_before:
            say(f"warning: installing {pid} {row['version']} whose check is {status} "
                "(--trust; recorded in the lock)")
        with tempfile.TemporaryDirectory() as tmp:
            wheel = Path(tmp) / Path(row["filename"]).name
            got = client.download(row["sha256"], wheel.name, wheel)
            if got != row["sha256"]:
                raise DigestMismatch(f"downloaded {wheel.name} hashes to {got}, not the "
                                     f"sha256 {row['sha256']} the hub lists: refusing it")
            validate_wheel(wheel, owner=owner)
            where = ["--target", str(tgt), "--upgrade"] if tgt else []
            _pip(["install", "--isolated", "--no-index", "--no-deps", "--force-reinstall",
                  "--disable-pip-version-check", *where, str(wheel)], wheel.name)
            deps = _requirements(wheel, tgt)
            if deps:
                _pip(["install", "--disable-pip-version-check", *where, *deps],
                     ", ".join(deps))
    entry = {"hub": client.url, "key_id": key["key_id"] if key else None, "owner": owner,
             "name": name, "version": row["version"], "sha256": row["sha256"],
             "filename": row["filename"], "env_ids": list(row.get("env_ids", [])),
             "installed_at": now_iso(), "trusted": status != "passed",
             "check": status, "checked_at": checked_at}
    lock.record(entry)
    lock.save()
    say(f"installed {pid} {row['version']} sha256 {row['sha256']} (check {status})")
    return entry


def install_locked(*, target: str | Path | None = None, lock_path: str | Path = "gymhub.lock",
                   trust: bool = False, accept_new_key: bool = False,
                   say: Say = _say) -> list[dict[str, Any]]:
    """Re-install every package in the lock: same hub, same version, same sha256.

    The lock's own ``trusted`` flags stand, so a package trusted once is not asked again,
    but a changed digest or hub key still refuses.
    """
    lock = Lock.load(lock_path)
    if not lock.packages:
        raise ConfigError(f"{lock.path} lists nothing to install")
    return [install((e["owner"], e["name"], e["version"]), e["hub"], trust=trust,
                    accept_new_key=accept_new_key, target=target, lock_path=lock_path,
                    expect_sha256=e["sha256"], say=say)
            for e in list(lock.packages.values())]

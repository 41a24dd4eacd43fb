"""Signed check statements: the formats the install client verifies, and tampering."""

import base64
import hashlib
import json
import stat
from datetime import datetime

import pytest

from gymhub.errors import HubError, SignatureInvalid
from gymhub.hub.records import CheckInfo, VersionInfo
from gymhub.hub.signing import (
    HubKey,
    canonical_bytes,
    sign_statement,
    statement_for,
    verify_statement,
)

DETAILS = {"summary": "passed", "checks": [{"name": "x", "ok": True, "ms": 1.5, "detail": ""}],
           "envs": {}, "gold_score": 1.0, "noop_score": 0.0, "reason": ""}


def _statement():
    v = VersionInfo("alice", "wordle", "1.0.0", "ab" * 32, 10, "w-1.0.0-py3-none-any.whl",
                    ("alice/wordle-v0",), {}, datetime(2025, 1, 1), None, None)
    c = CheckInfo("1.0.0", "ab" * 32, "failed", DETAILS, datetime(2025, 1, 2, 3, 4, 5, 6))
    return statement_for(v, c)


def test_statement_and_canonical_bytes_match_the_contract():
    s = _statement()
    assert s == {"type": "gymhub.check/v1", "owner": "alice", "name": "wordle",
                 "version": "1.0.0", "filename": "w-1.0.0-py3-none-any.whl",
                 "sha256": "ab" * 32, "status": "failed",
                 "details_sha256": hashlib.sha256(canonical_bytes(DETAILS)).hexdigest(),
                 "checked_at": "2025-01-02T03:04:05.000006Z"}
    assert canonical_bytes({"b": 1, "a": "é"}) == b'{"a":"\\u00e9","b":1}'
    assert canonical_bytes(s) == json.dumps(s, sort_keys=True, separators=(",", ":"),
                                            ensure_ascii=True).encode()


def test_round_trip_and_public_json():
    key = HubKey.generate()
    pub = key.public_json()
    raw = base64.b64decode(pub["public_key"], validate=True)
    assert pub["algorithm"] == "ed25519" and len(raw) == 32
    assert pub["key_id"] == hashlib.sha256(raw).hexdigest()[:16]
    s = _statement()
    verify_statement(pub["public_key"], s, sign_statement(key, s))


@pytest.mark.parametrize("change", [{"status": "passed"}, {"sha256": "cd" * 32},
                                    {"checked_at": "2030-01-01T00:00:00.000000Z"}, {"x": 1}])
def test_a_tampered_statement_is_refused(change):
    key = HubKey.generate()
    s = _statement()
    sig = sign_statement(key, s)
    with pytest.raises(SignatureInvalid):
        verify_statement(key.public_json()["public_key"], {**s, **change}, sig)


def test_a_tampered_or_foreign_signature_is_refused():
    key, other = HubKey.generate(), HubKey.generate()
    s = _statement()
    sig = bytearray(base64.b64decode(sign_statement(key, s)))
    sig[0] ^= 1
    pub = key.public_json()["public_key"]
    for bad in (base64.b64encode(bytes(sig)).decode(), sign_statement(other, s), "not base64!"):
        with pytest.raises(SignatureInvalid) as caught:
            verify_statement(pub, s, bad)
        assert isinstance(caught.value, HubError)


def test_key_file_is_private_and_reloads_to_the_same_key(tmp_path):
    path = tmp_path / "keys" / "hub-key.pem"
    first = HubKey.load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = HubKey.load_or_create(path)
    assert again.key_id == first.key_id and again.public_json() == first.public_json()
    s = _statement()
    verify_statement(first.public_json()["public_key"], s, sign_statement(again, s))


def test_two_hubs_starting_together_end_up_with_one_key(tmp_path, monkeypatch):
    """The loser of the race loads the winner's key; nobody sees a half-written file."""
    import os

    path = tmp_path / "hub-key.pem"
    real_fsync, inner = os.fsync, []

    def fsync_while_another_hub_starts(fd):
        real_fsync(fd)
        if not inner:  # our key is written but not yet linked: the other hub runs now
            inner.append(None)
            assert not path.exists()  # never a partial key under the real name
            inner[0] = HubKey.load_or_create(path)

    monkeypatch.setattr(os, "fsync", fsync_while_another_hub_starts)
    outer = HubKey.load_or_create(path)
    assert inner[0] is not None and outer.key_id == inner[0].key_id
    assert HubKey.load_or_create(path).key_id == outer.key_id
    assert [p.name for p in tmp_path.iterdir()] == ["hub-key.pem"]  # no temporary left
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_concurrent_processes_agree_on_one_key(tmp_path):
    import subprocess
    import sys
    import time

    path, go = tmp_path / "k" / "hub-key.pem", tmp_path / "go"
    code = ("import os, sys, time\n"
            "while not os.path.exists(sys.argv[2]): time.sleep(0.001)\n"
            "from gymhub.hub.signing import HubKey\n"
            "print(HubKey.load_or_create(sys.argv[1]).key_id)\n")
    from gymhub.hub import signing  # noqa: F401  (warm the import cache for the children)

    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    time.sleep(1.0)  # let them all import and spin
    go.touch()
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert len({out.strip() for out, _ in outs}) == 1
    assert outs[0][0].strip() == HubKey.load_or_create(path).key_id


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o666])
def test_a_key_others_can_read_or_write_is_refused(tmp_path, mode):
    from gymhub.errors import ConfigError

    path = tmp_path / "hub-key.pem"
    HubKey.load_or_create(path)
    path.chmod(mode)
    with pytest.raises(ConfigError, match="group or others") as info:
        HubKey.load_or_create(path)
    assert "chmod 600" in str(info.value)
    path.chmod(0o400)
    HubKey.load_or_create(path)  # owner-only is fine, read-only too


def test_a_file_that_is_not_a_key_is_refused(tmp_path):
    from gymhub.errors import ConfigError

    path = tmp_path / "hub-key.pem"
    path.write_bytes(b"not a key")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="not an unencrypted PEM"):
        HubKey.load_or_create(path)

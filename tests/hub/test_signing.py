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

"""API tokens: format, hashed storage, and one typed refusal per way a token can be wrong."""

import hashlib
import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from gymhub.errors import (
    InvalidHubInput,
    InvalidName,
    LookalikeName,
    OwnerNotFound,
    TokenExpired,
    TokenInvalid,
    TokenOwnerError,
    TokenRevoked,
    TokenScopeError,
)
from gymhub.hub.db import HubDB, Owner, Token, utcnow
from gymhub.hub.tokens import (
    authenticate,
    create_token,
    list_tokens,
    parse_duration,
    parse_scopes,
    revoke_token,
    rotate_token,
)

ROOT = Path(__file__).resolve().parents[2]


def test_a_token_names_its_own_record_and_only_its_digest_is_stored(db):
    info, token = create_token(db, "alice", ["publish"], description="ci")
    prefix, token_id, secret = token.split("_")
    assert prefix == "ghub" and token_id == info.id and len(secret) == 43 and secret.isalnum()
    assert token.startswith(info.prefix + "_")
    with db.read() as s:
        row = s.get(Token, info.id)
        stored = [str(getattr(row, c.key)) for c in sa.inspect(Token).column_attrs]
    assert row.secret_sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert not any(secret in value for value in stored)


def test_tokens_are_unique_and_the_owner_is_created_once(db):
    tokens = {create_token(db, "alice")[1] for _ in range(5)}
    assert len(tokens) == 5
    with db.read() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Owner)) == 1
    assert [t.owner for t in list_tokens(db, "alice")] == ["alice"] * 5


def test_authenticate_accepts_a_good_token_and_records_its_use(db):
    info, token = create_token(db, "alice", ["read", "publish"])
    assert info.last_used_at is None
    got = authenticate(db, token, "publish", owner="alice")
    assert got.id == info.id and got.scopes == {"read", "publish"}
    assert list_tokens(db, "alice")[0].last_used_at is not None
    assert authenticate(db, token, "read", owner=None).owner == "alice"


@pytest.mark.parametrize("bad", ["", "ghub_", "Bearer x", "ghub_zz_" + "a" * 43,
                                 "ghp_0123456789abcdef_" + "a" * 43])
def test_malformed_tokens_are_invalid(db, bad):
    with pytest.raises(TokenInvalid):
        authenticate(db, bad, "read", owner="alice")


def test_unknown_id_and_wrong_secret_are_the_same_refusal(db):
    _, token = create_token(db, "alice")
    unknown = "ghub_" + "0" * 16 + token[21:]
    wrong = token[:-1] + ("a" if token[-1] != "a" else "b")
    for bad in (unknown, wrong):
        with pytest.raises(TokenInvalid, match="not recognised"):
            authenticate(db, bad, "read", owner="alice")


def test_a_revoked_token_is_refused_and_revoking_is_idempotent(db):
    info, token = create_token(db, "alice")
    first = revoke_token(db, info.prefix)
    assert first.revoked_at is not None
    assert revoke_token(db, info.id).revoked_at == first.revoked_at
    with pytest.raises(TokenRevoked):
        authenticate(db, token, "read", owner="alice")
    with pytest.raises(TokenInvalid):
        revoke_token(db, "0" * 16)


def test_an_owner_can_revoke_only_their_own_tokens(db):
    info, _ = create_token(db, "alice")
    create_token(db, "bob")
    with pytest.raises(TokenInvalid):
        revoke_token(db, info.id, owner="bob")
    assert revoke_token(db, info.id, owner="alice").revoked_at is not None


def test_an_expired_token_is_refused(db_url):
    now = [utcnow()]
    db = HubDB(db_url, clock=lambda: now[0])
    _, token = create_token(db, "alice", expires_in=timedelta(days=30))
    authenticate(db, token, "read", owner="alice")
    now[0] += timedelta(days=30)
    with pytest.raises(TokenExpired):
        authenticate(db, token, "read", owner="alice")
    db.close()


def test_a_read_token_cannot_publish_or_yank(db):
    _, token = create_token(db, "alice", ["read"])
    for scope in ("publish", "yank"):
        with pytest.raises(TokenScopeError, match=scope):
            authenticate(db, token, scope, owner="alice")


def test_a_token_cannot_act_in_another_owners_namespace(db):
    create_token(db, "bob")
    _, token = create_token(db, "alice", ["read", "publish", "yank"])
    with pytest.raises(TokenOwnerError, match="alice"):
        authenticate(db, token, "publish", owner="bob")


def test_bad_scopes_owners_and_lifetimes_are_refused(db):
    with pytest.raises(InvalidHubInput):
        create_token(db, "alice", ["admin"])
    with pytest.raises(InvalidHubInput):
        create_token(db, "alice", [])
    for owner in ("Alice", "-alice", "al/ice", "a" * 40, "", "ålice", "admin", "adm1n"):
        with pytest.raises(InvalidName):
            create_token(db, owner)
    with pytest.raises(InvalidHubInput):
        create_token(db, "alice", expires_in=timedelta(0))
    with pytest.raises(InvalidHubInput):
        authenticate(db, "ghub_x", "admin", owner=None)
    with pytest.raises(OwnerNotFound):
        list_tokens(db, "nobody")


@pytest.mark.parametrize(("text", "seconds"), [("30d", 30 * 86400), ("12h", 43200),
                                               ("1w2d", 9 * 86400), ("90m", 5400),
                                               ("3600s", 3600)])
def test_durations(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("bad", ["30", "d", "30x", "-1d", "0d", "1d junk", "", "  "])
def test_bad_durations(bad):
    with pytest.raises(InvalidHubInput):
        parse_duration(bad)


def test_never_means_no_expiry():
    assert parse_duration("never") is None
    assert parse_scopes(["yank", "read"]) == {"read", "yank"}


def test_concurrent_token_creation_for_a_new_owner_creates_it_once(db):
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def mint():
        barrier.wait()
        try:
            create_token(db, "carol")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=mint) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(list_tokens(db, "carol")) == 6


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gymhub.cli", "hub", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_cli_creates_a_token_printed_as_the_last_line_and_revokes_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    out = _cli("token", "create", "--owner", "alice", "--scope", "publish", "--expires", "30d",
               "--db", url)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().splitlines()[-1]
    assert "publish" in out.stderr and "expires 20" in out.stderr
    db = HubDB(url)
    info = authenticate(db, token, "publish", owner="alice")
    assert info.expires_at is not None
    listed = _cli("token", "list", "--owner", "alice", "--db", url)
    assert info.prefix in listed.stdout and "active" in listed.stdout
    assert token.rsplit("_", 1)[1] not in listed.stdout
    assert _cli("token", "revoke", info.id, "--db", url).returncode == 0
    with pytest.raises(TokenRevoked):
        authenticate(db, token, "publish", owner="alice")
    db.close()


def test_cli_uses_the_environment_database_and_reports_errors(tmp_path):
    env = {"GYMHUB_HUB_DB": f"sqlite:///{tmp_path / 'env.db'}"}
    out = _cli("token", "create", "--owner", "bob", env=env)
    assert out.returncode == 0 and (tmp_path / "env.db").exists()
    bad = _cli("token", "create", "--owner", "Bob!", env=env)
    assert bad.returncode == 2 and "invalid owner 'Bob!'" in bad.stderr
    assert "token" in _cli("--help").stdout


def test_a_new_owner_that_looks_like_an_existing_one_is_refused(db):
    create_token(db, "alice")
    with pytest.raises(LookalikeName, match="alice"):
        create_token(db, "a1ice")
    create_token(db, "alice")  # the same owner again is fine


def test_tokens_expire_in_90_days_unless_never_is_asked_for(db):
    info, _ = create_token(db, "alice")
    assert info.expires_at is not None
    assert info.expires_at - info.created_at == timedelta(days=90)
    forever, _ = create_token(db, "alice", expires_in=None)
    assert forever.expires_at is None


def test_rotation_replaces_the_secret_and_revokes_the_old_one_at_once(db_url):
    now = [utcnow()]
    db = HubDB(db_url, clock=lambda: now[0])
    old, old_token = create_token(db, "alice", ["read", "yank"], description="ci",
                                  expires_in=timedelta(days=30))
    now[0] += timedelta(days=10)
    new, new_token = rotate_token(db, old.prefix)
    assert new.id != old.id and new_token != old_token
    assert (new.owner, new.scopes, new.description) == ("alice", {"read", "yank"}, "ci")
    assert new.created_at == now[0] and new.expires_at == now[0] + timedelta(days=30)
    assert authenticate(db, new_token, "yank", owner="alice").id == new.id
    with pytest.raises(TokenRevoked):
        authenticate(db, old_token, "read", owner="alice")
    with pytest.raises(TokenRevoked, match="final"):
        rotate_token(db, old.id)
    forever = rotate_token(db, new.id, expires_in=None)[0]
    assert forever.expires_at is None and rotate_token(db, forever.id)[0].expires_at is None
    db.close()


def test_an_expired_token_can_be_renewed_by_rotation_but_only_by_its_owner(db_url):
    now = [utcnow()]
    db = HubDB(db_url, clock=lambda: now[0])
    old, _ = create_token(db, "alice", expires_in=timedelta(days=1))
    create_token(db, "bob")
    now[0] += timedelta(days=2)
    with pytest.raises(TokenInvalid):
        rotate_token(db, old.id, owner="bob")
    with pytest.raises(TokenInvalid):
        rotate_token(db, "0" * 16)
    _, token = rotate_token(db, old.id, owner="alice")
    assert authenticate(db, token, "read", owner="alice").owner == "alice"
    db.close()


def test_cli_defaults_to_90_days_says_never_only_when_asked_and_rotates(tmp_path):
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    default = _cli("token", "create", "--owner", "alice", "--description", "laptop",
                   "--db", url)
    assert default.returncode == 0, default.stderr
    db = HubDB(url)
    info = authenticate(db, default.stdout.strip().splitlines()[-1], "read", owner="alice")
    assert info.expires_at - info.created_at == timedelta(days=90)
    never = _cli("token", "create", "--owner", "alice", "--expires", "never", "--db", url)
    assert never.returncode == 0 and "expires never" in never.stderr
    empty = _cli("token", "create", "--owner", "alice", "--expires", "", "--db", url)
    assert empty.returncode == 2 and "invalid duration" in empty.stderr

    rotated = _cli("token", "rotate", info.prefix, "--db", url)
    assert rotated.returncode == 0, rotated.stderr
    new_token = rotated.stdout.strip().splitlines()[-1]
    assert f"revoked {info.prefix}" in rotated.stderr
    new = authenticate(db, new_token, "publish", owner="alice")
    assert new.description == "laptop" and new.scopes == info.scopes
    with pytest.raises(TokenRevoked):
        authenticate(db, default.stdout.strip().splitlines()[-1], "read", owner="alice")
    again = _cli("token", "rotate", info.id, "--db", url)
    assert again.returncode == 2 and "revoked" in again.stderr
    db.close()


# ---------------------------------------------------------------- admin takedown (CLI)
def test_cli_delete_takes_a_version_down_and_the_ledger_keeps_it_forever(tmp_path):
    from gymhub.errors import VersionConflict, VersionNotFound
    from gymhub.hub.blobs import FileBlobStore
    from gymhub.hub.check_queue import enqueue, pending_count
    from gymhub.hub.db import LedgerEntry
    from gymhub.hub.store import HubStore

    from .conftest import wheel

    url, files = f"sqlite:///{tmp_path / 'hub.db'}", tmp_path / "files"
    store = HubStore(HubDB(url), FileBlobStore(files))
    create_token(store.db, "alice")
    original = wheel("wordle", "1.0.0")
    bad = store.publish("alice", *original).version
    store.publish("alice", *wheel("wordle", "1.1.0"))
    store.record_check("alice", "wordle", "1.0.0", "failed", {})
    assert enqueue(store.db, "alice", "wordle", "1.0.0")  # queued for a re-check too

    out = _cli("delete", "alice/wordle", "1.0", "--reason", "malware", "--db", url,
               "--storage", str(files))
    assert out.returncode == 0, out.stderr
    assert bad.sha256 in out.stdout and bad.filename in out.stdout
    assert "never be published again" in out.stdout and "queued check dropped: yes" in out.stdout
    with pytest.raises(VersionNotFound):
        store.resolve("alice", "wordle", "==1.0.0")
    assert [v.version for v in store.list_versions("alice", "wordle")] == ["1.1.0"]
    assert pending_count(store.db) == 0
    with store.db.read() as s:
        entry = s.get(LedgerEntry, ("alice", "wordle", "1"))
        assert entry.sha256 == bad.sha256 and entry.delete_reason == "malware"
        assert entry.deleted_at is not None
    for desc, data in (wheel("wordle", "1.0.0", data=b"other bytes"), original):
        with pytest.raises(VersionConflict, match="deleted"):  # other bytes, or the same
            store.publish("alice", desc, data)
    store.db.close()

    again = _cli("delete", "alice/wordle", "1.0.0", "--reason", "x", "--db", url,
                 "--storage", str(files))
    assert again.returncode == 2 and "no version" in again.stderr
    no_reason = _cli("delete", "alice/wordle", "1.1.0", "--reason", " ", "--db", url,
                     "--storage", str(files))
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr

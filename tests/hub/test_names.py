"""Owner and environment names: one spelling each, look-alikes caught, no auto-resolution."""

from __future__ import annotations

import pytest

from gymhub.errors import InvalidName, LookalikeName, ReservedName
from gymhub.hub.names import (
    EnvId,
    check_not_lookalike,
    did_you_mean,
    distribution_name,
    find_lookalike,
    is_lookalike,
    lookalike_keys,
    normalize,
    not_found_message,
    osa_distance,
    parse_distribution_name,
    parse_env_id,
    skeleton,
    validate_env_name,
    validate_owner,
)


def test_env_names_normalise_like_pep_503():
    assert validate_env_name("My_Env") == validate_env_name("my-env") == "my-env"
    assert normalize("My_Env") == normalize("my-env") == normalize("MY.env")


@pytest.mark.parametrize(("name", "why"), [
    ("..", "dots"), (".git", "dots"), ("a.b", "dots"), ("a/b", "slashes"), ("a\\b", "slashes"),
    ("x" * 65, "at most 64"), ("wördle", "non-ASCII"), ("wordle\u200b", "non-ASCII"),
    ("", "empty"), ("-wordle", "starting and ending"), ("wordle_", "starting and ending"),
    ("a__b", "single"), ("a b", "letters and digits"), ("wordle-v2", "-vN"),
])
def test_bad_env_names_are_refused(name, why):
    with pytest.raises(InvalidName, match=why) as info:
        validate_env_name(name)
    assert info.value.kind == "env_name" and info.value.code == "invalid_name"


def test_valid_env_names():
    assert validate_env_name("2048") == "2048"
    assert validate_env_name("x" * 64) == "x" * 64
    assert validate_env_name("sql-v2rev") == "sql-v2rev"


@pytest.mark.parametrize(("owner", "err", "why"), [
    ("Alice", InvalidName, "did you mean 'alice'"), ("a--b", InvalidName, "single hyphens"),
    ("-alice", InvalidName, "starting and ending"), ("al_ice", InvalidName, "lowercase"),
    ("x" * 40, InvalidName, "at most 39"), ("ålice", InvalidName, "non-ASCII"),
    ("gymhub", ReservedName, "reserved"), ("simple", ReservedName, "reserved"),
    ("adm1n", ReservedName, "looks like 'admin'"), ("", InvalidName, "empty"),
])
def test_bad_owners_are_refused(owner, err, why):
    with pytest.raises(err, match=why):
        validate_owner(owner)


def test_reserved_is_a_kind_of_invalid_name():
    with pytest.raises(InvalidName) as info:
        validate_owner("api")
    assert type(info.value) is ReservedName and info.value.code == "reserved_name"


def test_skeleton_folds_look_alikes():
    assert skeleton("wor1d") == skeleton("world") == skeleton("WORLD") == skeleton("w-o_r.l.d")
    assert skeleton("c0de") == skeleton("code")
    assert skeleton("modern") == skeleton("rnodern")
    assert skeleton("chess") != skeleton("check")


def test_look_alike_names_are_refused_but_the_same_name_is_not():
    with pytest.raises(LookalikeName, match="'wordle'") as info:
        check_not_lookalike("env_name", "word1e", ["chess", "wordle"])
    assert info.value.existing == "wordle" and info.value.code == "lookalike_name"
    check_not_lookalike("env_name", "Wordle", ["wordle"])  # its own name, respelled
    assert find_lookalike("chess", ["wordle"]) is None


def test_env_ids_parse_only_in_canonical_form():
    assert parse_env_id("alice/wordle-v0") == EnvId("alice", "wordle", 0)
    assert str(parse_env_id("alice/my-env-v12")) == "alice/my-env-v12"
    for bad, why in [("wordle-v0", "OWNER/NAME-vN"), ("alice/wordle", "OWNER/NAME-vN"),
                     ("alice/My_Env-v0", "canonical"), ("alice/wordle-v01", "OWNER/NAME-vN"),
                     ("Alice/wordle-v0", "lowercase"), ("alice/../x-v0", "OWNER/NAME-vN"),
                     ("alice/foo-v2-v0", "-vN")]:
        with pytest.raises(InvalidName, match=why):
            parse_env_id(bad)


def test_distribution_names_are_owner_qualified_and_parse_back():
    assert distribution_name("alice", "My_Env") == "gymhub-env-5-alice-my-env"
    assert parse_distribution_name("gymhub_env_5_alice_my_env") == ("alice", "my-env")
    # two owners whose (owner, name) join to the same words still get different names
    a, b = distribution_name("a-b", "c"), distribution_name("a", "b-c")
    assert normalize(a) != normalize(b)
    assert parse_distribution_name(a) == ("a-b", "c") and parse_distribution_name(b) == ("a", "b-c")
    assert distribution_name("alice", "wordle") != distribution_name("bob", "wordle")


@pytest.mark.parametrize("dist", ["wordle", "gymhub-env-alice-wordle", "gymhub-env-9-alice-wordle",
                                  "gymhub-env-5-alice", "gymhub-env-5-Alic3-x-v1", "gymhub-env-0--x"])
def test_malformed_distribution_names_are_refused(dist):
    with pytest.raises(InvalidName) as info:
        parse_distribution_name(dist)
    assert info.value.kind == "distribution"


def test_did_you_mean_suggests_but_never_resolves():
    known = ["alice/wordle", "alice/chess", "bob/wordle"]
    assert did_you_mean("alice/wrodle", known)[0] == "alice/wordle"
    assert did_you_mean("a1ice/wordle", known)[0] == "alice/wordle"  # look-alike first
    assert did_you_mean("zzz", known) == []
    msg = not_found_message("environment", "alice/wrodle", known)
    assert msg.startswith("no environment 'alice/wrodle' on the hub.") and "Did you mean" in msg


@pytest.mark.parametrize(("a", "b", "d"), [
    ("wordle", "wordle", 0), ("wordle", "wordles", 1), ("wordle", "wordl", 1),
    ("wordle", "wordla", 1), ("wordle", "wrodle", 1), ("wordle", "owrdle", 1),
    ("kitten", "sitting", 3), ("ca", "abc", 3), ("", "abc", 3), ("abcd", "badc", 2),
])
def test_optimal_string_alignment_distance(a, b, d):
    assert osa_distance(a, b) == d == osa_distance(b, a)


def test_one_typo_apart_is_a_look_alike_for_environment_names_only():
    for near in ("wordel", "wordles", "wordl", "wordla", "wrodle", "w-ordle"):
        assert is_lookalike("wordle", near, typos=True), near
    assert not is_lookalike("wordle", "wordel")  # owners: skeleton only
    assert not is_lookalike("wordle", "Wordle", typos=True)  # the same name, respelled
    assert not is_lookalike("wordle", "worlds", typos=True)  # two edits
    assert not is_lookalike("go", "gp", typos=True)  # too short for the typo rule ...
    assert is_lookalike("go", "g0", typos=True)  # ... but not for look-alike characters
    assert find_lookalike("wordel", ["chess", "wordle"], typos=True) == "wordle"
    with pytest.raises(LookalikeName):
        check_not_lookalike("env_name", "chesss", ["chess"], typos=True)


def test_the_candidate_keys_cover_every_one_edit_neighbour():
    name = "word-ladder"
    keys = lookalike_keys(name)
    neighbours = ["word-laddr", "word-ladders", "wrod-ladder", "word-1adder", "wordladder",
                  "word-lbdder", "xword-ladder", "word-laddre", "w0rd-ladder"]
    for near in neighbours:
        assert skeleton(near) in keys, near
    assert lookalike_keys("go") == {skeleton("go")}
    assert len(lookalike_keys("x" * 64)) < 5000


def _publish(store, owner, name, version="1.0.0"):
    from .conftest import wheel

    return store.publish(owner, *wheel(name, version, owner=owner)).version


def test_the_store_refuses_look_alikes_across_owners_but_not_the_same_name(store):
    from gymhub.hub.tokens import create_token

    for owner in ("alice", "bob"):
        create_token(store.db, owner)
    _publish(store, "alice", "wordle")
    for near in ("wordel", "word1e", "wordles", "Word_le"):
        with pytest.raises(LookalikeName) as info:
            _publish(store, "bob", near)
        assert info.value.existing == "alice/wordle"
    with pytest.raises(LookalikeName, match="alice/wordle"):
        _publish(store, "alice", "wrodle")  # one's own near name too
    assert _publish(store, "bob", "wordle").owner == "bob"  # ids are owner-qualified
    assert _publish(store, "alice", "Wordle", "2.0").version == "2.0"  # re-publishing
    assert _publish(store, "bob", "chess").name == "chess"
    assert _publish(store, "bob", "go").name == "go"
    assert _publish(store, "alice", "gp").name == "gp"  # short names: skeleton rule only


def test_the_look_alike_query_reads_the_skeleton_index(tmp_path):
    import sqlalchemy as sa

    from gymhub.hub.blobs import FileBlobStore
    from gymhub.hub.db import HubDB
    from gymhub.hub.store import HubStore
    from gymhub.hub.tokens import create_token

    db = HubDB(f"sqlite:///{tmp_path / 'hub.db'}")
    store = HubStore(db, FileBlobStore(tmp_path / "blobs"))
    create_token(db, "alice")
    for i in range(30):
        _publish(store, "alice", f"env-{i:03d}-x{i}")
    seen: list[tuple[str, object]] = []
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda conn, cur, stmt, params, ctx, many: seen.append((stmt, params)))
    _publish(store, "alice", "brand-new-name")
    package_reads = [(s, p) for s, p in seen if "FROM packages" in s and "SELECT" in s]
    lookups = [(s, p) for s, p in package_reads if "packages.skeleton IN" in s]
    assert lookups, package_reads
    with db.engine.connect() as conn:
        for stmt, params in lookups:
            plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {stmt}", params).all()
            assert any("ix_packages_skeleton" in str(row) for row in plan), plan
    # nothing else read the package table without a key
    assert all("WHERE" in s for s, _ in package_reads)
    db.close()

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
    normalize,
    not_found_message,
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

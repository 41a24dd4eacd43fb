"""validate_wheel: a correct wheel passes; every attack is refused with its own error."""

from __future__ import annotations

import stat
import subprocess
import sys
import unicodedata
import zipfile

import pytest

from gymhub.errors import (
    ArchiveTooLarge,
    CorruptArchive,
    DuplicateMember,
    InvalidArchive,
    InvalidName,
    NamespaceViolation,
    RecordMismatch,
    UnsafeMember,
    WheelFilenameError,
    WheelMetadataError,
)
from gymhub.hub.archive import ArchiveLimits, validate_wheel

MOD = "gymhub_env_5_alice_wordle"


def check(spec, owner="alice", **kw):
    filename, data = spec.build()
    return validate_wheel(data, owner=owner, filename=filename, **kw)


def refused(exc_type, spec=None, data=None, filename=None, owner="alice", match=None, **kw):
    if data is None:
        filename, data = spec.build()
    with pytest.raises(exc_type, match=match) as info:
        validate_wheel(data, owner=owner, filename=filename, **kw)
    return info.value


# ------------------------------------------------------------------ the valid wheel
def test_valid_wheel_passes_and_is_described(spec):
    info = check(spec)
    assert info.name == "gymhub-env-5-alice-wordle" and info.owner == "alice"
    assert info.env_name == "wordle" and info.version == "0.1.0"
    assert info.env_ids == ("alice/wordle-v0",)
    assert info.entry_points == {"gymhub.envs": {"alice/wordle-v0": f"{MOD}.env:WordleEnv"}}
    assert info.readme is not None and info.readme.startswith("# Wordle")
    assert info.metadata.summary == "A word game" and info.metadata.requires_dist == ("gymhub>=0.1",)
    assert info.top_level == (MOD,) and len(info.files) == 7 and len(info.sha256) == 64
    assert info.content_digest == check(spec).content_digest


def test_valid_wheel_from_a_path_with_directory_entries_and_stored_members(spec, tmp_path):
    spec.compression = zipfile.ZIP_STORED
    spec.extra = [(f"{MOD}/data/", b""), (f"{MOD}/data/words.txt", b"crane\nslate\n")]
    filename, data = spec.build()
    (tmp_path / filename).write_bytes(data)
    info = validate_wheel(tmp_path / filename, owner="alice")
    assert f"{MOD}/data/words.txt" in {f.path for f in info.files}


def test_a_wheel_built_by_setuptools_passes(tmp_path):
    """The checks are strict, but not stricter than what a real build backend writes."""
    proj = tmp_path / "proj"
    (proj / MOD).mkdir(parents=True)
    (proj / MOD / "__init__.py").write_text("")
    (proj / MOD / "env.py").write_text("class WordleEnv:\n    pass\n")
    (proj / "README.md").write_text("# Wordle\n")
    (proj / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "gymhub-env-5-alice-wordle"\nversion = "1.2.0"\nreadme = "README.md"\n'
        'license = "MIT"\ndependencies = ["gymhub>=0.1"]\n'
        f'[project.entry-points."gymhub.envs"]\n"alice/wordle-v0" = "{MOD}.env:WordleEnv"\n'
        f'[tool.setuptools]\npackages = ["{MOD}"]\n')
    code = ("import setuptools.build_meta as b, sys; "
            "print(b.build_wheel(sys.argv[1]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=proj,
                         capture_output=True, text=True, check=True)
    wheel = tmp_path / "dist" / out.stdout.strip().splitlines()[-1]
    info = validate_wheel(wheel, owner="alice")
    assert info.env_ids == ("alice/wordle-v0",) and info.version == "1.2.0"
    assert info.readme == "# Wordle\n"


# ------------------------------------------------------------------ member names
@pytest.mark.parametrize(("name", "why"), [
    ("../evil.py", "traversal"),
    (f"{MOD}/../../evil.py", "traversal"),
    ("/etc/cron.d/evil", "absolute"),
    (f"{MOD}\\..\\evil.py", "backslash"),
    ("C:/evil.py", "drive"),
    (f"{MOD}//evil.py", "empty path component"),
    (f"{MOD}/./evil.py", "'.'"),
])
def test_unsafe_member_names_are_refused(spec, name, why):
    spec.extra = [(name, b"x = 1\n")]
    exc = refused(UnsafeMember, spec, match=why)
    assert exc.member == name and exc.code == "unsafe_member"


def test_nul_in_a_member_name_is_refused(spec):
    spec.extra = [(f"{MOD}/aXb.py", b"x = 1\n")]
    filename, data = spec.build()
    data = data.replace(f"{MOD}/aXb.py".encode(), f"{MOD}/a\0b.py".encode())
    refused(UnsafeMember, data=data, filename=filename, match="NUL")


def test_symlink_member_is_refused(spec):
    link = zipfile.ZipInfo(f"{MOD}/passwd")
    link.create_system = 3
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    spec.extra = [(link, b"/etc/passwd")]
    refused(UnsafeMember, spec, match="symbolic link")


def test_setuid_member_is_refused(spec):
    info = zipfile.ZipInfo(f"{MOD}/tool.py")
    info.external_attr = (stat.S_IFREG | stat.S_ISUID | 0o755) << 16
    spec.extra = [(info, b"x = 1\n")]
    refused(UnsafeMember, spec, match="setuid")


def test_duplicate_names_are_refused(spec):
    spec.extra = [(f"{MOD}/env.py", b"import os; os.system('evil')\n")]
    refused(DuplicateMember, spec, match="appears twice")


def test_names_that_collide_by_case_are_refused(spec):
    spec.extra = [(f"{MOD}/ENV.py", b"x = 1\n")]
    refused(DuplicateMember, spec, match="case folding")


def test_names_that_collide_after_nfc_are_refused(spec):
    nfc, nfd = (unicodedata.normalize(f, f"{MOD}/café.py") for f in ("NFC", "NFD"))
    spec.extra = [(nfc, b"x = 1\n"), (nfd, b"y = 2\n")]
    refused(DuplicateMember, spec, match="Unicode")


def test_a_file_used_as_a_directory_is_refused(spec):
    spec.extra = [(f"{MOD}/env.py/inner.py", b"x = 1\n")]
    refused(DuplicateMember, spec, match="which is a file")


def test_two_names_for_one_stored_record_are_refused(spec, zt):
    """A hard link in zip form: a second central entry pointing at the first's data."""
    spec.extra = [(f"{MOD}/aaa.py", b"x = 1\n"), (f"{MOD}/bbb.py", b"x = 1\n")]
    filename, data = spec.build()
    data = zt.patch(data, zt.central(data, f"{MOD}/bbb.py") + 42, "<I", zt.local(data, f"{MOD}/aaa.py"))
    refused(DuplicateMember, data=data, filename=filename, match="hard link")


# ------------------------------------------------------------------ zip structure
def test_not_a_zip_is_refused():
    refused(CorruptArchive, data=b"hello, I am a wheel " * 10,
            filename="gymhub_env_5_alice_wordle-0.1.0-py3-none-any.whl", match="not a zip")


@pytest.mark.parametrize("cut", [10, 600])
def test_truncated_zip_is_refused(spec, cut):
    filename, data = spec.build()
    refused(CorruptArchive, data=data[:-cut], filename=filename)


@pytest.mark.parametrize("where", ["before", "after"])
def test_prepended_or_trailing_data_is_refused(spec, where):
    filename, data = spec.build()
    data = b"junk" + data if where == "before" else data + b"junk"
    refused(CorruptArchive, data=data, filename=filename)


def test_local_header_that_disagrees_with_the_central_directory_is_refused(spec, zt):
    filename, data = spec.build()
    data = zt.patch(data, zt.local(data, f"{MOD}/env.py") + 22, "<I", 7)
    refused(CorruptArchive, data=data, filename=filename, match="local header says 7 bytes")


def test_local_name_that_differs_from_the_central_name_is_refused(spec, zt):
    filename, data = spec.build()
    off = zt.local(data, f"{MOD}/env.py") + 30
    data = data[:off] + f"{MOD}/evl.py".encode() + data[off + len(MOD) + 7:]
    refused(CorruptArchive, data=data, filename=filename, match="name it differently")


def test_encrypted_member_is_refused(spec, zt):
    filename, data = spec.build()
    name = f"{MOD}/env.py"
    data = zt.patch(data, zt.central(data, name) + 8, "<H", 1)
    data = zt.patch(data, zt.local(data, name) + 6, "<H", 1)
    refused(CorruptArchive, data=data, filename=filename, match="encrypted")


def test_zip_bomb_by_ratio_is_refused(spec):
    spec.extra = [(f"{MOD}/zeros.bin", bytes(4 << 20))]
    exc = refused(ArchiveTooLarge, spec, match="compression ratio")
    assert exc.member == f"{MOD}/zeros.bin"


def test_member_whose_declared_size_is_too_small_is_caught_while_streaming(spec, zt):
    """The central directory and the local header both lie; the inflated bytes do not."""
    spec.extra = [(f"{MOD}/big.txt", b"abcdefgh" * 50_000)]
    filename, data = spec.build()
    name = f"{MOD}/big.txt"
    data = zt.patch(data, zt.central(data, name) + 24, "<I", 1000)
    data = zt.patch(data, zt.local(data, name) + 22, "<I", 1000)
    refused(ArchiveTooLarge, data=data, filename=filename, match="inflates past its declared 1000")


def test_member_whose_declared_size_is_too_large_is_refused(spec, zt):
    spec.extra = [(f"{MOD}/big.txt", b"abcdefgh" * 5_000)]
    filename, data = spec.build()
    name = f"{MOD}/big.txt"
    data = zt.patch(data, zt.central(data, name) + 24, "<I", 80_000)
    data = zt.patch(data, zt.local(data, name) + 22, "<I", 80_000)
    refused(CorruptArchive, data=data, filename=filename, match="inflates to 40000 bytes")


def test_too_many_members_are_refused(spec):
    spec.extra = [(f"{MOD}/m{i}.py", b"") for i in range(30)]
    refused(ArchiveTooLarge, spec, limits=ArchiveLimits(max_members=20), match="members")


@pytest.mark.parametrize(("limits", "match"), [
    (ArchiveLimits(max_member_bytes=1000), "per-member cap"),
    (ArchiveLimits(max_total_bytes=5000), "total cap"),
    (ArchiveLimits(max_archive_bytes=500), "archive is"),
])
def test_size_caps_are_enforced(spec, limits, match):
    spec.extra = [(f"{MOD}/big.txt", b"abcdefgh" * 1000)]
    refused(ArchiveTooLarge, spec, limits=limits, match=match)


# ------------------------------------------------------------------ RECORD
def test_record_with_a_wrong_hash_is_refused(spec, zt):
    spec.record = lambda rows: [[r[0], zt.record_hash(b"other") if r[0].endswith("env.py") else r[1], r[2]]
                                for r in rows]
    exc = refused(RecordMismatch, spec, match="RECORD says sha256=")
    assert exc.member == f"{MOD}/env.py"


def test_record_with_a_wrong_size_is_refused(spec):
    spec.record = lambda rows: [[r[0], r[1], "1" if r[0].endswith("env.py") else r[2]] for r in rows]
    refused(RecordMismatch, spec, match="RECORD says 1 bytes")


def test_member_missing_from_record_is_refused(spec):
    spec.unrecorded = [(f"{MOD}/hidden.py", b"import os\n")]
    exc = refused(RecordMismatch, spec, match="not listed in RECORD")
    assert exc.member == f"{MOD}/hidden.py"


def test_record_entry_without_a_member_is_refused(spec):
    spec.record = lambda rows: [*rows, [f"{MOD}/ghost.py", "sha256=abc", "3"]]
    refused(RecordMismatch, spec, match="not in the archive")


def test_record_listing_a_member_twice_is_refused(spec):
    spec.record = lambda rows: [*rows, rows[0]]
    refused(RecordMismatch, spec, match="listed twice")


def test_record_with_a_weak_hash_is_refused(spec):
    spec.record = lambda rows: [[r[0], "md5=abc" if r[1] else "", r[2]] for r in rows]
    refused(RecordMismatch, spec, match="not sha256")


# ------------------------------------------------------------------ metadata and namespace
def test_filename_of_another_owner_is_refused(spec):
    spec.owner = "bob"
    refused(NamespaceViolation, spec, owner="alice", match="belongs to owner 'bob'")


def test_metadata_naming_another_owners_namespace_is_refused(spec):
    spec.metadata = "Metadata-Version: 2.4\nName: gymhub-env-3-bob-wordle\nVersion: 0.1.0\n"
    refused(NamespaceViolation, spec, match="owner 'bob'")


def test_entry_point_id_of_another_owner_is_refused(spec):
    spec.entry_points = f"[gymhub.envs]\nbob/wordle-v0 = {MOD}.env:WordleEnv\n"
    refused(NamespaceViolation, spec, match="owner 'bob'")


def test_entry_point_id_of_another_package_is_refused(spec):
    spec.entry_points = f"[gymhub.envs]\nalice/chess-v0 = {MOD}.env:WordleEnv\n"
    refused(NamespaceViolation, spec, match="id of this package")


def test_entry_point_module_outside_the_wheel_is_refused(spec):
    spec.entry_points = "[gymhub.envs]\nalice/wordle-v0 = gymhub.envs.echo:EchoEnv\n"
    refused(NamespaceViolation, spec, match="not in this wheel")


DI = "gymhub_env_5_alice_wordle-0.1.0"


@pytest.mark.parametrize("member", [
    "sitecustomize.py",                          # runs in every Python process of the venv
    "usercustomize.py",
    "requests/__init__.py",                      # shadows a PyPI package
    "gymhub/__init__.py",                        # shadows gymhub itself
    "Gymhub/__init__.py",                        # ... on a case-insensitive file system
    "json.py",                                   # shadows the standard library
    "alice_wordle/__init__.py",                  # another spelling of the owner's names
    "Gymhub_Env_5_Alice_Wordle/other.py",        # the own package, folded
    "gymhub_env_5_alice_wordlé/__init__.py",     # NFC/accent look-alike
    f"{DI}.data/purelib/requests/__init__.py",   # purelib holding another name
    f"{DI}.data/platlib/sitecustomize.py",
    f"{DI}.data/purelib/gymhub/__init__.py",
    "_virtualenv.py",
    "top_level.txt",
])
def test_only_the_packages_own_namespace_may_be_installed(spec, member):
    spec.extra = [(member, b"import os\n")]
    exc = refused(NamespaceViolation, spec, match="may install only its own package")
    assert exc.member == member


def test_a_package_and_a_module_of_the_own_name_together_are_refused(spec):
    spec.extra = [(f"{MOD}.py", b"X = 1\n")]
    refused(NamespaceViolation, spec, match="both")


def test_the_own_package_under_purelib_is_accepted(spec):
    spec.extra = [(f"{DI}.data/purelib/{MOD}/extra.py", b"X = 1\n")]
    assert check(spec).top_level == (MOD,)


def test_a_single_module_package_is_accepted(spec):
    spec.files = {f"{MOD}.py": b"class WordleEnv:\n    pass\n"}
    spec.entry_points = f"[gymhub.envs]\nalice/wordle-v0 = {MOD}:WordleEnv\n"
    assert check(spec).top_level == (f"{MOD}.py",)


@pytest.mark.parametrize("member", [
    f"{DI}.data/scripts/pip", f"{DI}.data/headers/x.h", f"{DI}.data/data/bin/python",
    f"{MOD}/evil.pth",
])
def test_data_schemes_and_pth_files_that_install_outside_are_refused(spec, member):
    spec.extra = [(member, b"import os\n")]
    refused(UnsafeMember, spec)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("Version", "0.2.0", "Version '0.2.0' disagrees"),
    ("Name", "gymhub-env-5-alice-chess", "disagrees with the file name"),
    ("Name", "wordle", "not the owner-qualified name"),
])
def test_metadata_that_disagrees_with_the_filename_is_refused(spec, field, value, match):
    fields = {"Name": spec.dist, "Version": spec.version} | {field: value}
    spec.metadata = f"Metadata-Version: 2.4\nName: {fields['Name']}\nVersion: {fields['Version']}\n"
    refused(WheelMetadataError, spec, match=match)


def test_duplicate_metadata_fields_are_refused(spec):
    spec.metadata = f"Metadata-Version: 2.4\nName: {spec.dist}\nVersion: 0.1.0\nVersion: 9.0\n"
    refused(WheelMetadataError, spec, match="exactly one Version")


def test_url_dependency_is_refused(spec):
    spec.metadata = (f"Metadata-Version: 2.4\nName: {spec.dist}\nVersion: 0.1.0\n"
                     "Requires-Dist: tau2 @ git+https://example.com/tau2\n")
    refused(WheelMetadataError, spec, match="direct URL")


def test_wheel_file_with_another_tag_is_refused(spec):
    spec.wheel = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: cp311-cp311-linux_x86_64\n"
    refused(WheelMetadataError, spec, match="Tag")


def test_second_dist_info_directory_is_refused(spec):
    spec.extra = [("other-1.0.dist-info/METADATA", b"Name: other\n")]
    refused(WheelMetadataError, spec, match="exactly one metadata directory")


@pytest.mark.parametrize(("filename", "match"), [
    ("gymhub_env_5_alice_wordle-0.1.0-1-py3-none-any.whl", "build tag"),
    ("gymhub_env_5_alice_wordle-0.1.0-cp311-cp311-linux_x86_64.whl", "py3-none-any"),
    ("gymhub_env_5_alice_wordle-0.1.0+local-py3-none-any.whl", "PEP 440"),
    ("gymhub_env_5_alice_wordle-01.0-py3-none-any.whl", "PEP 440"),
    ("wordle-0.1.0-py3-none-any.whl", "hub distributions start with"),
    ("gymhub_env_5_Alice_wordle-0.1.0-py3-none-any.whl", "write the name as"),
    ("wordle.zip", "is not NAME-VERSION"),
])
def test_bad_filenames_are_refused(spec, filename, match):
    refused(WheelFilenameError, data=spec.build()[1], filename=filename, match=match)


@pytest.mark.parametrize(("extra", "match"), [
    (("evil.pth", b"import os\n"), ".pth"),
    ((f"{MOD}/fast.cpython-311-x86_64-linux-gnu.so", b"\x7fELF"), "compiled"),
    ((f"{MOD}/__pycache__/env.cpython-311.pyc", b"\x00"), "compiled"),
    (("gymhub_env_5_alice_wordle-0.1.0.data/scripts/pip", b"#!/bin/sh\n"), "scripts"),
    (("gymhub_env_5_alice_wordle-0.1.0.data/data/bin/python", b"#!/bin/sh\n"), "scripts"),
])
def test_content_that_runs_outside_an_environment_is_refused(spec, extra, match):
    spec.extra = [extra]
    refused(UnsafeMember, spec, match=match)


def test_console_scripts_entry_points_are_refused(spec):
    spec.entry_points = (f"[gymhub.envs]\nalice/wordle-v0 = {MOD}.env:WordleEnv\n"
                         f"[console_scripts]\npip = {MOD}.env:main\n")
    refused(UnsafeMember, spec, match="console_scripts")


def test_no_environment_entry_point_is_refused(spec):
    spec.entry_points = ""
    refused(WheelMetadataError, spec, match="no \\[gymhub.envs\\]")


def test_invalid_uploader_owner_is_refused(spec):
    refused(InvalidName, spec, owner="Alice")


def test_every_refusal_is_an_invalid_archive_with_a_code():
    for cls in (ArchiveTooLarge, CorruptArchive, DuplicateMember, RecordMismatch, UnsafeMember,
                NamespaceViolation, WheelFilenameError, WheelMetadataError):
        assert issubclass(cls, InvalidArchive) and issubclass(cls, ValueError) and cls.code


def test_path_over_the_archive_cap_is_refused_before_reading(tmp_path):
    big = tmp_path / "gymhub_env_5_alice_wordle-0.1.0-py3-none-any.whl"
    with big.open("wb") as f:
        f.truncate(2048)
    with pytest.raises(ArchiveTooLarge):
        validate_wheel(big, owner="alice", limits=ArchiveLimits(max_archive_bytes=1024))


def test_unicode_path_extra_field_is_refused(spec):
    """Some unzippers take the name from this field instead of the header: two names."""
    info = zipfile.ZipInfo(f"{MOD}/ok.py")
    info.extra = b"\x75\x70\x09\x00\x01\x00\x00\x00\x00../x"
    spec.extra = [(info, b"x = 1\n")]
    refused(CorruptArchive, spec, match="Unicode path")


def test_compression_methods_other_than_deflate_are_refused(spec):
    spec.compression = zipfile.ZIP_BZIP2
    refused(CorruptArchive, spec, match="compression method 12")

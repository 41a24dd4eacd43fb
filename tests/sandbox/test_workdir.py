from __future__ import annotations

import os

import pytest

from gymhub.sandbox import SandboxPathError
from gymhub.sandbox.workdir import HostWorkdir, split_name


@pytest.mark.parametrize("name", ["a", "a/b.txt", "./a", "/work/a/b", "a//b"])
def test_good_names(name: str) -> None:
    assert split_name(name)


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../a", "a/../../b", "a\x00", "/work/..",
                                  ".", "/work/"])
def test_bad_names(name: str) -> None:
    with pytest.raises(SandboxPathError):
        split_name(name)


def test_files_round_trip_and_symlinks_refused() -> None:
    wd = HostWorkdir(4, os.geteuid(), os.getegid())
    try:
        wd.write_file("dir/sub/a.txt", "hello")
        assert wd.read_file("dir/sub/a.txt") == b"hello"
        assert wd.read_file("dir/sub/a.txt", max_bytes=2) == b"he"
        os.symlink("/etc/hostname", wd.path / "link")
        os.symlink("/etc", wd.path / "dlink")
        os.mkfifo(wd.path / "fifo")
        for name in ("link", "dlink/hostname", "fifo", "missing"):
            with pytest.raises(FileNotFoundError):
                wd.read_file(name)
        with pytest.raises(SandboxPathError):
            wd.write_file("link", "x")
        with pytest.raises(SandboxPathError):
            wd.write_file("dlink/x", "x")
        assert wd.list_files() == ["dir/sub/a.txt"]
        assert wd.collect(["dir/sub/a.txt", "link", "nope"], 100) == {"dir/sub/a.txt": b"hello"}
        wd.clear()
        assert wd.list_files() == [] and wd.path.is_dir()
    finally:
        wd.remove()
    assert not wd.path.exists()

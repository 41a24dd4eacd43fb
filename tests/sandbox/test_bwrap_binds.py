"""Read-only binds must be reachable by the user bwrap runs as, or the sandbox says why."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymhub.errors import BackendError
from gymhub.sandbox.bwrap import BwrapSandbox, others_can_reach

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder others can search (pytest's own tmp_path root is private to its user)."""
    path = Path(tempfile.mkdtemp(prefix="gymhub-binds-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_others_can_reach(open_dir):
    private = open_dir / "private"
    (private / "pkg").mkdir(parents=True)
    (private / "pkg" / "f.py").write_text("x = 1\n")
    private.chmod(0o700)
    assert not others_can_reach(private / "pkg") and not others_can_reach(private / "pkg/f.py")
    private.chmod(0o711)  # searchable, not listable: the package inside is reachable
    assert others_can_reach(private / "pkg") and others_can_reach(private / "pkg/f.py")
    assert not others_can_reach(open_dir / "missing")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="bwrap drops to host nobody only when run as root")
def test_a_bind_the_sandbox_user_cannot_reach_is_refused_up_front(open_dir):
    hidden = open_dir / "checkout"
    (hidden / "gymhub").mkdir(parents=True)
    hidden.chmod(0o700)
    with pytest.raises(BackendError, match=r"cannot reach .*checkout/gymhub"):
        BwrapSandbox(ro_binds={str(hidden / "gymhub"): "/opt/gymhub"})
    hidden.chmod(0o755)
    box = BwrapSandbox(ro_binds={str(hidden / "gymhub"): "/opt/gymhub"})
    try:
        assert box.run(["ls", "/opt/gymhub"]).exit_code == 0
    finally:
        box.close()

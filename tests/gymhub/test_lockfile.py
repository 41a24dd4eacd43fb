"""gymhub.lockfile: the lock read below the hub, so the learner needs no hub to use it."""

import ast
import hashlib
import subprocess
import sys
from pathlib import Path

import gymhub.hub.lock as hub_lock
from gymhub import lockfile
from gymhub.lockfile import Lock, env_digests

ROOT = Path(__file__).resolve().parents[2]


def _dist_info(site: Path, dist: str, version: str, entry_points: str = "") -> bytes:
    di = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    di.mkdir(parents=True)
    (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    record = b"x.py,sha256=abc,1\n"
    (di / "RECORD").write_bytes(record)
    if entry_points:
        (di / "entry_points.txt").write_text(entry_points)
    return record


def test_the_hub_lock_module_is_the_same_lock():
    assert hub_lock.Lock is Lock and hub_lock.now_iso is lockfile.now_iso
    assert hub_lock.LOCK_FILE == lockfile.LOCK_FILE == "gymhub.lock"


def test_a_lock_entry_is_found_by_the_env_ids_it_lists(tmp_path):
    lk = Lock(tmp_path / "gymhub.lock", {})
    lk.record({"hub": "http://h", "key_id": "k", "owner": "alice", "name": "word-ladder",
               "version": "0.1.0", "sha256": "a" * 64, "filename": "f.whl",
               "env_ids": ["alice/word-ladder-v0", "alice/word-ladder-v1"], "trusted": False,
               "check": "passed"})
    lk.save()
    got = env_digests(["alice/word-ladder-v1", "echo-v0"], tmp_path / "gymhub.lock")
    assert got == {"alice/word-ladder-v1": {
        "source": "lock", "hub": "http://h", "key_id": "k", "version": "0.1.0",
        "sha256": "a" * 64, "filename": "f.whl", "trusted": False, "check": "passed"}}


def test_an_installed_env_is_found_by_the_entry_point_that_registers_it(tmp_path, monkeypatch):
    # Whatever the distribution is called, its entry point is what the registry loaded.
    site = tmp_path / "site"
    record = _dist_info(site, "chess-by-bob", "2.0", "[gymhub.envs]\nbob/chess-v0 = m:Env\n")
    monkeypatch.syspath_prepend(str(site))
    want = {"source": "installed", "version": "2.0",
            "record_sha256": hashlib.sha256(record).hexdigest()}
    assert env_digests(["bob/chess-v0"], tmp_path / "none.lock") == {"bob/chess-v0": want}
    assert hub_lock.env_digests(["bob/chess-v0"], tmp_path / "none.lock") == {
        "bob/chess-v0": want}


def test_only_the_hub_also_looks_a_package_up_by_its_hub_name(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _dist_info(site, "gymhub-env-3-bob-chess", "1.0")  # no entry points
    monkeypatch.syspath_prepend(str(site))
    assert env_digests(["bob/chess-v0"], tmp_path / "none.lock") == {
        "bob/chess-v0": {"source": "unknown"}}
    assert hub_lock.env_digests(["bob/chess-v0"], tmp_path / "none.lock")[
        "bob/chess-v0"]["source"] == "installed"


def test_reading_the_lock_imports_nothing_of_the_hub(tmp_path):
    code = ("import sys\nfrom gymhub.lockfile import env_digests\n"
            f"env_digests(['alice/x-v0', 'echo-v0'], {str(tmp_path / 'none.lock')!r})\n"
            "print(','.join(m for m in sys.modules if m.startswith('gymhub.hub')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == ""


def test_the_trainer_imports_nothing_of_the_hub():
    for path in (ROOT / "trainer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith("gymhub.hub") for n in names), path

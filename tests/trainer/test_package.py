"""`import gymhub.trainer` stays cheap; the lazy names resolve."""

import subprocess
import sys


def test_import_is_light():
    code = (
        "import sys, gymhub.trainer, gymhub.trainer.config, gymhub.trainer.advantages, "
        "gymhub.trainer.parsers, gymhub.trainer.losses, gymhub.trainer.engines; "
        "print(','.join(m for m in ('torch', 'transformers', 'peft', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_lazy_exports():
    import gymhub.trainer as t

    assert t.GRPOConfig().group_size == 4
    assert callable(t.compute_advantages)

"""``gymhub vllm-serve``: the flags and variables the learner's start-up check expects."""

from __future__ import annotations

import json
import shlex

import pytest

from gymhub.cli import main
from gymhub.trainer.vllm_serve import LORA_RANKS, build_command


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_lora_server_flags_and_environment():
    argv, env = build_command("/models/tiny", lora_rank=20, enable_sleep_mode=True)
    assert argv[argv.index("serve") + 1] == "/models/tiny"
    assert _flag(argv, "--logprobs-mode") == "processed_logprobs"
    assert _flag(argv, "--generation-config") == "vllm"
    assert "--enable-lora" in argv and _flag(argv, "--max-lora-rank") == "32"  # 20 -> 32
    assert "--enforce-eager" in argv and "--enable-sleep-mode" in argv
    assert "--weight-transfer-config" not in argv
    assert env == {"VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}


def test_full_finetuning_gets_the_nccl_weight_transfer():
    argv, env = build_command("m", finetune="full", enforce_eager=False, max_model_len=4096,
                              extra=["--tensor-parallel-size", "1"])
    assert json.loads(_flag(argv, "--weight-transfer-config")) == {"backend": "nccl"}
    assert "--enable-lora" not in argv and "--enforce-eager" not in argv
    assert _flag(argv, "--max-model-len") == "4096" and argv[-2:] == ["--tensor-parallel-size",
                                                                        "1"]
    assert env == {"VLLM_SERVER_DEV_MODE": "1"}


def test_rank_beyond_vllms_largest_is_refused():
    assert build_command("m", lora_rank=LORA_RANKS[-1])[0]
    with pytest.raises(ValueError, match="largest LoRA rank"):
        build_command("m", lora_rank=LORA_RANKS[-1] + 1)


def test_cli_dry_run_reads_the_training_config(tmp_path, capsys):
    cfg = tmp_path / "train.toml"
    cfg.write_text('lora_r = 64\nvllm_enforce_eager = false\nvllm_enable_sleep_mode = true\n'
                   'max_context_tokens = 3072\n')
    assert main(["vllm-serve", "/m/tiny", "--config", str(cfg), "--port", "8123",
                 "--dry-run", "--", "--seed", "3"]) == 0
    line = capsys.readouterr().out.strip()
    words = shlex.split(line)
    assert words[:2] == ["VLLM_SERVER_DEV_MODE=1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"]
    assert _flag(words, "--max-lora-rank") == "64" and _flag(words, "--port") == "8123"
    assert "--enforce-eager" not in words and "--enable-sleep-mode" in words
    assert _flag(words, "--max-model-len") == "3072" and words[-2:] == ["--seed", "3"]


def test_cli_errors_are_exit_2(tmp_path, capsys):
    assert main(["vllm-serve", "m", "--lora-rank", "1000", "--dry-run"]) == 2
    assert "largest LoRA rank" in capsys.readouterr().err
    assert main(["vllm-serve", "m", "--config", str(tmp_path / "missing.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_without_vllm_the_cli_says_exactly_what_to_install(monkeypatch, capsys):
    """``gymhub[train,vllm]`` cannot resolve (torch 2.13.0 against vLLM's 2.14.0): the
    hint names the two commands that work, in order, instead of ``gymhub[vllm]``."""
    from gymhub.trainer import vllm_serve

    monkeypatch.setattr(vllm_serve, "_vllm_installed", lambda: False)
    monkeypatch.setattr(vllm_serve.os, "execvpe", lambda *a: pytest.fail("exec'd vLLM"))
    assert main(["vllm-serve", "m"]) == 1
    err = capsys.readouterr().err
    assert "pip install 'gymhub[train]' && pip install 'vllm>=0.33,<0.34'" in err
    assert "'gymhub[train,vllm]' in one command does not resolve" in err


def test_the_colocated_engine_without_vllm_gives_the_same_hint(monkeypatch):
    import sys

    from gymhub.trainer.engines.vllm_local import IN_PROCESS_ENV, VLLM_INSTALL_HINT, VLLMEngine

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    monkeypatch.setenv(IN_PROCESS_ENV, "0")  # the engine sets it; restored afterwards
    with pytest.raises(ImportError) as info:
        VLLMEngine("m")
    assert VLLM_INSTALL_HINT in str(info.value) and "gymhub[vllm]" not in str(info.value)

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

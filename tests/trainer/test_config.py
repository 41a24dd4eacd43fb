"""GRPOConfig: documented fields, TOML, command-line overrides and their errors."""

import dataclasses

import pytest

from gymhub.errors import ConfigError
from gymhub.trainer.config import GRPOConfig, describe, load_config, parse_overrides


def test_every_field_is_documented():
    for f in dataclasses.fields(GRPOConfig):
        assert len(f.metadata.get("doc", "")) > 10, f.name
    assert "--group-size" in describe()


def test_toml_and_overrides(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text(
        'model = "m"\ngroup_size = 8\nenv_ids = ["echo-v0", "sql-v0"]\n'
        'delta = 4.0\n[tag_tools]\nsql = "query"\n'
    )
    cfg = load_config(
        p,
        [
            "--group-size",
            "3",
            "--learning-rate=1e-4",
            "--bf16",
            "--loss-type",
            "grpo",
            "--delta",
            "none",
            "--stop",
            "a,b",
            "--tis-cap",
            "2",
        ],
    )
    assert cfg.model == "m" and cfg.group_size == 3 and cfg.learning_rate == 1e-4
    assert cfg.bf16 is True and cfg.loss_type == "grpo" and cfg.delta is None
    assert cfg.env_ids == ["echo-v0", "sql-v0"] and cfg.tag_tools == {"sql": "query"}
    assert cfg.stop == ["a", "b"] and cfg.tis_cap == 2.0


def test_negative_numbers_and_flags():
    out = parse_overrides(["--epsilon-low", "0.1", "--mask-truncated", "--seed", "-3"])
    assert out == {"epsilon_low": 0.1, "mask_truncated": True, "seed": -3}


def test_unknown_key_suggests():
    with pytest.raises(ConfigError, match="did you mean 'group_size'"):
        parse_overrides(["--grup-size", "4"])
    with pytest.raises(ConfigError, match="did you mean 'learning_rate'"):
        GRPOConfig.from_dict({"learning_rte": 1.0})


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--group-size", "four"], "expects int"),
        (["--bf16", "maybe"], "expects bool"),
        (["--loss-type", "ppo"], "must be one of"),
        (["--group-size"], "needs a value"),
        (["group_size", "4"], "expected --key value"),
    ],
)
def test_bad_values(argv, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, argv)


def test_toml_type_errors(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('group_size = "8"\n')
    with pytest.raises(ConfigError, match="group_size expects int"):
        load_config(p)
    p.write_text("group_size = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_validation():
    with pytest.raises(ConfigError, match="group_size"):
        GRPOConfig(group_size=1)
    with pytest.raises(ConfigError, match="delta"):
        GRPOConfig(delta=1.1)
    with pytest.raises(ConfigError, match="engine_url"):
        GRPOConfig(engine="vllm-server")
    assert GRPOConfig().to_dict()["loss_type"] == "dapo"

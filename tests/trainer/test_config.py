"""GRPOConfig: documented fields, TOML, command-line overrides and their errors."""

import pytest

from gymhub.errors import ConfigError
from gymhub.trainer.config import GRPOConfig, describe, load_config, parse_overrides


def test_every_field_is_documented():
    for name, info in GRPOConfig.model_fields.items():
        assert len(info.description or "") > 10, name
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


def test_env_table_and_foreign_tables(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text('env_ids = ["sql-v0"]\n[env]\nshow_schema = true\nmax_turns = 1\n'
                 '[demo]\nwarmup_steps = 8\n')
    notes: list[str] = []
    cfg = load_config(p, ["--env-args", "show_schema=false,db=\"retail\""], notes=notes)
    assert cfg.env_args == {"show_schema": False, "db": "retail"}
    assert notes == ["[demo] skipped: read by `python -m gymhub.trainer.demo` (its warm-up) only"]
    assert load_config(p).env_args == {"show_schema": True, "max_turns": 1}
    p.write_text("[bogus]\nx = 1\n")
    with pytest.raises(ConfigError, match="unknown config key 'bogus'"):
        load_config(p)


def test_the_demo_config_loads_for_gymhub_train():
    cfg = load_config("examples/sql_demo.toml")
    assert cfg.env_ids == ["sql-v0"] and cfg.env_args == {"show_schema": True, "max_turns": 1}


def test_a_model_name_that_is_not_a_directory_fails_without_the_network(tmp_path):
    from gymhub.trainer.policy import load_policy

    for model in ("HuggingFaceTB/SmolLM2-135M-Instruct", str(tmp_path)):
        with pytest.raises(ConfigError, match="not a local model directory"):
            load_policy(GRPOConfig(model=model))


def test_help_shows_types_bounds_and_defaults():
    text = describe()
    assert "--group-size (int >= 2, default 4)" in text
    assert "--tis-cap (float > 0 or none, default None)" in text
    assert "--loss-type (one of grpo/bnpo/dr_grpo/dapo, default 'dapo')" in text


def test_every_problem_is_named_at_once():
    with pytest.raises(ConfigError) as info:
        GRPOConfig.from_dict({"group-size": 1, "lora_r": 0, "top_p": 2.0})
    message = str(info.value)
    assert "group_size must be >= 2" in message and "lora_r must be >= 1" in message
    assert "top_p must be <= 1" in message


def test_dash_values_need_the_equals_form():
    with pytest.raises(ConfigError, match="--learning-rate=VALUE"):
        parse_overrides(["--learning-rate", "-1e-4"])
    assert parse_overrides(["--learning-rate=-1e-4"]) == {"learning_rate": -1e-4}
    assert parse_overrides(["--env-args", '{"x": [1]}', "--tokenizer", "none"]) == {
        "env_args": {"x": [1]}, "tokenizer": None}


def test_device_is_validated_and_a_missing_gpu_is_a_clear_error():
    import torch

    from gymhub.errors import ConfigError
    from gymhub.trainer.policy import resolve_device

    assert GRPOConfig(model="m").device == "auto"
    with pytest.raises(ConfigError, match="device"):
        GRPOConfig(model="m", device="tpu")
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="sees no GPU"):
            resolve_device("cuda:0")


@pytest.mark.parametrize("weights", [{"rows": float("nan")}, {"": 0.1}, {"runs": float("inf")}])
def test_partial_credit_needs_names_and_finite_weights(weights):
    with pytest.raises(ConfigError, match="partial_credit needs"):
        GRPOConfig(model="tiny", env_ids=["sql-v0"], partial_credit=weights)
    cfg = load_config(None, ["--partial-credit", '{"runs": 0.1, "rows": 0.3}'])
    assert cfg.partial_credit == {"runs": 0.1, "rows": 0.3}

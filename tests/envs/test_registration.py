from importlib import metadata

import pytest

from gymhub.envs import EnvSpec, Registry
from gymhub.envs.echo import EchoEnv
from gymhub.errors import ConfigError, DuplicateEnv, EnvNotFound, RegistryError


def test_lazy_string_entry_point_is_imported_on_make():
    reg = Registry()
    reg.register("echo-v0", "gymhub.envs.echo:EchoEnv", max_turns=3, kwargs={"n_tasks": 5})
    env = reg.make("echo-v0")
    assert isinstance(env, EchoEnv) and env.max_turns == 3 and len(env.tasks) == 5
    assert reg.make("echo-v0", max_turns=9).max_turns == 9
    assert env.env_spec.id == "echo-v0"


def test_did_you_mean():
    reg = Registry()
    reg.register("sql-v0", "gymhub.envs.echo:EchoEnv")
    with pytest.raises(EnvNotFound, match="Did you mean 'sql-v0'"):
        reg.make("sql-v1")
    with pytest.raises(KeyError):  # EnvNotFound is also a KeyError
        reg.spec("nothing-like-it-v0")


@pytest.mark.parametrize("bad", ["sql", "sql-v", "a b-v0", "-v0", "ns//x-v0"])
def test_invalid_ids_are_refused(bad):
    with pytest.raises(ConfigError):
        EnvSpec(id=bad, entry_point="m:C")


def test_duplicates_and_bad_entry_points():
    reg = Registry()
    reg.register("x-v0", "gymhub.envs.echo:EchoEnv")
    with pytest.raises(DuplicateEnv):
        reg.register("x-v0", "gymhub.envs.echo:EchoEnv")
    reg.register("x-v0", "gymhub.envs.echo:Nope", override=True)
    with pytest.raises(RegistryError, match="cannot load entry point"):
        reg.make("x-v0")
    with pytest.raises(ConfigError):
        reg.register("y-v0", "no_colon_here")


def test_namespaced_ids_and_callable_entry_points():
    reg = Registry()
    reg.register("acme/echo-v2", EchoEnv)
    assert "acme/echo-v2" in reg and isinstance(reg.make("acme/echo-v2"), EchoEnv)


def test_entry_point_group_discovery(monkeypatch):
    eps = metadata.EntryPoints([
        metadata.EntryPoint(name="thirdparty-echo-v0", value="gymhub.envs.echo:EchoEnv", group="gymhub.envs"),
        metadata.EntryPoint(name="not a valid id", value="x:y", group="gymhub.envs"),
    ])
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: eps if group == "gymhub.envs" else [])
    reg = Registry(discover=True)
    assert "thirdparty-echo-v0" in reg
    assert isinstance(reg.make("thirdparty-echo-v0"), EchoEnv)
    assert reg.ids() == ["thirdparty-echo-v0"]


def test_default_registry_has_builtins():
    from gymhub.envs import registry
    assert {"echo-v0", "sql-v0"} <= set(registry.ids())


def test_parse_env_args_json_values_and_targets():
    from gymhub.envs.registration import parse_env_args

    out = parse_env_args(["n=5", "sql-v0:difficulty=easy", "flag=true", "name=x y"], ["sql-v0", "code-v0"])
    assert out["sql-v0"] == {"n": 5, "difficulty": "easy", "flag": True, "name": "x y"}
    assert out["code-v0"] == {"n": 5, "flag": True, "name": "x y"}
    assert out[""] == {"n": 5, "flag": True, "name": "x y"}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_env_args(["novalue"])
    with pytest.raises(ConfigError, match="not served"):
        parse_env_args(["other-v0:x=1"], ["sql-v0"])


def test_a_module_may_register_the_class_its_entry_point_names(monkeypatch):
    from importlib import metadata

    ep = metadata.EntryPoint("echoish-v0", "gymhub.envs.echo:EchoEnv", "gymhub.envs")
    monkeypatch.setattr(metadata, "entry_points", lambda group: [ep])
    reg = Registry(discover=True)
    assert reg.spec("echoish-v0").description == ""
    spec = reg.register("echoish-v0", EchoEnv, description="registered by its module")
    assert reg.spec("echoish-v0") is spec
    with pytest.raises(DuplicateEnv):  # once is a description; twice is a clash again
        reg.register("echoish-v0", EchoEnv)
    reg2 = Registry(discover=True)
    reg2.spec("echoish-v0")
    with pytest.raises(DuplicateEnv):  # another class under a discovered id is a clash
        reg2.register("echoish-v0", "gymhub.envs.sql.env:SqlEnv")


def test_register_has_real_keyword_parameters():
    import inspect

    import gymhub
    from gymhub.envs import register

    for fn in (register, gymhub.register, Registry.register, gymhub.check_env):
        kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, fn
        assert inspect.Parameter.VAR_POSITIONAL not in kinds, fn
    reg = Registry()
    spec = reg.register("z-v0", EchoEnv, max_turns=3, tags=["toy"], kwargs={"n_tasks": 2})
    assert spec.tags == ("toy",) and spec.kwargs == {"n_tasks": 2}
    assert len(reg.make("z-v0").tasks) == 2
    with pytest.raises(ConfigError, match="takes no other spec fields"):
        reg.register(spec, max_turns=4)

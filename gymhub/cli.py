"""The ``gymhub`` command line.

Every subcommand imports what it needs when it runs, so ``gymhub --help`` costs
nothing but argparse. Subcommands that belong to a subpackage (``serve``,
``sandbox``) hand their arguments to that subpackage's own ``main``; the hub's user
commands (``push``, ``install``, ...) are added from :mod:`gymhub.hub.consumer_cli`,
which imports nothing else until one of them runs.

Every command reports a :class:`~gymhub.errors.GymhubError` as one line,
``gymhub: error: ...``, with exit status 1 or 2 (see :mod:`gymhub.cli_errors`);
``gymhub --debug CMD ...`` shows the traceback too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def _make(env_id: str, pairs: Sequence[str]) -> Any:
    from gymhub.envs import make
    from gymhub.envs.registration import parse_env_args

    return make(env_id, **parse_env_args(pairs)[""])


def _cmd_envs_list(args: argparse.Namespace) -> int:
    from gymhub.envs import registry

    specs = list(registry)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": s.id,
                        "description": s.description,
                        "verifier": s.verifier,
                        "max_turns": s.max_turns,
                        "tags": list(s.tags),
                    }
                    for s in specs
                ]
            )
        )
        return 0
    width = max((len(s.id) for s in specs), default=2)
    for s in specs:
        print(f"{s.id:<{width}}  {s.description}")
    return 0


def _ids_registered_by(path: str) -> list[str]:
    """Import an environment author's file and return the ids its ``register`` calls added.

    Why a file and not only an id: the first thing an author has is one module; making
    them package it before the gate can run would put the gate after the work it checks.
    """
    import importlib.util
    from pathlib import Path

    from gymhub.envs import registry
    from gymhub.errors import ConfigError

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{path}: no such file")
    before = set(registry.ids())
    spec = importlib.util.spec_from_file_location(file.stem, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module  # entry points written as "<stem>:Class" resolve to it
    spec.loader.exec_module(module)
    added = sorted(set(registry.ids()) - before)
    if not added:
        raise ConfigError(f"{path} registers no environment (call gymhub.envs.register)")
    return added


def _ids_to_check(target: str) -> list[str]:
    """The environment ids ``gymhub env check TARGET`` means.

    A ``.py`` file registers its own; a package directory (``gymhub env init`` makes
    one) advertises them as ``gymhub.envs`` entry points in its ``pyproject.toml``; any
    other argument is an id. An argument is a directory when one exists by that name or
    when it is spelled as a path (``./x``, ``/x``), so a mistyped path fails as a path.
    """
    if target.endswith(".py"):
        return _ids_registered_by(target)
    if os.path.isdir(target) or target.startswith((".", "/", "~")):
        from gymhub.hub.project import load_package, read_package

        return load_package(read_package(os.path.expanduser(target)))
    return [target]


def _check_ids(ids: Sequence[str], args: argparse.Namespace) -> bool:
    """Run check_env on each id and print its report; True when all pass."""
    from gymhub.envs import check_env

    limit = None if args.gold_tasks == "all" else int(args.gold_tasks)
    ok = True
    for env_id in ids:
        report = check_env(_make(env_id, args.env_arg), gold_tasks=limit, raise_on_failure=False)
        if len(ids) > 1 and not args.json:
            print(f"== {env_id}")
        print(json.dumps(report.to_dict()) if args.json else report.summary())
        ok = ok and report.ok
    return ok


def _cmd_env_check(args: argparse.Namespace) -> int:
    return 0 if _check_ids(_ids_to_check(args.env), args) else 1


def _cmd_env_init(args: argparse.Namespace) -> int:
    from gymhub.hub.scaffold import distribution_name, env_id, init_env, resolve_owner

    owner = resolve_owner(args.owner)
    path = init_env(args.name, owner=owner, parent=args.dir)
    print(f"created {path}: environment {env_id(owner, args.name)}, "
          f"distribution {distribution_name(owner, args.name)}")
    print(f"next: gymhub env check {path} && gymhub env build {path}")
    return 0


def _cmd_env_build(args: argparse.Namespace) -> int:
    from gymhub.hub.build import build_wheel
    from gymhub.hub.project import load_package, read_package

    package = read_package(os.path.expanduser(args.path))
    if not args.no_check and not _check_ids(load_package(package), args):
        print("gymhub: error: the check failed, so nothing was built (--no-check builds "
              "anyway)", file=sys.stderr)
        return 1
    print(build_wheel(package.root))
    return 0


def _parse_call(line: str, tools: dict[str, dict[str, Any]]) -> Any:
    from gymhub.types import Message, ToolCall

    name, _, rest = line.strip().partition(" ")
    if name not in tools:
        return Message(role="assistant", content=line)
    rest = rest.strip()
    props = tools[name]["function"]["parameters"]["properties"]
    if rest.startswith("{"):
        try:
            args = json.loads(rest)
        except json.JSONDecodeError as exc:
            print(f"(not valid JSON: {exc.msg}; sending it anyway as text)")
            return Message(role="assistant", content=line)
    elif len(props) == 1 and rest:
        args = {next(iter(props)): rest}
    else:
        args = {}
    return Message(role="assistant", content="", tool_calls=(ToolCall("play", name, args),))


def _cmd_play(args: argparse.Namespace) -> int:
    from gymhub.types import format_message

    env = _make(args.env, args.env_arg)
    options = {"task_id": args.task} if args.task else None
    obs, info = env.reset(seed=args.seed, options=options)
    tools = {t["function"]["name"]: t for t in info.get("tools", [])}
    example = next(iter(tools), "tool")
    print(
        f"task {info['task_id']}: type `TOOL ARG` (e.g. `{example} ...`), `TOOL {{json}}`, "
        "plain text, or :quit"
    )
    for t in tools.values():
        fn = t["function"]
        print(f"  {fn['name']}({', '.join(fn['parameters']['properties'])}): {fn['description']}")
    for m in obs:
        print(format_message(m))
    while True:
        try:
            line = input(f"turn {env.turn + 1}/{env.max_turns}> ")
        except EOFError:
            break
        if line.strip() in {":quit", ":q"}:
            break
        if not line.strip():
            continue
        obs, reward, terminated, truncated, info = env.step(_parse_call(line, tools))
        for m in obs:
            print(format_message(m))
        if terminated or truncated:
            score = info.get("score")
            print(
                f"episode over ({'terminated' if terminated else 'truncated'}); "
                f"reward {reward:g}; score {score.to_dict() if score else None}"
            )
            break
    env.close()
    return 0


def _add_check_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gold-tasks", default="25", help="tasks the gold policy must solve, or 'all'")
    p.add_argument("--json", action="store_true")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gymhub", description=__doc__.splitlines()[0] if __doc__ else ""
    )
    p.add_argument("--debug", action="store_true",
                   help="show the traceback of an error (before the command; also "
                        "GYMHUB_DEBUG=1)")
    sub = p.add_subparsers(dest="command", required=True)

    envs = sub.add_parser("envs", help="list registered environments")
    envs_sub = envs.add_subparsers(dest="envs_command", required=True)
    lst = envs_sub.add_parser("list", help="list registered environments")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(fn=_cmd_envs_list)

    env = sub.add_parser("env", help="work with one environment")
    env_sub = env.add_subparsers(dest="env_command", required=True)
    chk = env_sub.add_parser("check", help="run check_env on an environment")
    chk.add_argument(
        "env",
        help="an environment id, a .py file whose register() calls to check, or a package "
        "directory whose pyproject.toml names its environments",
    )
    _add_check_options(chk)
    chk.set_defaults(fn=_cmd_env_check)

    init = env_sub.add_parser("init", help="create an environment package that passes the check")
    init.add_argument("name", help="the environment's name: lowercase letters, digits, hyphens")
    init.add_argument("--owner", default=None,
                      help="the owner (namespace) on the hub; default: the hub token's owner")
    init.add_argument("--dir", default=".", help="create NAME/ in this directory (default: .)")
    init.set_defaults(fn=_cmd_env_init)

    build = env_sub.add_parser(
        "build", help="check a package directory, then build its wheel into PATH/dist/"
    )
    build.add_argument("path", help="the package directory (with pyproject.toml)")
    build.add_argument("--no-check", action="store_true", help="build without running the check")
    _add_check_options(build)
    build.set_defaults(fn=_cmd_env_build)

    from gymhub.hub.consumer_cli import add_consumer_commands

    add_consumer_commands(sub, check=_check_ids, add_check_options=_add_check_options)

    from gymhub.eval_cli import add_eval_commands

    add_eval_commands(sub)

    from gymhub.launch.cli import add_parser as add_launch_parser

    add_launch_parser(sub)

    play = sub.add_parser("play", help="play an episode in the terminal")
    play.add_argument("env")
    play.add_argument("--seed", type=int, default=None)
    play.add_argument("--task", default=None, help="task id")
    play.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    play.set_defaults(fn=_cmd_play)

    sub.add_parser(
        "serve", help="serve environments over HTTP (see `gymhub serve --help`)", add_help=False
    )
    sub.add_parser(
        "train",
        help="train a model with GRPO (see `gymhub train --help`)",
        add_help=False,
    )
    sub.add_parser(
        "sandbox",
        help="run commands in the sandbox (see `gymhub sandbox exec --help`)",
        add_help=False,
    )
    sub.add_parser(
        "hub", help="run and administer a hub (see `gymhub hub --help`)", add_help=False
    )
    sub.add_parser(
        "vllm-serve",
        help="start a vLLM server for training (see `gymhub vllm-serve --help`)",
        add_help=False,
    )
    return p


#: The extra that ships what each delegated command imports.
_EXTRA_OF = {"serve": "server", "sandbox": "sandbox", "train": "train", "hub": "hub",
             "vllm-serve": "vllm"}
_DELEGATED = {
    "serve": "gymhub.server.cli",
    "sandbox": "gymhub.sandbox.cli",
    "train": "gymhub.trainer.cli",
    "hub": "gymhub.hub.cli",
    "vllm-serve": "gymhub.trainer.vllm_serve",
}


#: Exit status of a command whose reader went away (128 + SIGPIPE, what a shell reports).
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gymhub`` script.

    A reader that stops early (``gymhub train --help | head -3``) is normal use, not a
    crash: the broken pipe ends the command quietly with status 141, as ``SIGPIPE``
    would end a C tool. Stdout is flushed here, inside the handler, so that the error
    cannot surface later at interpreter exit, and then pointed at ``/dev/null`` so that
    Python's own final flush has nowhere to fail.
    """
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a file descriptor (e.g. captured)
            pass
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    """Strip the global ``--debug``, then run the command, reporting its errors."""
    from gymhub.cli_errors import debug_mode, report
    from gymhub.errors import GymhubError

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = False
    while argv and argv[0] == "--debug":
        debug = True
        del argv[0]
    with debug_mode(debug):
        try:
            return _dispatch(argv)
        except GymhubError as exc:
            return report(exc)


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in _DELEGATED:
        import importlib

        try:
            module = importlib.import_module(_DELEGATED[argv[0]])
        except ModuleNotFoundError as exc:  # a command whose extra is not installed
            extra = _EXTRA_OF.get(argv[0], argv[0])
            print(f"gymhub {argv[0]}: needs {exc.name!r}: pip install 'gymhub[{extra}]'",
                  file=sys.stderr)
            return 2
        rest = argv[1:]
        return int(module.main(rest))
    args = _build_parser().parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())

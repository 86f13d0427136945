"""The command line is a thin, typed layer: each command's function takes its options by name
and builds the library's config; one default cap, one "unset" (None) for the target size;
`--help` loads no stage."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
import typing
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import typing_extensions
from click.testing import CliRunner

from shardkit import cli
from shardkit.cli import ByteSize, main, pack_shards
from shardkit.pack import ExecutorName, OnProblem, PackConfig, PackSummary, ShardFormatName, pack
from shardkit.plan import DEFAULT_MAX_SHARD_BYTES, PlanEntry, default_target, plan_shards
from shardkit.push import PushConfig, PushSummary, push
from shardkit.remux import ImageFormatName, RemuxConfig, RemuxSummary, remux
from shardkit.verify import VerifyReport, verify
from tests.support.corpus import REPO_ROOT, Corpus

COMMANDS = {
    "pack": main.commands["pack"],
    "pack-shards": pack_shards,
    "push": main.commands["push"],
    "remux": main.commands["remux"],
    "verify": main.commands["verify"],
    "new": main.commands["new"],
}


def _hints(command: click.Command) -> dict[str, Any]:
    """The callback's parameters and their types; those it takes as ``**options: Unpack[SomeOptions]``
    (a TypedDict, for a command with many options) by their names in the TypedDict."""
    assert command.callback is not None
    names = vars(cli) | vars(typing) | _ALIASES
    hints = typing.get_type_hints(command.callback, names)
    for name, parameter in inspect.signature(command.callback).parameters.items():
        if parameter.kind is parameter.VAR_KEYWORD:
            (options,) = typing.get_args(hints.pop(name))  # Unpack[SomeOptions]
            hints |= typing.get_type_hints(options, names, names)  # (the keys' types name cli's TYPE_CHECKING imports)
    return hints


def _option_names(command: click.Command) -> set[str]:
    """The names a command's callback takes: keyword-only parameters, and a TypedDict's keys."""
    assert command.callback is not None
    return set(_hints(command)) - {"return"}


_ALIASES = {
    "ShardFormatName": ShardFormatName,
    "OnProblem": OnProblem,
    "ExecutorName": ExecutorName,
    "ImageFormatName": ImageFormatName,
    "Unpack": typing_extensions.Unpack,
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_function_names_every_option_and_types_it(name: str) -> None:
    """click passes every parameter by name: the function lists each one, keyword-only and typed."""
    command = COMMANDS[name]
    assert command.callback is not None
    signature = inspect.signature(command.callback)
    given = {p.name for p in command.params if p.expose_value}
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in signature.parameters.values())
    assert _option_names(command) == given
    hints = _hints(command)
    assert not [n for n, t in hints.items() if t is Any]


@pytest.mark.parametrize("name", ["pack", "pack-shards", "remux"])
def test_the_choices_offered_are_the_configs_choices(name: str) -> None:
    """A choice the command line offers is a value the config's Literal type takes, and all of them."""
    hints = _hints(COMMANDS[name])
    choices = {p.name: p.type.choices for p in COMMANDS[name].params if isinstance(p.type, click.Choice)}
    assert choices  # format and executor at least
    for param, offered in choices.items():
        assert param is not None
        assert tuple(offered) == typing.get_args(hints[param]), param


def test_one_default_cap_everywhere() -> None:
    """The cap's default is written once (plan.DEFAULT_MAX_SHARD_BYTES): the library's configs and
    both commands' --max-shard-size give it, and --help shows it as 1GB."""
    for command in (COMMANDS["pack"], COMMANDS["pack-shards"], COMMANDS["remux"]):
        option = next(p for p in command.params if p.name == "max_shard_size")
        assert ByteSize().convert(option.default, None, None) == DEFAULT_MAX_SHARD_BYTES  # type: ignore[arg-type]
        target = next(p for p in command.params if p.name == "target_shard_size")
        assert target.default is None
    assert PackConfig("i", "m", "o").max_shard_bytes == DEFAULT_MAX_SHARD_BYTES
    assert RemuxConfig("s", "o", "m:f").max_shard_bytes == DEFAULT_MAX_SHARD_BYTES
    help_text = CliRunner().invoke(main, ["pack", "--help"]).output
    assert "[default: 1GB]" in help_text


def test_an_unset_target_is_half_the_cap_in_the_library_too() -> None:
    assert PackConfig("i", "m", "o").target_shard_bytes is None
    assert PackConfig("i", "m", "o").target_bytes == default_target(DEFAULT_MAX_SHARD_BYTES) == 500_000_000
    assert PackConfig("i", "m", "o", max_shard_bytes=3_000_000).target_bytes == 1_500_000
    assert PackConfig("i", "m", "o", max_shard_bytes=3_000_000, target_shard_bytes=1000).target_bytes == 1000
    # The planner takes None the same way: a cap alone, and the target follows it.
    (shard,) = plan_shards([PlanEntry("ab" * 4, 1000)], prefix_length=1, max_shard_bytes=3_000_000)
    assert (shard.name, shard.rows) == ("data/a.zip", 1)


def test_a_library_pack_with_a_small_cap_alone_works(corpus: Corpus, tmp_path: Path) -> None:
    """Before, PackConfig's target default (500 MB) stayed when the cap was lowered: a refusal."""
    out = tmp_path / "out"
    summary = pack(
        PackConfig(str(corpus.images), str(corpus.meta), str(out), max_shard_bytes=3_000_000, jobs=1),
    )
    manifest = json.loads((out / "shards.json").read_text())
    assert summary.rows == 40
    assert (manifest["max_shard_bytes"], manifest["target_shard_bytes"]) == (3_000_000, 1_500_000)


def test_a_target_of_zero_is_refused_not_taken_for_unset(corpus: Corpus, tmp_path: Path) -> None:
    """None is the one "unset": 0 is a size, and out of range (it used to mean the default)."""
    out = tmp_path / "o"
    result = CliRunner().invoke(
        pack_shards, [str(corpus.images), str(corpus.meta), "-o", str(out), "--target-shard-size", "0"]
    )
    assert result.exit_code == 2
    assert "error: target shard size must be between 1 and the max shard size (1000000000), got 0" in result.stderr
    assert not out.exists()


def test_the_stage_functions_take_one_config_and_return_a_dataclass() -> None:
    """pack, push and remux: the config, then keyword-only extras; verify: keyword-only options."""
    for function, config, result in (
        (pack, PackConfig, PackSummary),
        (push, PushConfig, PushSummary),
        (remux, RemuxConfig, RemuxSummary),
    ):
        hints = typing.get_type_hints(function)
        params = list(inspect.signature(function).parameters.values())
        assert hints[params[0].name] is config and params[0].kind is params[0].POSITIONAL_OR_KEYWORD
        assert all(p.kind is p.KEYWORD_ONLY for p in params[1:])
        assert hints["return"] is result and is_dataclass(result)
        assert config.__dataclass_params__.frozen  # type: ignore[attr-defined]
    params = list(inspect.signature(verify).parameters.values())
    assert [p.kind for p in params[1:]] == [inspect.Parameter.KEYWORD_ONLY] * (len(params) - 1)
    assert typing.get_type_hints(verify)["return"] is VerifyReport and is_dataclass(VerifyReport)


#: What `--help` must not load: the stages, and the libraries they need (each command loads its
#: own when it runs). Loading them made `shardkit --help` take about a second on a busy machine.
HEAVY_MODULES = (
    "datasets",
    "pyarrow",
    "huggingface_hub",
    "PIL",
    "yaml",
    "cookiecutter",
    "fsspec",
    "numpy",
    "shardkit.card",
    "shardkit.push",
    "shardkit.pack",
    "shardkit.remux",
    "shardkit.verify",
    "shardkit.head",
    "shardkit.streaming",
    "shardkit.location",
    "shardkit.manifest",
)


@pytest.mark.parametrize("command", [["shardkit", "--help"], ["pack-shards", "--help"], ["shardkit", "pack", "--help"]])
def test_help_loads_no_stage_and_no_heavy_library(command: list[str]) -> None:
    """`--help` shows the options (their choices and defaults) from the small modules that hold
    them: click, the format names, the default cap, push's defaults, the template's path."""
    program, *args = command
    code = textwrap.dedent(
        f"""
        import json, sys
        from shardkit import cli
        try:
            (cli.pack_shards if {program!r} == "pack-shards" else cli.main)({args!r}, prog_name={program!r})
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        print(json.dumps(sorted(sys.modules)))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    help_text, _, loaded_line = result.stdout.rstrip("\n").rpartition("\n")
    assert help_text.startswith(f"Usage: {' '.join(command[:-1])} [OPTIONS]")
    loaded = set(json.loads(loaded_line))
    assert "click" in loaded and "shardkit.cli" in loaded
    assert sorted(loaded & set(HEAVY_MODULES)) == []

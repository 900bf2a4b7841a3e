"""Command lines from the typed configs, with tyro.

Every field of a command's dataclass (and of the configs nested in it) is an option: its attribute
docstring is the help, enum and ``Literal`` fields list their choices, and nested configs are
groups (``--ppo.lr``, ``--env-runner-group.num-env-runners``). Fields a command line cannot give
(an env creator, a module class, connector objects, free-form dicts) are left out of the command
line; the library API sets them.

``--config FILE`` (TOML) gives options from a file, in the same nested form as the run directory's
``config.toml``; flags after it override it. Parsing errors come as one line naming the flag, what
is allowed and what came (``UsageError``), never tyro's boxed messages or a traceback; an unknown
flag or config key comes with the closest known ones (``ray_sampler.suggest``).

``--help`` of a command with many options (``train``, ``train-dqn``) lists those most runs need
(``BRIEF``) and says that ``--help-all`` lists every one. A default the field's docstring already
states is not printed again, and a boolean field named ``no_x`` is the pair ``--x`` / ``--no-x``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import gymnasium as gym
import tyro
from tyro.constructors import ConstructorRegistry, StructConstructorSpec, StructTypeInfo

from ray_sampler.envs.minigrid import ensure_registered
from ray_sampler.errors import ConfigError
from ray_sampler.suggest import did_you_mean

__all__ = [
    "BRIEF",
    "HELP_ALL",
    "UsageError",
    "bool_flag",
    "changed_options",
    "check_env_id",
    "config_file_flags",
    "flag_of",
    "known_flags",
    "parse",
    "read_toml",
    "to_toml_dict",
]

T = TypeVar("T")


class UsageError(ConfigError):
    """A command line or config file the command cannot run: the message is one line naming the flag."""


ALIASES = {
    ("EnvRunnerGroupConfig", "num_env_runners"): "--num-env-runners",
    ("EnvRunnerGroupConfig", "num_cpus_per_env_runner"): "--num-cpus-per-env-runner",
    ("EnvRunnerConfig", "num_envs_per_env_runner"): "--num-envs-per-env-runner",
    ("EnvRunnerConfig", "rollout_fragment_length"): "--rollout-fragment-length",
    ("PPOConfig", "lr"): "--lr",
    ("DQNConfig", "lr"): "--lr",
    ("EvaluationConfig", "evaluation_interval"): "--evaluation-interval",
    ("EvaluationConfig", "evaluation_duration"): "--evaluation-duration",
    ("EvaluationConfig", "evaluation_duration_unit"): "--evaluation-duration-unit",
    ("EvaluationConfig", "evaluation_num_env_runners"): "--evaluation-num-env-runners",
    ("EvaluationConfig", "evaluation_opponent"): "--evaluation-opponent",
}
"""Short names of the options set most often, beside their full ones (``--num-env-runners`` for
``--env-runner-group.num-env-runners``)."""

BRIEF = frozenset(
    {
        ("EnvOptions", "env"),
        ("EnvOptions", "env_config"),
        ("RunOptions", "config"),
        ("RunOptions", "address"),
        ("RunOptions", "seed"),
        ("RunOptions", "hidden_sizes"),
        ("RunOptions", "runs_dir"),
        ("RunOptions", "tensorboard"),
        ("RunOptions", "checkpoint_every"),
        ("RunOptions", "resume"),
        ("PPOTrainingConfig", "max_iterations"),
        ("PPOTrainingConfig", "max_env_steps"),
        ("PPOTrainingConfig", "target_return"),
        ("PPOTrainingConfig", "framework"),
        ("PPOTrainingConfig", "optimizer"),
        ("DQNTrainingConfig", "max_env_steps"),
        ("DQNTrainingConfig", "target_return"),
        ("DQNTrainingConfig", "framework"),
        ("EnvRunnerGroupConfig", "num_env_runners"),
        ("EnvRunnerConfig", "num_envs_per_env_runner"),
        ("PPOConfig", "lr"),
        ("DQNConfig", "lr"),
        ("EvaluationConfig", "evaluation_interval"),
    }
)
"""(class, field) of the options a command's plain ``--help`` lists, those most runs need, when it
has more than ``BRIEF_ABOVE`` options; ``--help-all`` lists every one."""
BRIEF_ABOVE = 25
HELP_ALL = "--help-all"

_GUARD: set[type] = set()  # the rule asks tyro's own dataclass rule for a type once, without itself
_DEFAULT_STATED = re.compile(r"\bdefault\)?:|\(default\)")
"""A docstring that says its field's default itself (``(default: RAY_ADDRESS if set ...)``,
``None (default): 1``): tyro's own ``(default: ...)`` would say it twice."""


def _cli_type(annotation: Any) -> Any:
    """The type a field takes on the command line; None: it takes none (left out)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is type or origin is Callable:
        return None
    if origin in (typing.Union, types.UnionType):
        if any(a is type or typing.get_origin(a) is Callable for a in args):
            return None  # e.g. env: str | Callable (a creator): the command's own --env gives the id
        if any(dataclasses.is_dataclass(a) for a in args):
            return None  # an optional part (env_runner.external): the command's own options set it
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        if enums and str in args:  # Enum | str: the values are the choices
            rest = tuple(a for a in args if a is not str and a not in enums)
            choices = Literal[tuple(m.value for e in enums for m in e)]  # type: ignore[valid-type]
            return typing.Union[choices, *rest] if rest else choices
        if str in args and float in args:  # target_return: a number, "auto" or None
            return typing.Union[float, Literal["auto"], *(a for a in args if a not in (str, float))]
        return annotation
    if (origin is dict and args[1:] == (Any,)) or (origin is tuple and Any in args):
        return None  # free-form values, or objects (connector pieces)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return Literal[tuple(m.value for m in annotation)]
    return annotation


def _help(text: str | None) -> str | None:
    """A docstring as one paragraph of plain text (no reST backquotes, no hard line breaks)."""
    if text is None:
        return None
    return re.sub(r"\s+", " ", text.replace("``", "")).strip()


def _is_brief(cls: type, name: str) -> bool:
    """Whether the plain ``--help`` lists field ``name`` of ``cls`` (declared there or in a base)."""
    return any((c.__name__, name) in BRIEF for c in cls.__mro__)


def _negated(field_type: Any, name: str, default: Any) -> bool:
    """Whether a field is a boolean named ``no_x`` (its flags: ``--x`` / ``--no-x``, not ``--no-no-x``)."""
    return field_type is bool and name.startswith("no_") and isinstance(default, bool)


def _project_dataclasses(info: StructTypeInfo, *, brief: bool) -> StructConstructorSpec | None:
    cls = info.type
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type) or cls in _GUARD:
        return None
    if cls.__module__.split(".")[0] not in ("ray_sampler", "learner", "replay", "connectors"):
        return None
    _GUARD.add(cls)
    try:
        spec = ConstructorRegistry.get_struct_spec(info)
    finally:
        _GUARD.discard(cls)
    if not isinstance(spec, StructConstructorSpec):
        return None
    fields, negated = [], set()
    for field in spec.fields:
        cli_type = _cli_type(field.type)
        helptext = _help(field.helptext() if callable(field.helptext) else field.helptext)
        alias = ALIASES.get((cls.__name__, field.name))
        # An enum default shows (and round-trips) as its value: "numpy", not Framework.NUMPY.
        default = field.default.value if isinstance(field.default, enum.Enum) else field.default
        bare = typing.get_args(cli_type)[0] if typing.get_origin(cli_type) is Annotated else cli_type
        is_nested = isinstance(bare, type) and dataclasses.is_dataclass(bare)
        if cli_type is None or (brief and not is_nested and not _is_brief(cls, field.name)):
            suppressed: Any = Annotated[field.type, tyro.conf.Suppress]
            fields.append(dataclasses.replace(field, type=suppressed))
            continue
        # tyro's "(default: ...)" unless the docstring says the default itself.
        name, hint = field.name, "" if helptext and _DEFAULT_STATED.search(helptext) else None
        if _negated(cli_type, field.name, default):  # no_x: the command line's x, its value flipped
            name, default = field.name.removeprefix("no_"), not default
            negated.add(name)
            shown = name.replace("_", "-")
            helptext = f"no-{shown}: {helptext}" if helptext else None
            hint = f"(default: {shown if default else 'no-' + shown})"
        if alias or hint is not None:
            cli_type = Annotated[cli_type, tyro.conf.arg(aliases=(alias,) if alias else None, help_behavior_hint=hint)]
        if brief and is_nested:
            helptext = None  # the group's title is enough beside its few options
        fields.append(dataclasses.replace(field, name=name, type=cli_type, helptext=helptext, default=default))
    return StructConstructorSpec(instantiate=_instantiate(cls, spec.instantiate, negated), fields=tuple(fields))


def _registry(*, brief: bool) -> ConstructorRegistry:
    registry = ConstructorRegistry()
    registry.struct_rule(lambda info: _project_dataclasses(info, brief=brief))
    return registry


_REGISTRY = _registry(brief=False)
_BRIEF_REGISTRY = _registry(brief=True)
"""The command line of every option, and that of the options a plain ``--help`` lists (``BRIEF``)."""


def _instantiate(cls: type, instantiate: Callable[..., Any], negated: set[str]) -> Callable[..., Any]:
    """``instantiate``, with enum fields given back their enum values (the command line gives the
    values as strings) and the ``no_x`` fields (``negated``: their ``x``) their own value back."""
    hints = typing.get_type_hints(cls)

    def build(**kwargs: Any) -> Any:
        for name in negated & set(kwargs):
            kwargs["no_" + name] = not kwargs.pop(name)
        for name, value in kwargs.items():
            hint = hints.get(name)
            if isinstance(hint, type) and issubclass(hint, enum.Enum) and isinstance(value, str):
                kwargs[name] = hint(value)
        return instantiate(**kwargs)

    return build


def flag_of(path: str) -> str:
    """The option of a dotted field path: ``env_runner_group.num_env_runners`` ->
    ``--env-runner-group.num-env-runners``."""
    return "--" + ".".join(part.replace("_", "-") if not part.endswith("_") else part for part in path.split("."))


def _flag_message(message: str, group: str = "") -> str:
    """A ConfigError message with its leading ``'field'`` written as the flag."""
    match = re.match(r"'([\w.]+)'(.*)", message, flags=re.S)
    if not match:
        return message
    path = f"{group}.{match[1]}" if group else match[1]
    return f"{flag_of(path)}{match[2]}"


_SPELLINGS = r"--[\w.-]+(?:/--[\w.-]+)*"
"""An option as tyro names it in an error: its spellings joined by ``/`` (``--lr/--ppo.lr``)."""


def _options(cls: type, hidden: tuple[str, ...]) -> Iterator[tuple[str, Any, type, str]]:
    """(dotted path, type, config class, field name) of each option of command ``cls`` (``hidden``:
    the names of nested configs whose fields are at the top, as ``_one_line``'s)."""

    def walk(config: type, prefix: tuple[str, ...]) -> Iterator[tuple[str, Any, type, str]]:
        hints = typing.get_type_hints(config)
        for field in dataclasses.fields(config):
            path = prefix if field.name in hidden else (*prefix, field.name)
            hint = hints.get(field.name)
            if isinstance(hint, type) and dataclasses.is_dataclass(hint):
                yield from walk(hint, path)
            elif _cli_type(hint) is not None:
                yield ".".join(path), hint, config, field.name

    yield from walk(cls, ())


def _alias_flags(cls: type, hidden: tuple[str, ...]) -> dict[str, str]:
    """Full flag -> short alias (``--ppo.lr`` -> ``--lr``) of the options of command ``cls`` that have one."""
    return {
        flag_of(path): alias
        for path, _, config, name in _options(cls, hidden)
        if (alias := ALIASES.get((config.__name__, name)))
    }


def bool_flag(path: str, value: bool) -> str:
    """The flag that sets the boolean option at the dotted ``path`` to ``value``: ``--plain`` /
    ``--no-plain``; a field named ``no_x`` has ``--x`` / ``--no-x``.

    >>> bool_flag("env_runner.no_done_at_end", False)
    '--env-runner.done-at-end'
    """
    head, _, name = flag_of(path)[2:].rpartition(".")
    if name.startswith("no-"):
        name, value = name.removeprefix("no-"), not value
    return f"--{head + '.' if head else ''}{'' if value else 'no-'}{name}"


def known_flags(cls: type, *, hidden: tuple[str, ...] = ("training",)) -> list[str]:
    """Every flag of command ``cls``: each option's full name and short alias, both forms of a boolean."""
    flags = ["--help", HELP_ALL]
    for path, hint, config, name in _options(cls, (*hidden, cls.__name__)):
        alias = ALIASES.get((config.__name__, name))
        if hint is bool:
            flags += [bool_flag(path, True), bool_flag(path, False)]
        else:
            flags += [flag_of(path), *([alias] if alias else [])]
    return flags


def _unknown_flag(cls: type, args: list[str], hidden: tuple[str, ...], see: str) -> str | None:
    """The message for the first flag in ``args`` that is no option of ``cls``, with the closest
    known ones; None if every flag is known (a stray value instead)."""
    known = known_flags(cls, hidden=hidden)
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag not in known:
            hint = did_you_mean(flag, known)
            return f"{flag!r} is no option of this command{'; ' + hint if hint else ''} ({see})"
    return None


def _see_help(cls: type, hidden: tuple[str, ...]) -> str:
    """Where the user finds every option of ``cls``: ``see --help``, or ``--help-all`` for a command
    whose ``--help`` lists only some."""
    return f"see {HELP_ALL}" if _has_brief_help(cls, hidden) else "see --help"


def _has_brief_help(cls: type, hidden: tuple[str, ...]) -> bool:
    return sum(1 for _ in _options(cls, hidden)) > BRIEF_ABOVE


def _as_typed(message: str, args: list[str], aliases: dict[str, str]) -> str:
    """``message`` with its leading option (one spelling or tyro's ``--a/--b``) written as the user
    typed it last in ``args``: ``--lr`` if they typed ``--lr``, ``--ppo.lr`` if they typed that (the
    full name if neither, e.g. a value the config's own default broke)."""
    match = re.match(_SPELLINGS, message)
    if not match:
        return message
    spellings = match[0].split("/")
    full = next((s for s in spellings if s in aliases), spellings[0])
    candidates = [full, *(a for a in [aliases.get(full)] if a), *spellings]
    typed = [i for i, arg in enumerate(args) for s in candidates if arg == s or arg.startswith(s + "=")]
    chosen = args[max(typed)].split("=", 1)[0] if typed else full
    return chosen + message[match.end() :]


def _one_line(box: str, hidden: tuple[str, ...] = ()) -> str:
    """The message inside tyro's boxed error, on one line, with the flag named as the user writes it
    (``hidden``: group names that are no part of a flag, such as a nameless nested config's)."""
    lines: list[str] = []
    for line in box.strip().splitlines()[1:]:  # the first is the title (in the box's top border or not)
        inner = line.strip().strip("│╭╮╰╯").strip()
        if inner and set(inner) <= set("─-"):  # a rule: the message ends at the first one after it
            if lines:
                break
            continue
        if line.lstrip().startswith("╰"):
            break
        if inner:
            lines.append(inner)
    text = " ".join(lines) or box.strip() or "invalid arguments"
    nested = re.match(r"Error parsing ([\w.-]+): (.*)", text, flags=re.S)
    if nested and not nested[1].startswith("--"):  # a nested config's check, e.g. ppo: 'lr' must be ...
        group = ".".join(part for part in nested[1].replace("-", "_").split(".") if part not in hidden)
        return _flag_message(nested[2], group)
    # tyro names an option with aliases by all its spellings (--lr/--ppo.lr): _as_typed picks one.
    text = re.sub(rf"^Error parsing ({_SPELLINGS}): ", r"\1: ", text)
    text = re.sub(rf"^Missing value for argument '({_SPELLINGS})'.*", r"\1: a value is needed (got none)", text)
    choice = re.match(rf"invalid choice '(.*)' for argument '({_SPELLINGS})'\. Expected one of \((.*)\)\.?$", text)
    if choice:  # a Literal | None's choices come from a set: None goes last, for the same line every time
        choices = ", ".join(sorted(choice[3].split(", "), key=lambda c: c == "'None'"))
        return f"{choice[2]}: one of {choices} allowed (got '{choice[1]}')"
    union = re.match(rf"({_SPELLINGS}): no type matching (\S+) could be instantiated from \[(.*?)\]", text)
    if union:
        return f"{union[1]}: {union[2].replace('|', ' or ')} allowed (got {union[3]})"
    return text.replace("Unrecognized options: ", "unrecognized option(s): ")


@contextlib.contextmanager
def _captured_stderr() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer):
        yield buffer


def parse(cls: type[T], args: list[str], *, default: T | None = None, prog: str, description: str) -> T:
    """An instance of the command dataclass ``cls`` from ``args`` (``--help`` and ``--help-all`` print
    the help and exit 0). Raises UsageError with one line for any bad option or value."""
    description = _help(description) or ""
    # None is written None on tyro's command line; none and null read the same here.
    args = [a if a.lower() not in ("none", "null") else "None" for a in args]
    hidden = ("training", cls.__name__)
    if any(a in ("-h", "--help", HELP_ALL) for a in args):
        _print_help(cls, args, default=default, prog=prog, description=description, hidden=hidden)
    with _captured_stderr() as err:
        try:
            command = tyro.cli(
                cls,
                args=args,
                default=default,
                prog=prog,
                description=description,
                registry=_REGISTRY,
                config=(tyro.conf.SuppressFixed,),
            )
            assert command is not None, "tyro builds the dataclass or exits"
            return command
        except SystemExit as e:
            if e.code in (0, None):
                raise
            message = _one_line(err.getvalue(), hidden=hidden)
            if message.startswith("unrecognized option(s): "):
                message = _unknown_flag(cls, args, hidden, _see_help(cls, hidden)) or message
        except ConfigError as e:  # the command's own fields (a nested config's come boxed, above)
            message = _flag_message(str(e))
    raise UsageError(_as_typed(message, args, _alias_flags(cls, hidden))) from None


def _print_help(
    cls: type, args: list[str], *, default: Any, prog: str, description: str, hidden: tuple[str, ...]
) -> typing.NoReturn:
    """Prints the help of ``cls`` and exits 0 (UsageError for a value tyro checks even then, a choice):
    every option with ``--help-all``; with ``--help``, those most runs need (``BRIEF``) where it has many."""
    is_all = HELP_ALL in args
    args = ["--help" if a in ("-h", HELP_ALL) else a for a in args]
    with contextlib.redirect_stdout(io.StringIO()), _captured_stderr() as err:
        try:
            tyro.cli(cls, args=args, default=default, prog=prog, description=description, registry=_REGISTRY)
        except SystemExit as e:
            if e.code not in (0, None):
                message = _one_line(err.getvalue(), hidden=hidden)
                raise UsageError(_as_typed(message, args, _alias_flags(cls, hidden))) from None
    if is_all or not _has_brief_help(cls, hidden):
        tyro.cli(cls, args=["--help"], default=default, prog=prog, description=description, registry=_REGISTRY)
    count = sum(1 for _ in _options(cls, hidden))
    brief = f"{description}\n\nThese are the options most runs need: {HELP_ALL} lists all {count}."
    tyro.cli(cls, args=["--help"], default=default, prog=prog, description=brief, registry=_BRIEF_REGISTRY)
    raise AssertionError("tyro exits after the help")  # pragma: no cover


def to_toml_dict(obj: Any, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The command-line fields of a config dataclass as a nested dict of plain values (enums as
    their values, tuples as lists; None kept), in the form ``config_file_flags`` reads."""
    hints = typing.get_type_hints(type(obj))
    out: dict[str, Any] = {}
    for field in dataclasses.fields(obj):
        if field.name in skip or _cli_type(hints[field.name]) is None:
            continue
        value = getattr(obj, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out[field.name] = to_toml_dict(value)
        elif isinstance(value, enum.Enum):
            out[field.name] = value.value
        elif isinstance(value, Path):
            out[field.name] = str(value)
        elif isinstance(value, tuple):
            out[field.name] = list(value)
        else:
            out[field.name] = value
    return out


def changed_options(before: Any, after: Any, *, final: Any = None) -> list[str]:
    """What ``after`` sets that ``before`` does not, two configs of one dataclass type, as flags
    (``--ppo.lr 0.0003``, ``--env-runner.normalize-actions``); a field no flag gives by its dotted
    path (``env_runner.module_class TorchLSTMModule``), a dict field key by key. With ``final`` (a
    third config of the type), a value ``final`` has otherwise is marked ``(overridden: VALUE)``.

    >>> from learner.learner import PPOConfig
    >>> changed_options(PPOConfig(), PPOConfig(lr=3e-4, standardize_advantages=False), final=PPOConfig(lr=0.01))
    ['--lr 0.0003 (overridden: 0.01)', '--no-standardize-advantages (overridden: True)']
    """
    out: list[str] = []

    def walk(old: Any, new: Any, last: Any, path: tuple[str, ...]) -> None:
        hints = typing.get_type_hints(type(new))
        for field in dataclasses.fields(new):
            a, b, c = (getattr(x, field.name, None) if x is not None else None for x in (old, new, last))
            where = (*path, field.name)
            if dataclasses.is_dataclass(b) and not isinstance(b, type):
                walk(a, b, c, where)
            elif isinstance(a, dict) and isinstance(b, dict):
                for key in [k for k in b if a.get(k, _MISSING) != b[k]]:
                    item = c.get(key, _MISSING) if isinstance(c, dict) else _MISSING
                    out.append(_option(".".join((*where, str(key))), b[key], item, last is not None, is_flag=False))
            elif a != b:
                is_flag = _cli_type(hints[field.name]) is not None
                out.append(_option(".".join(where), b, c, last is not None, is_flag=is_flag))

    walk(before, after, final, ())
    return out


_MISSING = object()


def _option(path: str, value: Any, final: Any, has_final: bool, *, is_flag: bool) -> str:
    """One entry of ``changed_options``."""
    if not is_flag:
        text = f"{path} {_shown(value)}"
    elif isinstance(value, bool):
        text = bool_flag(path, value)
    else:
        text = f"{flag_of(path)} {_shown(value)}"
    if has_final and final != value:
        text += f" (overridden: {_shown(final) if final is not _MISSING else 'unset'})"
    return text


def _shown(value: Any) -> str:
    """A value as the command line writes it: ``0.0003``, ``mean_std``, ``64 64``, ``TorchLSTMModule``."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple | list):
        return " ".join(map(_shown, value))
    return str(value)


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML config file's tables (``--config``; a run directory's config.toml lists its None
    values under ``none``): UsageError naming the file if it cannot be read."""
    from ray_sampler.cli.run_dir import load_config

    if path.suffix.lower() != ".toml":
        raise UsageError(f"--config: a .toml file is allowed (got {str(path)!r})")
    try:
        return load_config(path)
    except (OSError, ConfigError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UsageError(f"--config: cannot read {str(path)!r} ({reason})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"--config: {str(path)!r} is not valid TOML ({e})") from None


def _fields(cls: type, flatten: tuple[str, ...]) -> dict[str, Any]:
    """Field name -> type of a command dataclass, the fields of those named in ``flatten`` in its place."""
    out: dict[str, Any] = {}
    for name, hint in typing.get_type_hints(cls).items():
        if name not in {f.name for f in dataclasses.fields(cls)}:
            continue
        if name in flatten:
            out.update(_fields(hint, ()))
        else:
            out[name] = hint
    return out


def config_file_flags(
    data: dict[str, Any],
    cls: type,
    *,
    flatten: tuple[str, ...] = ("training",),
    source: str = "--config",
    see: str = "",
) -> list[str]:
    """The flags that a config file's tables give to command ``cls``, in the nested form of
    ``to_toml_dict`` (a table per nested config; the fields of the configs named in ``flatten`` at
    the top). None, or the string ``"none"`` (TOML has no null), stands for None. UsageError, its
    message starting with ``source``, for a key that is no option, with the closest option keys
    and where every option is listed (``see``; default: the command's own help)."""
    flags: list[str] = []
    leaves = [path for path, *_ in _options(cls, (*flatten, cls.__name__))]
    every = [*leaves, *dict.fromkeys(p.rsplit(".", 1)[0] for p in leaves if "." in p)]  # and the tables
    see = see or _see_help(cls, (*flatten, cls.__name__))

    def add(table: dict[str, Any], fields: dict[str, Any], prefix: str) -> None:
        for key, value in table.items():
            path = f"{prefix}.{key}" if prefix else key
            if key not in fields or _cli_type(fields[key]) is None:
                hint = did_you_mean(path, every)
                raise UsageError(
                    f"{source}: {path!r} is no option of this command{'; ' + hint if hint else ''} ({see})"
                )
            hint, flag = fields[key], flag_of(path)
            if dataclasses.is_dataclass(hint):
                if not isinstance(value, dict):
                    raise UsageError(f"{source}: {path!r} must be a table of options (got {value!r})")
                add(value, _fields(typing.cast(type, hint), ()), path)
            elif isinstance(value, bool):
                flags.append(bool_flag(path, value))
            elif isinstance(value, dict):  # a dict option: KEY VALUE pairs
                flags.extend([flag, *(str(x) for kv in value.items() for x in kv)])
            elif isinstance(value, list):
                flags.extend([flag, *(str(v) for v in value)])
            elif value is None or (isinstance(value, str) and value.lower() == "none"):
                flags.extend([flag, "None"])
            else:
                flags.extend([flag, str(value)])

    add(data, _fields(cls, flatten), "")
    return flags


def check_env_id(env: str) -> str:
    """``env`` if gymnasium has it registered; else UsageError naming the closest ids."""
    ensure_registered(env)
    if env in gym.registry:
        return env
    hint = did_you_mean(env, gym.registry) or "see gymnasium.pprint_registry()"
    raise UsageError(f"--env: a registered gymnasium id is allowed (got {env!r}; {hint})")

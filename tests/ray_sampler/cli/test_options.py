"""``ray_sampler.cli.options``: the short ``--help`` and ``--help-all``, each default printed once,
boolean flag pairs, and "did you mean" for unknown flags and config keys."""

from __future__ import annotations

import re

import pytest

from learner.learner import PPOConfig
from ray_sampler.cli import COMMANDS, main
from ray_sampler.cli.jobs import SampleJobConfig
from ray_sampler.cli.options import (
    UsageError,
    bool_flag,
    changed_options,
    check_env_id,
    config_file_flags,
    known_flags,
    parse,
)
from ray_sampler.cli.train import TrainDQN, TrainPPO
from ray_sampler.sampling.config import EnvRunnerConfig

TRAIN_BRIEF = [
    "--env", "--env-config", "--config", "--address", "--seed", "--hidden-sizes", "--runs-dir", "--tensorboard",
    "--checkpoint-every", "--resume", "--framework", "--max-iterations", "--max-env-steps", "--target-return",
    "--optimizer", "--num-envs-per-env-runner", "--num-env-runners", "--lr", "--evaluation-interval",
]  # fmt: skip


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def _entries(text: str) -> list[str]:
    """Each option's entry of a help text (its flags, then its doc) on one line, in tyro's boxed or
    plain layout: an entry starts on a line that starts with a flag (unless the line before ended with
    a comma: a pair of flags wrapped), takes the wrapped rest of its metavar and the further indented
    lines after it (its doc), and ends at any other line (a group's title, a rule, a border)."""
    entries: list[str] = []
    state = "closed"  # or "flags" (on the entry's first lines) or "doc"
    for raw in text.splitlines():
        line = raw.replace("│", " ").rstrip()
        indent, words = len(line) - len(line.lstrip()), line.strip()
        is_flag = words.startswith("-") and not set(words) <= set("-") and indent <= 2
        if is_flag and state == "flags" and entries[-1].endswith(","):
            entries[-1] += " " + words
        elif is_flag:
            entries.append(words)
            state = "flags"
        elif state == "flags" and indent <= 2 and words and not re.search(r"[a-z]", words):
            entries[-1] += " " + words  # a metavar's wrapped end: FLOAT, STRICT_SPREAD}
        elif state != "closed" and words and indent > 2:
            entries[-1] += " " + words
            state = "doc"
        else:
            state = "closed"
    return entries


def _listed(text: str) -> list[str]:
    """The first flag of each option a help text lists (``--help`` itself left out)."""
    firsts = [entry.split()[0].rstrip(",") for entry in _entries(text)]
    return [flag for flag in firsts if flag not in ("-h", "--help")]


class TestHelp:
    def test_train_help_lists_the_options_most_runs_need(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert _listed(_help(capsys, "train", "--help")) == TRAIN_BRIEF

    def test_train_help_says_help_all_lists_every_option(self, capsys: pytest.CaptureFixture[str]) -> None:
        text = " ".join(_help(capsys, "train", "--help").split())
        count = len(_listed(_help(capsys, "train", "--help-all")))
        assert f"These are the options most runs need: --help-all lists all {count}." in text

    def test_train_dqn_help_is_short_too(self, capsys: pytest.CaptureFixture[str]) -> None:
        listed = _listed(_help(capsys, "train-dqn", "--help"))
        assert listed == [f for f in TRAIN_BRIEF if f not in ("--max-iterations", "--optimizer")]

    def test_help_all_lists_every_flag_of_the_command(self, capsys: pytest.CaptureFixture[str]) -> None:
        text = _help(capsys, "train", "--help-all")
        shown = {flag for entry in _entries(text) for flag in re.findall(r"(?<![\w-])--[a-z][\w.-]*", entry[:160])}
        assert set(known_flags(TrainPPO)) - {"--help-all"} <= shown

    def test_a_command_with_few_options_lists_them_all_on_help(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert _help(capsys, "sample", "--help") == _help(capsys, "sample", "--help-all")

    @pytest.mark.parametrize("command", list(COMMANDS))
    def test_each_default_is_printed_once(self, command: str, capsys: pytest.CaptureFixture[str]) -> None:
        entries = _entries(_help(capsys, command, "--help-all"))
        assert [e for e in entries if len(re.findall(r"\bdefault\)?:|\(default\)", e)) > 1] == []

    def test_a_bad_choice_with_help_is_one_line(self) -> None:
        with pytest.raises(
            UsageError, match=r"^--optimizer: one of 'sync_samples', 'async_samples', 'async_gradients' "
        ):
            parse(TrainPPO, ["--optimizer", "async", "--help"], prog="t", description="")


class TestBooleanNamedNo:
    def test_help_all_shows_the_pair_without_a_double_negative(self, capsys: pytest.CaptureFixture[str]) -> None:
        text = _help(capsys, "train", "--help-all")
        assert "--env-runner.done-at-end, --env-runner.no-done-at-end" in text and "no-no-" not in text

    def test_the_no_form_sets_it(self) -> None:
        command = parse(TrainPPO, ["--env-runner.no-done-at-end"], prog="t", description="")
        assert command.training.env_runner.no_done_at_end is True

    def test_the_plain_form_clears_it(self) -> None:
        args = ["--env-runner.no-done-at-end", "--env-runner.done-at-end"]
        assert parse(TrainPPO, args, prog="t", description="").training.env_runner.no_done_at_end is False

    def test_a_config_file_value_becomes_its_flag(self) -> None:
        data = {"env_runner": {"no_done_at_end": False, "soft_horizon": False}}
        assert config_file_flags(data, TrainPPO) == ["--env-runner.done-at-end", "--env-runner.no-soft-horizon"]

    def test_bool_flag_of_a_plain_boolean(self) -> None:
        assert [bool_flag("ppo.vtrace", True), bool_flag("plain", False)] == ["--ppo.vtrace", "--no-plain"]

    def test_changed_options_name_it_by_its_flag(self) -> None:
        before = EnvRunnerConfig(env="CartPole-v1")
        after = EnvRunnerConfig(env="CartPole-v1", no_done_at_end=True)
        assert changed_options(before, after) == ["--no-done-at-end"]


class TestDidYouMean:
    def test_an_unknown_flag_gets_the_closest(self) -> None:
        message = "'--max-iteration' is no option of this command; did you mean '--max-iterations'? (see --help-all)"
        with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
            parse(TrainPPO, ["--max-iteration", "3"], prog="t", description="")

    def test_an_unknown_nested_flag_gets_the_closest(self) -> None:
        message = (
            "'--ppo.entropy-coef' is no option of this command; did you mean '--ppo.entropy-coeff'? (see --help-all)"
        )
        with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
            parse(TrainPPO, ["--ppo.entropy-coef=0.1"], prog="t", description="")

    def test_an_unknown_flag_with_nothing_close(self) -> None:
        with pytest.raises(UsageError, match=r"^'--zzz' is no option of this command \(see --help-all\)$"):
            parse(TrainDQN, ["--zzz"], prog="t", description="")

    def test_a_command_whose_help_lists_everything_points_to_help(self) -> None:
        message = "'--iteration' is no option of this command; did you mean '--iterations'? (see --help)"
        with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
            parse(SampleJobConfig, ["--iteration", "2"], prog="t", description="")

    def test_an_unknown_config_key_gets_the_closest(self) -> None:
        message = (
            "--config: 'max_iteration' is no option of this command; did you mean 'max_iterations'? (see --help-all)"
        )
        with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
            config_file_flags({"max_iteration": 3}, TrainPPO)

    def test_an_unknown_nested_config_key_gets_the_closest(self) -> None:
        message = "'ppo.entropy_coef' is no option of this command; did you mean 'ppo.entropy_coeff'?"
        with pytest.raises(UsageError, match=re.escape(message)):
            config_file_flags({"ppo": {"entropy_coef": 0.01}}, TrainPPO)

    def test_a_key_outside_its_table_gets_its_full_path(self) -> None:
        with pytest.raises(
            UsageError,
            match=re.escape("'entropy_coeff' is no option of this command; did you mean 'ppo.entropy_coeff'?"),
        ):
            config_file_flags({"entropy_coeff": 0.01}, TrainPPO)

    def test_a_misspelt_table_gets_the_closest(self) -> None:
        with pytest.raises(
            UsageError, match=re.escape("'replays' is no option of this command; did you mean 'replay'?")
        ):
            config_file_flags({"replays": {"capacity_env_steps": 10}}, TrainDQN)

    def test_the_caller_names_the_source_and_where_options_are_listed(self) -> None:
        message = "trial config: 'ppo.lrr' is no option of this command; did you mean 'ppo.lr'? (see elsewhere)"
        with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
            config_file_flags({"ppo": {"lrr": 0.1}}, TrainPPO, source="trial config", see="see elsewhere")

    def test_an_unknown_gymnasium_id_gets_the_closest(self) -> None:
        message = (
            "--env: a registered gymnasium id is allowed (got 'CartPol-v1'; did you mean 'CartPole-v1' or "
            "'CartPole-v0'?)"
        )
        with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
            check_env_id("CartPol-v1")


def test_changed_options_of_a_plain_boolean_are_unchanged() -> None:
    assert changed_options(PPOConfig(), PPOConfig(vtrace=True)) == ["--vtrace"]

"""``jupyter suspend`` itself: a real subprocess, usage errors exit 2 and say what is wrong."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_suspend.cli.app", *args], capture_output=True, text=True, timeout=60
    )


def test_the_jupyter_subcommand_is_installed() -> None:
    done = subprocess.run(["jupyter", "--paths"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    listed = subprocess.run(["jupyter", "suspend", "--help"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    for command in ("status", "resume", "snapshots", "release-check", "report", "simulate"):
        assert command in listed.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "a command is needed"),
        (("bogus",), "unknown command 'bogus'"),
        (("--no-such-flag",), "--no-such-flag"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args: tuple[str, ...], said: str) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert said in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (("resume", "nb"), "--timeout"),
        (("resume", "nb"), "--poll-interval"),
        (("snapshots", "prune", "nb"), "--wait-timeout"),
    ],
)
def test_item10_a_value_of_the_wrong_type_is_a_usage_error_not_bad_config(
    command: tuple[str, ...], option: str
) -> None:
    done = run(*command, f"{option}=soon")
    assert done.returncode == 2, done.stderr
    assert f"{option}: expected a float, not the str 'soon'" in done.stderr
    assert "CRITICAL" not in done.stderr
    assert "Bad config" not in done.stderr

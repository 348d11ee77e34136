"""The commands examples/README.md tells a user to run, read from its table: the tests run these,
so the README cannot name a file that does not ship or a site that does not answer."""

from __future__ import annotations

import re
import shlex

from _programs import EXAMPLES

README = EXAMPLES / "README.md"
#: A row of the table: | [program.py](program.py) | what it shows | `command` ... |
ROW = re.compile(r"^\| \[(?P<program>[\w.]+)\]\([\w.]+\) \|.*\| (?P<run>[^|]+) \|$")


def readme_commands() -> dict[str, list[str]]:
    """Each program's command in the README's "run it" column, split as a shell would (an
    environment assignment in front of it stays its first word)."""
    commands = {}
    for line in README.read_text().splitlines():
        row = ROW.match(line)
        if row:
            spans = re.findall(r"`([^`]+)`", row["run"])
            assert len(spans) == 1, f"one command per program in {README.name}: {line}"
            commands[row["program"]] = shlex.split(spans[0])
    return commands


def program_args(command: list[str], program: str) -> list[str]:
    """The arguments after ``python examples/<program>`` (the README's commands run from a clone's root)."""
    start = command.index("python")
    assert command[start + 1] == f"examples/{program}", command
    return command[start + 2 :]


def without_option(args: list[str], option: str) -> tuple[list[str], str]:
    """``args`` without ``option`` and its value; and that value."""
    at = args.index(option)
    return args[:at] + args[at + 2 :], args[at + 1]

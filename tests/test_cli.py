"""The `gateway` command as a user reads it: every subcommand and flag says what it is in one line,
`gateway bench --help` shows its defaults, and the benchmark's progress and table read well."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from collections.abc import Iterator

from gateway.bench.common import CLEAR_LINE, Progress, Row, print_table
from gateway.cli import build_parser


def commands(parser: argparse.ArgumentParser, path: str = "gateway") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the tree, by the command line that reaches it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, f"{path} {name}")


def test_every_subcommand_flag_and_argument_has_a_one_line_help():
    missing = []
    for path, parser in commands(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if not (choice.help or "").strip() or "\n" in choice.help:
                        missing.append(f"{path} {choice.dest}")
                continue
            if not (action.help or "").strip() or "\n" in action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_bench_help_shows_the_defaults():
    env = {**os.environ, "COLUMNS": "200"}
    shown = subprocess.run([sys.executable, "-m", "gateway", "bench", "--help"], capture_output=True, text=True,
                           env=env, check=True).stdout
    for default in ("time per measurement (default: 5.0)", "message sizes in bytes (default: 100,1024)",
                    "over the same Redis (default: 1)", "records for --spark (default: 500000)",
                    "--key-shared (default: 20000)"):
        assert default in shown


def test_the_table_is_aligned_whatever_the_names(capsys):
    rows = [Row("raw redis: pipelined XADD/record", 100, 123456.0),
            Row("spark stream: source -> sink (local[2])", 1024, 98765.4, "XRANGE/blob", 123456.0, cpu="gw 1.0s"),
            Row("native e2e latency at 2,000/s", 100, 2000.0, p50_ms=1.5, p99_ms=12.25)]
    print_table(rows)
    head, rule, *lines = capsys.readouterr().out.splitlines()
    assert len(rule) == len(head)
    right = head.index("records/s") + len("records/s")
    left = head.index("vs baseline")
    table = [line for line in lines if "cpu:" not in line]
    for line in table:  # the figures end under the end of their header
        assert line[right - 1].isdigit() and line[right:right + 1] in ("", " "), line
    assert table[1][left:] == "0.80x of XRANGE/blob"
    assert lines[2].strip() == "cpu: gw 1.0s"


def test_progress_off_a_terminal_is_a_plain_line_per_row():
    out = io.StringIO()
    with Progress(5.0, out):
        Row("native produce", 100, 1.0)
        Row("kafka txns/s, 1 partition(s)", 100, 1.0)
    lines = out.getvalue().splitlines()
    assert [line.rsplit(" in ", 1)[0] for line in lines] == [
        "measured native produce, 100 B", "measured kafka txns/s, 1 partition(s), 100 B"]
    assert "\r" not in out.getvalue()


def test_progress_on_a_terminal_draws_a_bar_it_clears_for_each_row():
    master, slave = os.openpty()
    with open(slave, "w") as terminal, open(master, "rb", buffering=0) as screen:
        progress = Progress(4.0, terminal)
        assert progress.tty
        assert progress.bar(1.0).startswith("[" + "#" * 6 + "-" * 18 + "]")
        assert "###" in progress.bar(9.0) and "#" * 4 not in progress.bar(9.0)  # over time: a moving block
        with progress:
            Row("native produce", 100, 1.0)
        written = screen.read(4096).decode()
    assert (CLEAR_LINE + "measured native produce, 100 B in ").replace("\n", "\r\n") in written

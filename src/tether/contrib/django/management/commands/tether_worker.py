"""``manage.py tether_worker [OPTIONS]``: see ``tether.contrib.django.command``.

From the command line its arguments go to the click command as given
(``--help`` included). ``call_command("tether_worker", burst=True, ...)`` (or
``call_command("tether_worker", "--burst", ...)``) goes through Django's
parser, which declares the same options, and then to the click command: in a
test, a burst worker drains the due tasks in the test's own process. Run it
from the main thread (the worker installs its SIGTERM/SIGINT handlers)."""

from __future__ import annotations

import os
from argparse import ArgumentParser
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError

from ...command import tether_worker


def _options() -> list[click.Option]:
    return [p for p in tether_worker.params if isinstance(p, click.Option)]


class Command(BaseCommand):
    help = "Run a tether worker for this project's tasks (the options of `tether worker`; see --help)."

    def run_from_argv(self, argv: list[str]) -> None:
        tether_worker.main(args=argv[2:], prog_name=f"{os.path.basename(argv[0])} {argv[1]}")

    def print_help(self, prog_name: str, subcommand: str) -> None:
        tether_worker.main(args=["--help"], prog_name=f"{prog_name} {subcommand}", standalone_mode=False)

    def add_arguments(self, parser: ArgumentParser) -> None:
        """The click command's options (for ``call_command``), each left None
        unless given, so that click applies its own defaults and checks."""
        for p in _options():
            if p.is_flag:
                parser.add_argument(*p.opts, dest=p.name, action="store_const", const=True, default=None)
                if p.secondary_opts:
                    parser.add_argument(*p.secondary_opts, dest=p.name, action="store_const", const=False)
            else:
                parser.add_argument(*p.opts, dest=p.name, action="append" if p.multiple else "store", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        argv: list[str] = []
        for p in _options():
            value = options.get(p.name or "")
            if value is None:
                continue
            if p.is_flag:
                flag = p.opts[0] if value else (p.secondary_opts[0] if p.secondary_opts else "")
                argv += [flag] if flag else []
            else:
                for one in value if isinstance(value, list | tuple) else [value]:
                    argv += [p.opts[0], str(one)]
        try:
            tether_worker.main(args=[*argv, *args], prog_name="tether_worker", standalone_mode=False)
        except click.ClickException as exc:
            raise CommandError(exc.format_message()) from None
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise CommandError(f"tether_worker stopped with exit status {exc.code}") from None

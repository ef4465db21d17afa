"""``manage.py tether_worker [OPTIONS]``: see ``tether.contrib.django.command``.
Its arguments go to the click command as given (``--help`` included)."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...command import tether_worker


class Command(BaseCommand):
    help = "Run a tether worker for this project's tasks (the options of `tether worker`; see --help)."

    def run_from_argv(self, argv: list[str]) -> None:
        tether_worker.main(args=argv[2:], prog_name=f"{os.path.basename(argv[0])} {argv[1]}")

    def print_help(self, prog_name: str, subcommand: str) -> None:
        tether_worker.main(args=["--help"], prog_name=f"{prog_name} {subcommand}", standalone_mode=False)

    def handle(self, *args: Any, **options: Any) -> None:
        raise CommandError("run it from the command line: manage.py tether_worker [OPTIONS]")

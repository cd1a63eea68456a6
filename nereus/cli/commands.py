"""The `nereus` root group, and every command and group of commands under it (each in a module of its own)."""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from ..admin_cli import admin
from ..tokens_cli import tokens
from .common import LOG_LEVELS, set_log_level
from .compaction import compact
from .kafka_users import kafka_user
from .servers import broker, oxia, standalone

# Nereus processes start children with fork+exec only (the compaction worker, child
# brokers); gRPC's fork handlers would just print a line at each start.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


class _Commands(click.Group):
    """The command groups that pull in heavy modules load only when asked for.

    ``nereus lakehouse`` imports the pipeline (pyarrow, the Kafka codec): a second of
    start-up that ``nereus standalone`` or ``nereus admin`` must not pay.
    """

    lazy = {"lakehouse": ("nereus.lakehouse.cli", "lakehouse", "the lakehouse extra")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str):
        if name not in self.lazy:
            return _with_log_level(super().get_command(ctx, name))
        module, attribute, needs = self.lazy[name]
        try:
            return _with_log_level(getattr(importlib.import_module(module), attribute))
        except ImportError as exc:
            raise click.ClickException(f"{needs} is not installed ({exc})") from None


def _with_log_level(command):
    """``command`` (each command of a group) taking ``--log-level`` after its name too."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_log_level(sub)
    elif command is not None and not any(p.name == "sub_log_level" for p in command.params):
        command.params.append(click.Option(
            ["--log-level", "sub_log_level"], default=None, type=LOG_LEVELS, expose_value=False,
            callback=set_log_level, help="Overrides the log level given before the command."))
    return command


@click.group(cls=_Commands)
@click.version_option(package_name="nereus", prog_name="nereus")
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
@click.option("--lifeline-stdin", is_flag=True, hidden=True,
              help="Stop when standard input (a pipe from the parent process) closes: the parent died.")
def main(log_level: str, lifeline_stdin: bool) -> None:
    """Nereus: a Pulsar-native, Kafka-compatible streaming engine on object storage."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if lifeline_stdin:
        from ..lifeline import watch_parent

        watch_parent(sys.stdin.fileno())


for _command in (standalone, broker, oxia, compact, kafka_user, admin, tokens):
    main.add_command(_command)

__all__ = ["main"]

"""What every admin command works with: the REST client and the output mode."""

from __future__ import annotations

from dataclasses import dataclass

import click

from . import output
from .http import AdminClient


@dataclass
class Session:
    client: AdminClient
    as_json: bool = False

    def emit(self, value, view=output.generic) -> None:
        output.emit(value, as_json=self.as_json, view=view)


pass_session = click.make_pass_decorator(Session)


def _json_flag(ctx: click.Context, _param, value: bool) -> None:
    if value:
        ctx.find_object(Session).as_json = True


def json_option(command):
    """``--json`` after the command too (``nereus admin topics stats T --json``)."""
    return click.option("--json", "as_json", is_flag=True, expose_value=False, callback=_json_flag,
                        help="Print the REST answer as JSON.")(command)


class AliasGroup(click.Group):
    """A command group that also answers to short names (``brokers health``), kept out of its help."""

    def __init__(self, *args, aliases: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.aliases = aliases or {}

    def get_command(self, ctx: click.Context, cmd_name: str):
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))


def group(name: str, help_text: str, aliases: dict[str, str] | None = None) -> click.Group:
    """A command group; ``aliases`` maps other names to its commands' names."""
    return AliasGroup(name, help=help_text, aliases=aliases)


__all__ = ["Session", "group", "json_option", "pass_session"]

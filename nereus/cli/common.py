"""What the commands share: the log level options and how a server's coroutine runs."""

from __future__ import annotations

import asyncio
import logging
import signal

import click

def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


def run(coro) -> None:
    # Until the server's loop installs its own stop handlers, SIGTERM stops like a Ctrl-C (no traceback).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        import uvloop
    except ImportError:  # uvloop is pinned, but keep the CLI usable where it cannot build
        asyncio.run(coro)
    else:
        uvloop.run(coro)


LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


def set_log_level(_ctx, _param, value: str | None) -> None:
    if value is not None:
        logging.getLogger().setLevel(value.upper())


def log_level_option(command):
    """``--log-level`` after the subcommand too (``nereus standalone --log-level DEBUG``)."""
    return click.option("--log-level", "sub_log_level", default=None, type=LOG_LEVELS, expose_value=False,
                        callback=set_log_level, help="Overrides the log level given before the command.")(command)


__all__ = ["LOG_LEVELS", "log_level_option", "run", "set_log_level"]

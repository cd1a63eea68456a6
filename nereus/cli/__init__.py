"""The `nereus` command line (``main``): the root group in commands.py, each command or group of
commands in a module of its own."""

from .commands import main

__all__ = ["main"]

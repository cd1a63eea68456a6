"""``python -m nereus.cli``: the `nereus` command."""

from .commands import main

main()

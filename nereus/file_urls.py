"""The path a ``file:`` URL names, as users write them in options and config files.

``file:///abs/path`` and ``file:/abs/path`` are absolute; ``file://secret.key`` and
``file:secret.key`` are taken relative to the working directory (what a user typing a
relative path after ``file://`` means), ``file://localhost/abs`` is ``/abs``.
"""

from __future__ import annotations

from urllib.parse import unquote


def file_url_path(url: str) -> str:
    """The path of a ``file:`` URL; ValueError when it names none."""
    if not url.startswith("file:"):
        raise ValueError(f"{url!r} is not a file: URL")
    rest = url[len("file:"):]
    if rest.startswith("//"):
        rest = rest[2:]
        if rest.startswith("localhost/"):
            rest = rest[len("localhost"):]
    path = unquote(rest.split("?", 1)[0].split("#", 1)[0])
    if not path:
        raise ValueError(f"{url!r} names no file: expected file:///absolute/path or file://relative/path")
    return path


__all__ = ["file_url_path"]

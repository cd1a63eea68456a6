"""Whether the file system under a test's directory takes O_DIRECT writes (``nereus.direct_io``)."""

from __future__ import annotations

import os

from nereus.direct_io import ALIGN, DirectWriter


def refuses_direct(path) -> bool:
    fd = os.open(path, os.O_TMPFILE | os.O_WRONLY)
    try:
        return not DirectWriter().write(fd, [memoryview(b"x" * ALIGN)], ALIGN)
    finally:
        os.close(fd)

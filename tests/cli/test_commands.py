"""The command line's shape: every group listed, heavy ones loaded only when asked for."""

from __future__ import annotations

import subprocess
import sys


def _run(*code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, timeout=120)


def test_the_lakehouse_group_loads_only_when_it_is_asked_for():
    probe = _run(
        "import sys",
        "from click.testing import CliRunner",
        "from nereus.cli import main",
        "result = CliRunner().invoke(main, ['admin', '--help'])",
        "assert result.exit_code == 0, result.output",
        "print(sorted(m for m in sys.modules if m.startswith('nereus.lakehouse')))",
        "result = CliRunner().invoke(main, ['--help'])",
        "assert 'lakehouse' in result.output and 'admin' in result.output, result.output",
        "result = CliRunner().invoke(main, ['lakehouse', 'deliver', '--help'])",
        "assert result.exit_code == 0 and '--topic' in result.output, result.output",
        "print('nereus.lakehouse.cli' in sys.modules)",
    )
    assert probe.returncode == 0, probe.stderr
    before, after = probe.stdout.split("\n")[:2]
    assert before == "[]"  # another command imported none of the pipeline
    assert after == "True"


def test_the_code_passes_the_linter():
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "nereus", "tests", "bench"],
                          capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr

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


def test_every_command_takes_the_log_level_after_its_name_too():
    probe = _run(
        "import click",
        "from nereus.cli import main",
        "ctx = click.Context(main)",
        "def leaves(group, path):",
        "    for name in group.list_commands(ctx):",
        "        command = group.get_command(ctx, name)",
        "        if isinstance(command, click.Group):",
        "            yield from leaves(command, path + [name])",
        "        else:",
        "            yield path + [name], command",
        "found = list(leaves(main, []))",
        "assert len(found) > 50, len(found)",
        "missing = [' '.join(p) for p, c in found if not any('--log-level' in o.opts for o in c.params)]",
        "assert not missing, missing",
    )
    assert probe.returncode == 0, probe.stderr
    # A real invocation: the option after the command is taken, and ERROR keeps the output to the key.
    done = subprocess.run([sys.executable, "-m", "nereus.cli", "tokens", "create-secret-key", "--base64",
                           "--log-level", "ERROR"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and len(done.stdout.strip()) == 44 and done.stderr == "", done.stderr

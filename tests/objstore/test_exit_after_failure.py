"""A process whose S3 requests just failed exits with its own code, not SIGABRT.

obstore delivers each answer from a tokio thread that needs the GIL once more after
handing it to the event loop; if the interpreter is finalizing by then, CPython ends that
thread and the unwind through Rust aborts the process. Before the exit guard
(``nereus.objstore._exit_guard``) about one run in four of this script died with 134.
"""

from __future__ import annotations

import subprocess
import sys

from tests.ports import free_port

SCRIPT = """
import asyncio, sys
from nereus.objstore import ObjectStoreError, open_object_store

async def main(port):
    store = open_object_store(f"s3://bucket?endpoint=http://127.0.0.1:{port}&access_key_id=a&secret_access_key=b"
                              "&region=us-east-1&verify_conditional_put=false&retry_timeout=0.2")
    answers = await asyncio.gather(*(store.head(f"k{i}") for i in range(8)), return_exceptions=True)
    assert all(isinstance(a, ObjectStoreError) for a in answers), answers
    await store.close()
    sys.exit(3)  # an exit code of its own, which the process must end with

asyncio.run(main(sys.argv[1]))
"""

RUNS = 12  # each ~0.4 s; without the guard all of them passing was a 3% chance


def test_failed_requests_then_exit_end_with_the_process_own_exit_code():
    port = str(free_port())  # nothing listens there: every request fails
    for run in range(RUNS):
        result = subprocess.run([sys.executable, "-c", SCRIPT, port], capture_output=True, timeout=60,
                                stdin=subprocess.DEVNULL)
        stderr = result.stderr.decode(errors="replace")
        assert result.returncode == 3, f"run {run}: exit code {result.returncode}\n{stderr[-2000:]}"
        assert "Fatal Python error" not in stderr, stderr[-2000:]

"""A cache writer process for the concurrency tests: puts known samples, reports each one.

    python tests/support/cache_writer.py ROOT WRITER_ID COUNT [DELAY_S]

Writes ``COUNT`` samples under :func:`key` ``(WRITER_ID, i)`` with :func:`value` ``(WRITER_ID, i)``
through :class:`mbs.llm.cache.ResponseCache` and prints ``i`` (flushed) after each put
returns, so a test that kills it with SIGKILL knows which samples it must find. Exits without
sealing its segment when ``COUNT`` is reached only if ``MBS_NO_SEAL`` is set.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time


def key(writer: int, i: int) -> str:
    """The hex cache key of sample ``i`` of ``writer``."""
    return hashlib.sha256(f"writer {writer} sample {i}".encode()).hexdigest()


def value(writer: int, i: int) -> dict:
    """The sample stored under :func:`key` ``(writer, i)`` (lengths vary: some are compressed)."""
    return {"text": f"w{writer} s{i} " + "step " * (i % 200), "prompt_tokens": 10, "completion_tokens": i % 200,
            "finish_reason": "stop"}


def main() -> None:
    from mbs.llm.cache import ResponseCache

    root, writer, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    cache = ResponseCache(root)
    for i in range(count):
        cache.put(key(writer, i), value(writer, i))
        print(i, flush=True)
        if delay:
            time.sleep(delay)
    if os.environ.get("MBS_NO_SEAL"):
        os._exit(0)
    cache.close()


if __name__ == "__main__":
    main()

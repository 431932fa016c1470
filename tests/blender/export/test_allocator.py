"""rowbeam.blender.export.allocator: numpy's huge-page advice is off and glibc keeps freed blocks after keep_freed_memory()
(a fresh interpreter, so the process-wide settings of other tests do not decide the result; numpy only)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import numpy as np
from rowbeam.blender.export.allocator import keep_freed_memory, release_free_memory
core = getattr(np, "_core", None) or getattr(np, "core")
set_hugepage = core.multiarray._set_madvise_hugepage
set_hugepage(True)                        # numpy's default where the kernel has THP
applied = keep_freed_memory()
print(set_hugepage(False), applied["numpy_madvise_hugepage_off"], applied["glibc_mallopt"], keep_freed_memory() is applied,
      release_free_memory())
"""


def test_keep_freed_memory_turns_hugepage_advice_off_and_sets_mallopt():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split()
    previous, numpy_off, mallopt, once, trimmed = out
    assert previous == "False" and numpy_off == "True"          # the advice was on before the call, off after it
    assert once == "True"
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert mallopt == "True" and trimmed in ("True", "False")        # malloc_trim ran (1: memory released)

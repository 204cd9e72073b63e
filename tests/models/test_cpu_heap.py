"""keep_freed_memory: freed multi-MiB blocks are reused instead of faulted in again."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness_r1.models.cpu import keep_freed_memory

# Allocations of the lockstep cache's size (8 rows x 3 heads x ~2,000-2,800 positions x 64,
# bf16: 6-9 MiB), each a little larger or smaller than the one before, as a target's are.
FAULTS = """
import resource, sys, torch
from harness_r1.models.cpu import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.zeros(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(100):
    block = torch.zeros(8, 3, 2000 + (i * 37) % 800, 64, dtype=torch.bfloat16)
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", FAULTS, mode], check=True, capture_output=True, text=True
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not keep_freed_memory(), reason="not glibc: the setting does not apply")
def test_kept_heap_turns_repeated_large_allocations_into_reuse() -> None:
    default, kept = _page_faults("default"), _page_faults("keep")
    # measured: ~45,000 page faults with glibc's defaults, ~4,000 (the first block) kept
    assert kept * 3 < default, (kept, default)

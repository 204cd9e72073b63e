"""Which number format the embedded target computes in on this host.

bf16 halves the bytes every matrix product reads and, on CPUs with AMX or AVX512-BF16, runs on
units fp32 does not use (issue 16: prefill x2.4 on this project's 2-core EPYC with AVX512-BF16,
x3.3 on a CPU with AMX). Elsewhere torch emulates bf16 and it is slower than fp32, so "auto"
looks at the CPU's flags, picks, and says why.

int8 (dynamic quantization: per-channel int8 weights, activations quantized per call with a
scale taken from that call's tokens) is selectable and measured (decode x2.3) but never chosen
by "auto": its answers depend on which tokens share a call, so the same prompt read again from
the prefix cache, or batched with other prompts, gets another answer, and on the canary's
prompts its greedy text differed from fp32's from the first tokens on. A frozen target whose
answers move with its batch cannot pair a canary.

The choice is part of the target's version, so results of one format are never compared with,
or cached as, another's.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Dtype = Literal["float32", "bfloat16", "int8"]
DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "int8")
#: CPU flags (as /proc/cpuinfo spells them) of native bf16 matrix arithmetic.
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
#: glibc's mallopt parameters (malloc.h) and the largest mmap threshold it accepts on 64-bit.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024


@dataclass(frozen=True)
class DtypeChoice:
    dtype: Dtype
    reason: str


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's flags; empty where there is no /proc/cpuinfo (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def choose_dtype(requested: str, flags: frozenset[str] | None = None) -> DtypeChoice:
    """`requested` as configured: "float32", "bfloat16" and "int8" are taken as they are,
    "auto" becomes bfloat16 only where the CPU computes it natively, else float32."""
    if requested not in DTYPES:
        raise ValueError(f"unknown dtype {requested!r}; use one of {', '.join(DTYPES)}")
    if requested != "auto":
        return DtypeChoice(requested, "configured")  # type: ignore[arg-type]  # checked above
    found = sorted((cpu_flags() if flags is None else flags) & set(BF16_FLAGS))
    if found:
        return DtypeChoice("bfloat16", f"auto: the CPU has {', '.join(found)}")
    return DtypeChoice(
        "float32", f"auto: no {' or '.join(BF16_FLAGS)} on this CPU, bf16 would be emulated"
    )


def keep_freed_memory(trim_threshold: int = 1 << 30) -> bool:
    """Make glibc keep freed blocks of up to 32 MiB in the heap instead of unmapping them.

    Why: the target allocates and frees caches and activations of a few MiB each on every
    forward pass (the lockstep batch cache alone: 8 rows x ~2,500 positions x 3 heads x 64,
    per layer, keys and values). glibc serves blocks that large with a fresh mmap and unmaps
    them on free, so every one is paid again in page faults when first written: zero-filling
    one layer's batch buffer took 11 ms in the target (0.5 ms for the same size reused), and
    an ALFWorld run spent ~15% of its decode time so (BENCHMARKS.md, issue 16). With the
    threshold at glibc's maximum and trimming set high, freed blocks are reused. The cost is
    that the process keeps its peak heap instead of returning it to the system.

    Returns whether glibc took both settings (False on other C libraries, which are left as
    they are)."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) and mallopt(M_TRIM_THRESHOLD, trim_threshold)
    )

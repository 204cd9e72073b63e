"""The target's number format: chosen per host, said why, part of the target's version."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_r1.harness.policies.base import GenerationRequest, SamplingConfig
from harness_r1.harness.policies.cpu import DtypeChoice, choose_dtype, cpu_flags


def test_auto_takes_bf16_only_where_the_cpu_computes_it() -> None:
    amx = frozenset({"sse2", "avx512f", "amx_bf16", "amx_tile"})
    assert choose_dtype("auto", amx) == DtypeChoice("bfloat16", "auto: the CPU has amx_bf16")
    plain = choose_dtype("auto", frozenset({"sse2", "avx2"}))
    assert plain.dtype == "float32" and "bf16 would be emulated" in plain.reason
    assert choose_dtype("bfloat16", frozenset()) == DtypeChoice("bfloat16", "configured")
    with pytest.raises(ValueError, match="unknown dtype 'fp16'"):
        choose_dtype("fp16")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512_bf16\n\nflags\t: other\n")
    assert cpu_flags(cpuinfo) == frozenset({"fpu", "sse2", "avx512_bf16"})
    assert cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.integration
def test_a_bf16_target_is_another_version_and_still_answers() -> None:
    """On any CPU (emulated where not native): the model computes in bf16, its version says
    so, and a short greedy answer comes back and repeats."""
    from harness_r1.harness.policies.transformers_backend import TransformersPolicy

    fp32 = TransformersPolicy.embedded(sampling=SamplingConfig(max_new_tokens=6))
    bf16 = TransformersPolicy.embedded(sampling=SamplingConfig(max_new_tokens=6), dtype="bfloat16")
    assert str(next(bf16.model.parameters()).dtype) == "torch.bfloat16"
    assert bf16.version == f"{fp32.version}+bfloat16" and bf16.dtype == "bfloat16"
    request = GenerationRequest(
        messages=[{"role": "user", "content": "Say one word: hello."}], seed=0
    )
    first, again = bf16.generate([request]), bf16.generate([request])
    assert first[0].text and first == again

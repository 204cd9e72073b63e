"""The target's number format: chosen per host, said why, part of the target's version."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_r1.models.base import GenerationRequest, SamplingConfig
from harness_r1.models.cpu import DtypeChoice, choose_dtype, cpu_flags


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
    from harness_r1.models.transformers_backend import TransformersPolicy

    fp32 = TransformersPolicy.embedded(sampling=SamplingConfig(max_new_tokens=6))
    bf16 = TransformersPolicy.embedded(sampling=SamplingConfig(max_new_tokens=6), dtype="bfloat16")
    assert str(next(bf16.model.parameters()).dtype) == "torch.bfloat16"
    assert bf16.version == f"{fp32.version}+bfloat16" and bf16.dtype == "bfloat16"
    request = GenerationRequest(
        messages=[{"role": "user", "content": "Say one word: hello."}], seed=0
    )
    first, again = bf16.generate([request]), bf16.generate([request])
    assert first[0].text and first == again


def test_int8_is_selectable_but_never_chosen_by_auto() -> None:
    """int8's answers move with the tokens that share a call (per-call activation scales), so
    a paired canary cannot rest on it: auto skips it even where its kernels would run."""
    vnni = frozenset({"avx2", "avx512f", "avx512_vnni"})
    assert choose_dtype("auto", vnni).dtype == "float32"
    assert choose_dtype("int8", frozenset()) == DtypeChoice("int8", "configured")


@pytest.mark.integration
def test_auto_on_a_cpu_without_native_bf16_falls_back_to_fp32_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from structlog.testing import capture_logs

    from harness_r1.models import cpu
    from harness_r1.models.transformers_backend import TransformersPolicy

    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"sse2", "avx2"}))
    with capture_logs() as logs:
        policy = TransformersPolicy.embedded(
            sampling=SamplingConfig(max_new_tokens=4), dtype="auto"
        )
    assert policy.dtype == "float32" and "+" not in policy.version
    assert str(next(policy.model.parameters()).dtype) == "torch.float32"
    engine = [e for e in logs if e["event"] == "target_engine"]
    assert len(engine) == 1
    assert engine[0]["dtype"] == "float32"
    assert "no amx_bf16 or avx512_bf16" in engine[0]["reason"]
    assert engine[0]["decode"] == "generate"  # no prefix cache asked for here


@pytest.mark.integration
def test_an_int8_target_is_another_version_and_answers() -> None:
    from harness_r1.models.transformers_backend import TransformersPolicy

    int8 = TransformersPolicy.embedded(sampling=SamplingConfig(max_new_tokens=4), dtype="int8")
    assert int8.version.endswith("+int8") and int8.dtype == "int8"
    assert any("quantized" in type(m).__module__ for m in int8.model.modules())
    request = GenerationRequest(messages=[{"role": "user", "content": "Say hello."}], seed=0)
    assert int8.generate([request])[0].tokens >= 1

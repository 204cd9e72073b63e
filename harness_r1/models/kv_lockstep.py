"""Decode the requests of one lockstep batch together, each prompt read with its own prefix cache.

Why: with the prefix cache a decision costs its ~160 new prompt tokens and ~60 generated ones
(ALFWorld, issue 16), and a generated token costs one pass over every weight whether it is for
one row or for eight: decoding the rows of a batch one at a time pays that pass once per row
and token. Here each row's prompt is read alone (reusing its own cached prefix, no padding, so
prefill work stays proportional to new tokens), then the rows' caches are left-padded into one
batch and every decode step answers all rows with one forward pass. Afterwards each row's cache
is cut out of the batch again (without the padding) and goes back to the prefix store.

Greedy rows also draft (PromptLookup): each step feeds a row's last token plus up to
`draft_tokens` tokens copied from where its current tail last occurred in its own prompt or
output, and keeps the guesses the model's argmax agrees with. A small target copies much of
what it reads, so a step often yields several tokens for about the price of one (ALFWorld,
8 rows: decode time 82 -> 34 s for the same 80 decisions; BENCHMARKS.md).

`transformers.generate` cannot do this: it takes one cache for the whole batch, so rows whose
cached prefixes differ in length could not keep them. The loop below is the plain greedy/top-p
decode that `generate` runs, with explicit per-row positions (rotary embeddings must not count
the padding) and an attention mask over the padding.

This module imports torch and transformers; the policy imports it only when it decodes in
lockstep, so the CLI and daemon still start fast.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from harness_r1.models.base import SamplingConfig


@dataclass
class RowState:
    """One request in the batch: the tokens its cache holds (`ids`, the whole prompt after
    prefill), its sampler, what it has generated and whether it has stopped."""

    ids: list[int]
    generator: Any
    generated: list[int]
    done: bool = False


def left_pad_stack(caches: Sequence[Any], room: int) -> tuple[DynamicCache, list[int]]:
    """One cache holding all rows' caches, each left-padded with zeros to the longest, with
    room for `room` more tokens written in place (see `PreallocatedLayer`); returns it and
    each row's padding."""
    lengths = [c.get_seq_length() for c in caches]
    longest = max(lengths)
    pads = [longest - n for n in lengths]
    stacked = DynamicCache()
    layers: list[Any] = []
    for index in range(len(caches[0].layers)):
        first = caches[0].layers[index]
        buffers = []
        for part in (first.keys, first.values):
            heads, dim = part.shape[1], part.shape[-1]
            buffers.append(part.new_zeros(len(caches), heads, longest + room, dim))
        for row, (cache, pad) in enumerate(zip(caches, pads, strict=True)):
            layer = cache.layers[index]
            buffers[0][row, :, pad:longest] = layer.keys[0]
            buffers[1][row, :, pad:longest] = layer.values[0]
        layers.append(PreallocatedLayer(buffers[0], buffers[1], longest))
    stacked.layers = layers
    return stacked, pads


class PreallocatedLayer(DynamicLayer):
    """A DynamicLayer whose keys/values live in buffers with room to grow: a decode step
    writes its token in place instead of `torch.cat`-ing the whole cache into a new tensor (at
    8 rows x 2,000 tokens that copy is ~0.7 GB per step in fp32). `keys`/`values` are views of
    the filled part, so everything that reads a DynamicLayer reads this one."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()
        self._buffers = (keys, values)
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self._set_length(length)

    def _set_length(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        self._length = length
        keys, values = self._buffers[0][:, :, :length], self._buffers[1][:, :, :length]
        self.keys, self.values = keys, values
        return keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self._length, self._length + key_states.shape[-2]
        keys, values = self._buffers
        if end > keys.shape[-2]:  # out of room: grow as a DynamicLayer does
            self._buffers = (
                torch.cat([keys[:, :, :start], key_states], dim=-2),
                torch.cat([values[:, :, :start], value_states], dim=-2),
            )
        else:
            keys[:, :, start:end] = key_states
            values[:, :, start:end] = value_states
        return self._set_length(end)


def alias(cache: DynamicCache) -> DynamicCache:
    """A second cache object over the same key/value tensors (nothing copied). Safe to hand to
    the prefix store next to the original: a DynamicLayer never writes into its tensors (it
    grows by `torch.cat` and crops by slicing), so neither object can change the other."""
    twin = copy.copy(cache)
    twin.layers = [copy.copy(layer) for layer in cache.layers]
    return twin


def row_cache(stacked: Any, row: int, columns: slice | torch.Tensor) -> Any:
    """A new DynamicCache with a copy of one row's cache columns, in order: a span (`slice`),
    or the positions a row kept after drafted tokens were rejected (an index tensor)."""
    out = DynamicCache()
    for index, layer in enumerate(stacked.layers):
        keys = layer.keys[row : row + 1, :, columns]
        values = layer.values[row : row + 1, :, columns]
        if isinstance(columns, slice):  # a view: copy it (an index tensor already copied)
            keys, values = keys.clone(), values.clone()
        out.update(keys, values, index)
    return out


class PromptLookup:
    """Draft tokens for one row by prompt lookup: the tokens that followed the latest earlier
    occurrence of the row's last NGRAMS tokens (the longest that occurred) in its prompt and
    output. Why: a small target copies much of what it reads (object lists, locations, table
    names, its own repeated lines), so a guess copied from the context is often exactly the
    greedy continuation, and checking several guessed tokens costs about one decode step."""

    NGRAMS = (3, 2)

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens: list[int] = []
        #: n -> n-gram -> the position right after its latest occurrence with a successor
        self.seen: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.NGRAMS}
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            end = len(self.tokens)  # the n-grams ending here now have a successor: `token`
            for n, seen in self.seen.items():
                if end >= n:
                    seen[tuple(self.tokens[end - n : end])] = end
            self.tokens.append(token)

    def propose(self, most: int) -> list[int]:
        """Up to `most` tokens that followed the last occurrence of the current tail."""
        if most <= 0:
            return []
        for n, seen in self.seen.items():
            after = seen.get(tuple(self.tokens[-n:]))
            if after is not None:
                return self.tokens[after : after + most]
        return []


def next_tokens(logits: Any, sampling: SamplingConfig, rows: Sequence[RowState]) -> list[int]:
    """The next token of every row from its last-position logits ([rows, vocab]): argmax when
    greedy, else temperature and top-p sampling from each row's own generator (so a request's
    sample does not depend on which other requests share its batch)."""
    if sampling.greedy:
        return [int(t) for t in logits.argmax(dim=-1)]
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    beyond_top_p = sorted_probs.cumsum(dim=-1) - sorted_probs > sampling.top_p
    sorted_probs = sorted_probs.masked_fill(beyond_top_p, 0.0)
    return [
        int(order[i, torch.multinomial(sorted_probs[i], 1, generator=row.generator)])
        for i, row in enumerate(rows)
    ]


def active_runs(rows: Sequence[RowState]) -> tuple[tuple[int, int], ...]:
    """The runs `(start, stop)` of consecutive rows that are still decoding."""
    runs: list[tuple[int, int]] = []
    for index, row in enumerate(rows):
        if row.done:
            continue
        if runs and runs[-1][1] == index:
            runs[-1] = (runs[-1][0], index + 1)
        else:
            runs.append((index, index + 1))
    return tuple(runs)


def skip_finished(rows: Sequence[RowState]) -> dict[str, Any]:
    """Keyword arguments for the model that let the grouped-query attention (gqa_attention)
    skip the rows that have finished (none while every row still decodes)."""
    if not any(row.done for row in rows):
        return {}
    return {"active_rows": active_runs(rows)}


def decode_together(
    model: Any,
    rows: Sequence[RowState],
    caches: Sequence[Any],
    first: Sequence[int],
    *,
    sampling: SamplingConfig,
    stop_ids: frozenset[int],
    pad_id: int,
    draft_tokens: int = 0,
) -> tuple[Any, list[torch.Tensor]]:
    """Decode all rows from their prefilled caches and first tokens until each has produced a
    stop token or `max_new_tokens`; returns the batched cache and, per row, the cache columns
    that hold its `ids` and all but its last generated token, in order.

    With `draft_tokens` > 0 and greedy sampling, each step also feeds every row up to that many
    tokens guessed by prompt lookup (PromptLookup) after its last token; the row keeps the
    guesses the model's own argmax agrees with, one after the other, plus the model's next
    token after them. The text is the greedy text (each kept token is the argmax given the
    tokens before it); only the rounding of a several-token pass can differ from one-token
    steps. Rejected guesses stay in the cache as masked columns."""
    for row, token in zip(rows, first, strict=True):
        row.generated.append(token)
        row.done = token in stop_ids or sampling.max_new_tokens <= 1
    drafting = draft_tokens if sampling.greedy else 0
    stacked, pads = left_pad_stack(caches, room=sampling.max_new_tokens * (1 + drafting))
    valid = torch.ones(len(rows), stacked.get_seq_length(), dtype=torch.bool)
    for i, pad in enumerate(pads):
        valid[i, :pad] = False
    positions = [len(row.ids) for row in rows]
    lookups = [PromptLookup(row.ids + row.generated) if drafting else None for row in rows]
    while not all(row.done for row in rows):
        drafts = [
            []
            if row.done or lookup is None
            else lookup.propose(min(drafting, sampling.max_new_tokens - len(row.generated) - 1))
            for row, lookup in zip(rows, lookups, strict=True)
        ]
        width = 1 + max(len(d) for d in drafts)
        inputs = torch.full((len(rows), width), pad_id, dtype=torch.long)
        fed = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, (row, draft) in enumerate(zip(rows, drafts, strict=True)):
            inputs[i, : 1 + len(draft)] = torch.tensor([row.generated[-1], *draft])
            fed[i, : 1 + len(draft)] = not row.done
        output = model(
            input_ids=inputs,
            attention_mask=torch.cat([valid, fed], dim=1).long(),
            position_ids=torch.tensor(positions).unsqueeze(1) + torch.arange(width),
            past_key_values=stacked,
            use_cache=True,
            **skip_finished(rows),
        )
        stacked = output.past_key_values
        proposals = _proposals(output.logits, drafts, sampling, rows)
        for i, (row, proposed) in enumerate(zip(rows, proposals, strict=True)):
            fed[i] = False
            if row.done:
                continue
            taken = _append(row, proposed, stop_ids, sampling.max_new_tokens)
            fed[i, :taken] = True  # the last token fed and the kept guesses before the last
            positions[i] += taken
            if lookups[i] is not None:
                lookups[i].extend(row.generated[-taken:])  # type: ignore[union-attr]
        valid = torch.cat([valid, fed], dim=1)
    return stacked, [valid[i].nonzero().squeeze(1) for i in range(len(rows))]


def _proposals(
    logits: torch.Tensor,
    drafts: Sequence[Sequence[int]],
    sampling: SamplingConfig,
    rows: Sequence[RowState],
) -> list[list[int]]:
    """Per row, the tokens this step produced: with drafts, the agreed guesses and the
    argmax after them; without, the next token."""
    if logits.shape[1] == 1:
        return [[t] for t in next_tokens(logits[:, -1], sampling, rows)]
    chosen = logits.argmax(dim=-1).tolist()
    out = []
    for picks, draft in zip(chosen, drafts, strict=True):
        agreed = 0
        while agreed < len(draft) and picks[agreed] == draft[agreed]:
            agreed += 1
        out.append(picks[: agreed + 1])
    return out


def _append(row: RowState, tokens: Sequence[int], stop_ids: frozenset[int], most: int) -> int:
    """Append tokens to the row until a stop token or `most` generated; returns how many."""
    taken = 0
    for token in tokens:
        row.generated.append(token)
        taken += 1
        if token in stop_ids or len(row.generated) >= most:
            row.done = True
            break
    return taken

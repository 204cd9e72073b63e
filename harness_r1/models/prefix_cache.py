"""Reuse of attention key/value caches across turns that share a token prefix.

Why: an agent's prompt at step t is its prompt at step t-1 plus the model's answer and one new
observation, and every episode of one env starts with the same instructions. Re-reading the
whole prompt each step costs O(prompt) forward passes per decision (on 2 CPU cores, most of
an ALFWorld step); with the cache only the new tokens are read. The result is the same tokens
up to floating-point noise, since a key/value cache of an identical token prefix is what the
model would recompute.

The store is generic over the cache object (plus functions cropping one to n tokens and
copying its first n tokens): a caller asks for the entry with the longest common token prefix,
gets it cut to that prefix, and puts the grown cache back under its new token sequence. An
entry that is continued (its whole key is a prefix of the request) is handed over without a
copy; from an entry only partly shared (another episode's history after the common
instructions, or the episode's own history once the oldest exchange leaves a sliding history
window) only the shared prefix is copied, so the entry stays intact. A partly shared entry is
not marked as used, so entries nobody continues age out first. The store is bounded by entries
and by total tokens (memory is proportional to tokens: ~46 KB per token for SmolLM2-135M).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

C = TypeVar("C")


def crop_in_place(cache: Any, length: int) -> None:
    """Default cropping: `cache.crop(length)` keeps the first `length` positions."""
    cache.crop(length)


def deepcopy_prefix(cache: Any, length: int) -> Any:
    """Default prefix copy: a deep copy, cropped."""
    copied = copy.deepcopy(cache)
    copied.crop(length)
    return copied


@dataclass
class PrefixHit(Generic[C]):
    """A cache covering the first `length` tokens of the request (always < the request length,
    so the model still reads at least one token and produces the next-token logits)."""

    cache: C
    length: int


@dataclass
class PrefixCacheStats:
    lookups: int = 0
    hits: int = 0
    reused_tokens: int = 0
    prompt_tokens: int = 0

    @property
    def reuse_ratio(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCacheStore(Generic[C]):
    """At most `max_entries` caches holding at most `max_tokens` tokens together, least
    recently used evicted first.

    `min_shared` keeps tiny overlaps (a chat template's first few tokens) from costing a copy
    of a large cache for little gain.
    """

    def __init__(
        self,
        max_entries: int = 16,
        min_shared: int = 32,
        crop: Callable[[C, int], None] = crop_in_place,
        copy_prefix: Callable[[C, int], C] = deepcopy_prefix,
        max_tokens: int = 65_536,
    ) -> None:
        if max_entries < 1 or max_tokens < 1:
            raise ValueError("a prefix cache needs room for at least one entry and one token")
        self.max_entries = max_entries
        self.max_tokens = max_tokens
        self.min_shared = min_shared
        self._crop = crop
        self._copy_prefix = copy_prefix
        self._tokens = 0
        self._entries: OrderedDict[tuple[int, ...], C] = OrderedDict()
        self.stats = PrefixCacheStats()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tokens(self) -> int:
        """Tokens held by all entries together."""
        return self._tokens

    def take(self, tokens: Sequence[int]) -> PrefixHit[C] | None:
        """The cache sharing the longest prefix with `tokens`, cropped to it, or None."""
        self.stats.lookups += 1
        self.stats.prompt_tokens += len(tokens)
        best_key: tuple[int, ...] | None = None
        best = 0
        for key in self._entries:
            shared = common_prefix_length(key, tokens)
            if shared > best:
                best_key, best = key, shared
        usable = min(best, len(tokens) - 1)
        if best_key is None or usable < self.min_shared:
            return None
        if best == len(best_key):
            # a continuation: the entry moves on with its episode
            cache = self._entries.pop(best_key)
            self._tokens -= len(best_key)
            if usable < best:  # the same prompt again: the model must read its last token
                self._crop(cache, usable)
        else:
            cache = self._copy_prefix(self._entries[best_key], usable)
        self.stats.hits += 1
        self.stats.reused_tokens += usable
        return PrefixHit(cache=cache, length=usable)

    def put(self, tokens: Sequence[int], cache: C) -> None:
        """Keep `cache`, which holds exactly the keys/values of `tokens`."""
        key = tuple(tokens)
        if key in self._entries:
            self._tokens -= len(key)
        self._entries[key] = cache
        self._entries.move_to_end(key)
        self._tokens += len(key)
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_entries or self._tokens > self.max_tokens
        ):
            evicted, _ = self._entries.popitem(last=False)
            self._tokens -= len(evicted)
        if self._tokens > self.max_tokens:  # one entry larger than the whole budget
            self.clear()

    def discard(self, tokens: Sequence[int]) -> None:
        """Drop the entry of exactly `tokens`, if there is one (an entry a longer one replaces)."""
        key = tuple(tokens)
        if key in self._entries:
            del self._entries[key]
            self._tokens -= len(key)

    def clear(self) -> None:
        self._entries.clear()
        self._tokens = 0

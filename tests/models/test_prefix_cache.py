"""The prefix store's choices: longest shared prefix, hand-over vs copy, eviction, stats.

The cache objects here are lists of token ids (a list "holds" the keys/values of its tokens),
so cropping and copying are visible exactly; the real transformers cache is exercised in
tests/integration/test_smollm2_prefix_cache.py.
"""

from __future__ import annotations

import pytest

from harness_r1.models.prefix_cache import PrefixCacheStore, common_prefix_length


def _crop(cache: list[int], length: int) -> None:
    del cache[length:]


def _copy_prefix(cache: list[int], length: int) -> list[int]:
    return cache[:length]


def _store(**kwargs: int) -> PrefixCacheStore[list[int]]:
    kwargs.setdefault("min_shared", 2)
    return PrefixCacheStore(crop=_crop, copy_prefix=_copy_prefix, **kwargs)


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([5], [1]) == 0


def test_a_continuation_is_handed_over_without_a_copy() -> None:
    store = _store()
    held = [1, 2, 3, 4]
    store.put([1, 2, 3, 4], held)
    hit = store.take([1, 2, 3, 4, 5, 6])
    assert hit is not None and hit.cache is held and hit.length == 4
    assert len(store) == 0  # the entry moved on with its episode


def test_a_partly_shared_entry_is_copied_and_kept_intact() -> None:
    store = _store()
    other_episode = [1, 2, 3, 9, 9]
    store.put(list(other_episode), other_episode)
    hit = store.take([1, 2, 3, 7])
    assert hit is not None and hit.length == 3
    assert hit.cache == [1, 2, 3] and hit.cache is not other_episode
    assert other_episode == [1, 2, 3, 9, 9]
    assert len(store) == 1


def test_a_partly_shared_entry_is_not_refreshed() -> None:
    """An entry only copied from (its episode moved its history window on) ages out first."""
    store = _store(max_entries=2)
    store.put([1, 2, 3, 9], [1, 2, 3, 9])  # stale: only ever partly shared
    store.put([5, 5, 5], [5, 5, 5])
    assert store.take([1, 2, 3, 7]) is not None  # copied from the stale entry
    store.put([1, 2, 3, 7, 8], [1, 2, 3, 7, 8])  # evicts the stale one, not [5, 5, 5]
    assert store.take([5, 5, 5, 6]) is not None
    assert store.take([1, 2, 3, 9, 1]).length == 3  # type: ignore[union-attr]


def test_the_token_budget_bounds_the_store() -> None:
    store = _store(max_entries=10, max_tokens=8)
    store.put([1, 1, 1, 1], [1, 1, 1, 1])
    store.put([2, 2, 2, 2], [2, 2, 2, 2])
    assert store.tokens == 8 and len(store) == 2
    store.put([3, 3, 3], [3, 3, 3])  # 11 > 8: the oldest goes
    assert store.tokens == 7 and len(store) == 2
    assert store.take([1, 1, 1, 1, 5]) is None
    store.put(list(range(20)), list(range(20)))  # larger than the whole budget: kept nothing
    assert store.tokens == 0 and len(store) == 0


def test_at_least_one_token_is_left_for_the_model_to_read() -> None:
    store = _store()
    store.put([1, 2, 3], [1, 2, 3])
    hit = store.take([1, 2, 3])  # the same prompt again: reuse all but its last token
    assert hit is not None and hit.length == 2 and hit.cache == [1, 2]


def test_the_longest_shared_prefix_wins() -> None:
    store = _store()
    store.put([1, 2], [1, 2])
    store.put([1, 2, 3, 4], [1, 2, 3, 4])
    store.put([1, 5, 6, 7, 8], [1, 5, 6, 7, 8])
    hit = store.take([1, 2, 3, 4, 10])
    assert hit is not None and hit.length == 4


def test_short_overlaps_and_misses_give_nothing() -> None:
    store = _store(min_shared=3)
    store.put([1, 2, 9], [1, 2, 9])
    assert store.take([1, 2, 4, 5]) is None  # 2 shared < min_shared
    assert store.take([7, 8, 9]) is None
    assert store.stats.hits == 0 and store.stats.lookups == 2


def test_least_recently_used_entries_are_evicted() -> None:
    store = _store(max_entries=2)
    store.put([1, 1, 1], [1, 1, 1])
    store.put([2, 2, 2], [2, 2, 2])
    assert store.take([1, 1, 1, 5, 5]) is not None  # entry 1 handed over
    store.put([1, 1, 1, 5, 5], [1, 1, 1, 5, 5])
    store.put([3, 3, 3], [3, 3, 3])  # evicts entry 2, the least recently used
    assert store.take([2, 2, 2, 4]) is None
    assert store.take([1, 1, 1, 5, 5, 6]) is not None


def test_stats_count_reused_tokens() -> None:
    store = _store()
    store.put([1, 2, 3, 4], [1, 2, 3, 4])
    store.take([1, 2, 3, 4, 5, 6, 7, 8])
    assert store.stats.reused_tokens == 4 and store.stats.prompt_tokens == 8
    assert store.stats.reuse_ratio == pytest.approx(0.5)


def test_an_empty_store_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        PrefixCacheStore(max_entries=0)
    with pytest.raises(ValueError, match="one token"):
        PrefixCacheStore(max_tokens=0)


def test_models_with_special_caches_are_refused_up_front() -> None:
    from types import SimpleNamespace

    from harness_r1.models.transformers_backend import check_prefix_cache_support

    def model(**config: object) -> SimpleNamespace:
        generation = SimpleNamespace(cache_implementation=config.pop("cache", None))
        return SimpleNamespace(config=SimpleNamespace(**config), generation_config=generation)

    check_prefix_cache_support(model(sliding_window=None, layer_types=None))  # Llama-like
    check_prefix_cache_support(model(layer_types=["full_attention"] * 4))
    for refused in (
        model(sliding_window=4096),
        model(layer_types=["full_attention", "sliding_attention"]),
        model(cache="static"),
    ):
        with pytest.raises(ValueError, match="full-attention dynamic caches only"):
            check_prefix_cache_support(refused)


def test_discard_drops_exactly_one_entry_and_its_tokens() -> None:
    store = _store()
    store.put([1, 2, 3], [1, 2, 3])
    store.put([1, 2, 3, 4, 5], [1, 2, 3, 4, 5])
    store.discard([1, 2, 3])
    store.discard([9, 9])  # absent: nothing happens
    assert len(store) == 1 and store.tokens == 5
    hit = store.take([1, 2, 3, 4, 5, 6])
    assert hit is not None and hit.length == 5

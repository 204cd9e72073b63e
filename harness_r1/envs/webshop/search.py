"""The search engine behind `search[keywords]`: Okapi BM25 over the catalogue.

Why BM25: WebShop searches with Pyserini/Lucene BM25 (k1=0.9, b=0.4, Lucene's idf) and returns
the top 50 hits, shown 10 per page. Here each product's document is its title, category query
and attribute phrases, tokenised into lowercase alphanumeric words; only products sharing at
least one word with the query are returned. Ties keep catalogue order (sorted by asin), so a
query always gives the same pages.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from harness_r1.envs.webshop.model import Product
from harness_r1.envs.webshop.normalize import words

SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10


def document_words(product: Product) -> list[str]:
    return words(" ".join((product.title, product.query, *product.attributes)))


class SearchIndex:
    def __init__(self, products: Sequence[Product], *, k1: float = 0.9, b: float = 0.4) -> None:
        self._asins = [p.asin for p in products]
        self._k1 = k1
        self._b = b
        self._tf: list[Counter[str]] = []
        self._len: list[int] = []
        df: Counter[str] = Counter()
        for product in products:
            counts = Counter(document_words(product))
            self._tf.append(counts)
            self._len.append(sum(counts.values()))
            df.update(counts.keys())
        n = len(products)
        self._avgdl = sum(self._len) / n if n else 0.0
        self._idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}

    def scores(self, query: str) -> list[tuple[float, str]]:
        """(score, asin) for every product matching a query word, best first."""
        terms = set(words(query))
        out: list[tuple[float, int]] = []
        for i, tf in enumerate(self._tf):
            score = 0.0
            norm = self._k1 * (1 - self._b + self._b * self._len[i] / (self._avgdl or 1.0))
            for term in terms:
                f = tf.get(term, 0)
                if f:
                    score += self._idf[term] * f * (self._k1 + 1) / (f + norm)
            if score > 0:
                out.append((score, i))
        out.sort(key=lambda item: (-item[0], item[1]))
        return [(score, self._asins[i]) for score, i in out]

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """The asins of the top `k` hits."""
        return [asin for _, asin in self.scores(query)[:k]]


def page_of(results: Sequence[str], page: int) -> list[str]:
    """WebShop's get_product_per_page: 10 results per 1-based page."""
    return list(results[(page - 1) * PRODUCT_WINDOW : page * PRODUCT_WINDOW])

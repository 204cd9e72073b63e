"""The two records WebShop's reward compares: a product of the catalogue and a shopping goal.

Why plain frozen dataclasses: the reward, the search index, the page renderer and the tests all
read them, and none may change them mid-episode. Field names follow WebShop's product and goal
dicts (Title, Attributes, BulletPoints, Description, query, product_category, goal_options,
price_upper) in snake_case, so the reward code reads like web_agent_site/engine/goal.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: WebShop's bound when a goal states no price ("price_upper = 1000000").
NO_PRICE_BOUND = 1_000_000.0


@dataclass(frozen=True)
class Product:
    asin: str
    title: str  # WebShop's `Title` (== `name`)
    query: str  # WebShop's search-category query, e.g. "snack pretzels"
    price: float
    #: option groups in page order: (group name, values); values are lowercase like WebShop's
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    attributes: tuple[str, ...] = ()
    bullet_points: tuple[str, ...] = ()
    description: str = ""
    product_category: str = ""  # "A › B › C" breadcrumb; unknown for the reconstruction
    #: how the reconstruction made it: "target", "over_price", "wrong_options" (or "" if real)
    variant: str = ""
    #: session_idx of the goal this product was built from ("" for real catalogue items)
    source_goal: str = ""

    @property
    def price_tag(self) -> str:
        return f"${self.price:.2f}"

    def option_groups(self) -> dict[str, tuple[str, ...]]:
        return dict(self.options)


@dataclass(frozen=True)
class Goal:
    session_idx: str  # "fixed_<n>"
    asin: str  # the target product
    name: str  # the target product's full name
    query: str  # the target's category query
    instruction: str  # task text without the trailing "[Search]"
    price_upper: float
    goal_options: tuple[str, ...] = ()
    attributes: tuple[str, ...] = field(default=())
    product_category: str = ""

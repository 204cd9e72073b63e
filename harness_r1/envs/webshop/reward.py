"""WebShop's reward, ported from web_agent_site/engine/goal.py (get_reward and its helpers).

    R = (num_attr_matches + num_option_matches + r_price)
        / (len(goal.attributes) + len(goal.goal_options) + 1) * r_type

Faithful parts (same control flow and thresholds as goal.py):
- attributes: a goal attribute matches when thefuzz token_set_ratio(product attr, goal attr)
  > 85 for some product attribute, else when it is a substring of the lowercased title,
  bullet points or description;
- options: each *purchased* option value (after normalize_color, like the goal options) counts
  once: exact membership for the `size` group (EXACT_MATCH_OPTS), token_set_ratio > 85
  otherwise, else substring of title / bullets / description. (As in WebShop, the count runs
  over purchased options, so it can exceed the goal's option count on odd products.)
- price: r_price = price <= price_upper;
- type: query match, or breadcrumb category overlap >= 2, or title noun overlap > 0.2 gives
  1.0; otherwise 0.5; title_score < 0.1 gives 0.1 and title_score == 0 gives 0.0; when the
  target name has no nouns title_score is 0.2.
Approximation: the nouns come from `nouns.title_nouns` (spaCy if importable, else a
deterministic rule; see nouns.py). Success is R == 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from harness_r1.envs.webshop.model import Goal, Product
from harness_r1.envs.webshop.normalize import normalize_color, token_set_ratio
from harness_r1.envs.webshop.nouns import NounFn, title_nouns

EXACT_MATCH_OPTS = ("size",)
MATCH_THRESHOLD = 85


@dataclass(frozen=True)
class TypeReward:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


@dataclass(frozen=True)
class RewardBreakdown:
    reward: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    num_attr_matches: int
    r_att: float | None
    num_option_matches: int
    r_option: float | None
    r_price: bool

    @property
    def success(self) -> bool:
        return abs(self.reward - 1.0) < 1e-9

    def as_info(self) -> dict[str, object]:
        return asdict(self)


def _in_text(needle: str, product: Product) -> bool:
    return (
        needle in product.title.lower()
        or needle in " ".join(product.bullet_points).lower()
        or needle in product.description.lower()
    )


def get_type_reward(product: Product, goal: Goal, nouns: NounFn | None = None) -> TypeReward:
    """goal.py::get_type_reward."""
    noun_fn = nouns or title_nouns
    query_match = product.query == goal.query
    purchased_category = [x.strip() for x in product.product_category.split("›")]
    goal_category = [x.strip() for x in goal.product_category.split("›")]
    category_match = len(set(purchased_category) & set(goal_category)) >= 2

    purchased_type = noun_fn(product.title)
    desired_type = noun_fn(goal.name)
    n_intersect = len(set(purchased_type) & set(desired_type))
    title_score = 0.2 if len(desired_type) == 0 else n_intersect / len(desired_type)

    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, title_score)


def get_attribute_reward(product: Product, goal: Goal) -> tuple[float | None, int]:
    """goal.py::get_attribute_reward: (r_att, num_attr_matches); r_att None with no attributes."""
    num_attr_matches = 0
    for g_attr in goal.attributes:
        matched = False
        for p_attr in product.attributes:
            if token_set_ratio(p_attr, g_attr) > MATCH_THRESHOLD:
                num_attr_matches += 1
                matched = True
                break
        if not matched and _in_text(g_attr, product):
            num_attr_matches += 1
    r_att = num_attr_matches / len(goal.attributes) if goal.attributes else None
    return r_att, num_attr_matches


def get_option_reward(
    product: Product, goal_options: tuple[str, ...] | list[str], purchased: Mapping[str, str]
) -> tuple[float | None, int]:
    """goal.py::get_option_reward: (r_option, num_option_matches)."""
    purchased_options = {k: normalize_color(v) for k, v in purchased.items()}
    normalized_goal = [normalize_color(o) for o in goal_options]
    num_option_matches = 0
    for key, value in purchased_options.items():
        matched = False
        if key.lower() in EXACT_MATCH_OPTS:
            if value in normalized_goal:
                num_option_matches += 1
                matched = True
        else:
            for g_option in normalized_goal:
                if token_set_ratio(g_option, value) > MATCH_THRESHOLD:
                    num_option_matches += 1
                    matched = True
                    break
        if not matched and _in_text(value, product):
            num_option_matches += 1
    r_option = num_option_matches / len(normalized_goal) if normalized_goal else None
    return r_option, num_option_matches


def get_reward(
    product: Product,
    goal: Goal,
    price: float,
    options: Mapping[str, str],
    nouns: NounFn | None = None,
) -> RewardBreakdown:
    """goal.py::get_reward (verbose form). `price` is what was paid, `options` what was chosen."""
    type_reward = get_type_reward(product, goal, nouns)
    r_price = price <= goal.price_upper
    r_att, num_attr_matches = get_attribute_reward(product, goal)
    r_option, num_option_matches = get_option_reward(product, goal.goal_options, options)
    total = (num_attr_matches + num_option_matches + int(r_price)) / (
        len(goal.attributes) + len(goal.goal_options) + 1
    )
    total *= type_reward.r_type
    return RewardBreakdown(
        reward=total,
        r_type=type_reward.r_type,
        query_match=type_reward.query_match,
        category_match=type_reward.category_match,
        title_score=type_reward.title_score,
        num_attr_matches=num_attr_matches,
        r_att=r_att,
        num_option_matches=num_option_matches,
        r_option=r_option,
        r_price=r_price,
    )

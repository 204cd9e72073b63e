"""WebShop: reward (hand-computed cases), reconstructed catalogue and local engine on the real
60 fixed goals, prompter, and the HTTP adapter against a stand-in for the WebShop server.

The `StandInWebShopServer` below is a TEST DOUBLE for the official web_agent_site Flask app:
a few stdlib http.server routes that imitate the real URL scheme and HTML shape (forms with
`.btn` buttons, `.product-link` anchors, radio inputs with `data-url`, a done page with a
hidden details block and `id="reward"`). It is not WebShop.
"""

from __future__ import annotations

import ast
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote

import pytest

from harness_r1.contracts import TaskSpec
from harness_r1.envs import get_suite
from harness_r1.envs.base import EnvError
from harness_r1.envs.conformance import check_env
from harness_r1.envs.data import DataError, default_data_root
from harness_r1.envs.webshop import SUITE, WebShopEnv, load_catalogue, load_tasks
from harness_r1.envs.webshop.catalogue import Catalogue
from harness_r1.envs.webshop.http import WebShopHttpEnv, parse_page
from harness_r1.envs.webshop.model import Goal, Product
from harness_r1.envs.webshop.normalize import token_set_ratio
from harness_r1.envs.webshop.nouns import approximate_nouns
from harness_r1.envs.webshop.prompter import extract_action
from harness_r1.envs.webshop.reward import get_reward

REPO = Path(__file__).resolve().parents[2]


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_root() -> Path:
    root = default_data_root(REPO)
    if root is None or not (root / "webshop" / "goals_fixed_0_59.json").is_file():
        pytest.skip("benchmark data (../shared/benchmarks/webshop) not found")
    return root


@pytest.fixture(scope="module")
def tasks(data_root: Path) -> dict[str, TaskSpec]:
    return {t.task_id: t for t in load_tasks(data_root, "fixed")}


@pytest.fixture(scope="module")
def catalogue(data_root: Path) -> Catalogue:
    return load_catalogue(data_root)


@pytest.fixture()
def env(catalogue: Catalogue) -> WebShopEnv:
    # the approximate noun rule explicitly, so hand-computed type rewards do not depend on
    # whether spaCy happens to be installed
    return WebShopEnv(catalogue=catalogue, nouns=approximate_nouns)


def _goal(**kw: Any) -> Goal:
    base: dict[str, Any] = {
        "session_idx": "fixed_0",
        "asin": "B000000001",
        "name": "Clip in Hair Extensions",
        "query": "hair extensions",
        "instruction": "i need hair extensions, and price lower than 20.00 dollars",
        "price_upper": 20.0,
        "goal_options": ("black",),
        "attributes": ("natural looking",),
    }
    base.update(kw)
    return Goal(**base)


def _product(**kw: Any) -> Product:
    base: dict[str, Any] = {
        "asin": "B000000001",
        "title": "Clip in Hair Extensions",
        "query": "hair extensions",
        "price": 15.0,
        "options": (("color", ("black", "brown")),),
        "attributes": ("natural looking",),
    }
    base.update(kw)
    return Product(**base)


def _reward(product: Product, goal: Goal, options: dict[str, str], price: float | None = None):
    return get_reward(
        product,
        goal,
        price=product.price if price is None else price,
        options=options,
        nouns=approximate_nouns,
    )


# -- reward: hand-computed cases -------------------------------------------------------------


def test_reward_full_match_is_one() -> None:
    # attrs 1/1 (token_set 100), option black 1/1, price 15 <= 20 -> (1+1+1)/(1+1+1) = 1,
    # same query -> r_type 1.0
    r = _reward(_product(), _goal(), {"color": "black"})
    assert r.reward == 1.0 and r.success and r.r_type == 1.0


def test_reward_partial_credit() -> None:
    # goal attrs: "natural looking" (matches the product attr) and "heat resistant" (no fuzzy
    # match, not in title/bullets/description) -> 1 of 2.
    # options: color black -> fuzzy 100 vs goal "black" -> 1; size "medium" is an exact-match
    # group and not a goal option, not in the title -> 0. price 15 <= 20 -> 1.
    # R = (1 + 1 + 1) / (2 + 2 + 1) = 3/5 = 0.6, r_type 1.0 (same query).
    goal = _goal(attributes=("natural looking", "heat resistant"), goal_options=("black", "large"))
    product = _product(options=(("color", ("black",)), ("size", ("medium", "large"))))
    r = _reward(product, goal, {"color": "black", "size": "medium"})
    assert (r.num_attr_matches, r.num_option_matches, r.r_price) == (1, 1, True)
    assert r.reward == pytest.approx(0.6) and not r.success


def test_reward_wrong_price() -> None:
    # everything matches but 25 > 20: (1 + 1 + 0) / 3 = 2/3
    r = _reward(_product(price=25.0), _goal(), {"color": "black"})
    assert r.r_price is False
    assert r.reward == pytest.approx(2 / 3)


def test_reward_wrong_type_is_zero() -> None:
    # other query; target nouns [clip, hair, extensions] vs bought [usb, cable, charger]:
    # overlap 0 -> title_score 0 -> r_type 0.0 -> R = 0 although attributes/options/price match
    product = _product(title="USB Cable Charger", query="chargers")
    r = _reward(product, _goal(), {"color": "black"})
    assert r.title_score == 0.0 and r.r_type == 0.0 and r.reward == 0.0


def test_reward_type_factor_point_one() -> None:
    # target name: 11 nouns; bought title shares 1 ("lamp"): title_score 1/11 = 0.0909 < 0.1
    # -> r_type 0.1; the rest matches: (1+1+1)/3 * 0.1 = 0.1
    name = "lamp desk chair table sofa rug shelf bench stool mirror clock"
    assert len(approximate_nouns(name)) == 11
    goal = _goal(name=name, query="furniture")
    product = _product(title="Lamp Bulb Socket", query="lighting")
    r = _reward(product, goal, {"color": "black"})
    assert r.title_score == pytest.approx(1 / 11) and r.r_type == 0.1
    assert r.reward == pytest.approx(0.1)


def test_reward_type_half_and_full_by_title_overlap() -> None:
    # target nouns [pillow, cover, cushion, case, sofa]; query differs.
    goal = _goal(name="Pillow Cover Cushion Case Sofa", query="decorative pillows")
    # 1 shared noun: 1/5 = 0.2, not > 0.2 and not < 0.1 -> r_type 0.5 -> R = 1 * 0.5
    half = _reward(_product(title="Pillow Lamp Desk", query="lamps"), goal, {"color": "black"})
    assert half.title_score == pytest.approx(0.2) and half.r_type == 0.5
    assert half.reward == pytest.approx(0.5)
    # 2 shared nouns: 2/5 = 0.4 > 0.2 -> r_type 1.0 -> R = 1
    full = _reward(_product(title="Pillow Cover Lamp", query="lamps"), goal, {"color": "black"})
    assert full.title_score == pytest.approx(0.4) and full.r_type == 1.0 and full.reward == 1.0


def test_reward_option_colour_normalisation() -> None:
    # normalize_color("black forest") = normalize_color("black a34") = "black" -> match.
    # Raw strings would not match: token_set_ratio("black forest", "black a34") <= 85.
    assert token_set_ratio("black forest", "black a34") <= 85
    goal = _goal(goal_options=("black forest",))
    product = _product(options=(("color", ("black a34", "brown")),))
    r = _reward(product, goal, {"color": "black a34"})
    assert r.num_option_matches == 1 and r.reward == 1.0


def test_reward_size_options_need_an_exact_match() -> None:
    # goal "x-large", bought "xx-large". Under "size" (EXACT_MATCH_OPTS) -> no match ->
    # (1 + 0 + 1) / 3 = 2/3. Under "style" -> fuzzy: processed "x large" vs "xx large",
    # token_set: "large x" vs "large xx" = 2*7/(7+8) = 93.3 -> 93 > 85 -> match -> 1.0.
    goal = _goal(goal_options=("x-large",))
    assert token_set_ratio("x-large", "xx-large") == 93
    exact = _reward(_product(options=(("size", ("xx-large",)),)), goal, {"size": "xx-large"})
    assert exact.num_option_matches == 0 and exact.reward == pytest.approx(2 / 3)
    fuzzy = _reward(_product(options=(("style", ("xx-large",)),)), goal, {"style": "xx-large"})
    assert fuzzy.num_option_matches == 1 and fuzzy.reward == 1.0


def test_reward_attribute_substring_fallback() -> None:
    # "gluten free" is not among the product's attributes (token_set vs "natural looking" is
    # low) but is in its description -> counted: (1 + 1 + 1) / 3 = 1
    goal = _goal(attributes=("gluten free",))
    product = _product(description="A tasty snack. Gluten free and vegan.")
    assert _reward(product, goal, {"color": "black"}).reward == 1.0
    # without the description: (0 + 1 + 1) / 3 = 2/3
    assert _reward(_product(), goal, {"color": "black"}).reward == pytest.approx(2 / 3)


# -- tasks and data errors -------------------------------------------------------------------


def test_suite_and_tasks(tasks: dict[str, TaskSpec], data_root: Path) -> None:
    assert get_suite("webshop") is SUITE
    assert SUITE.splits == ("fixed", "fixed_train", "fixed_heldout")
    assert SUITE.default_max_steps == 15
    assert sorted(tasks, key=lambda t: int(t.split("_")[1])) == [f"fixed_{i}" for i in range(60)]
    t59 = tasks["fixed_59"]
    assert t59.env == "webshop" and t59.task_type == "snack pretzels" and t59.max_steps == 15
    assert t59.instruction == (
        "i am looking for non gmo sesame pretzels that come in a 12 pack, "
        "and price lower than 130.00 dollars"
    )
    assert all("[Search]" not in t.instruction for t in tasks.values())
    assert tasks["fixed_9"].payload["price_upper"] == 1_000_000.0  # no price clause
    assert SUITE.data_files(data_root)["fixed"][0].is_file()


def _write_goals(root: Path, content: str) -> Path:
    path = root / "webshop" / "goals_fixed_0_59.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    return path


GOOD_ROW = {
    "session_idx": "fixed_0",
    "task": "i need a red lamp, and price lower than 20.00 dollars \n[Search]\n",
    "key": {"asin": "B000LAMP01", "name": "Red Desk Lamp", "query": "lamps", "goal_options": []},
}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "missing"),
        ("{not json", "not valid JSON"),
        ("[]", "non-empty JSON list"),
        (json.dumps([{"session_idx": "fixed_0", "task": "x"}]), "lacks field(s) key"),
        (json.dumps([{**GOOD_ROW, "session_idx": "goal_0"}]), "not of the form fixed_<n>"),
        (
            json.dumps([{**GOOD_ROW, "key": {**GOOD_ROW["key"], "goal_options": "red"}}]),
            "goal_options must be a list",
        ),
        (json.dumps([GOOD_ROW, GOOD_ROW]), "duplicate session_idx"),
    ],
)
def test_data_errors_name_file_and_problem(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "webshop" / "goals_fixed_0_59.json"
    if content is not None:
        _write_goals(tmp_path, content)
    for load in (lambda: load_tasks(tmp_path, "fixed"), lambda: SUITE.make_env(tmp_path)):
        with pytest.raises(DataError) as err:
            load()
        assert err.value.path.name == path.name and problem in str(err.value)


def test_tiny_goals_file_builds_a_playable_catalogue(tmp_path: Path) -> None:
    _write_goals(tmp_path, json.dumps([GOOD_ROW]))
    env = SUITE.make_env(tmp_path)
    task = load_tasks(tmp_path, "fixed")[0]
    check_env(env, task)
    env.reset(task)
    assert env.step("search[red lamp]").info["admissible_actions"][1] == "click[b000lamp01]"


# -- the local engine on the 60 fixed goals --------------------------------------------------


def test_check_env(env: WebShopEnv, tasks: dict[str, TaskSpec]) -> None:
    for task_id in ("fixed_0", "fixed_59"):
        check_env(env, tasks[task_id])


def _oracle(env: WebShopEnv, task: TaskSpec, goal: Goal) -> float:
    """Search the goal's category query, page to the target, pick its options, buy."""
    env.reset(task)
    result = env.step(f"search[{goal.query}]")
    while f"click[{goal.asin.lower()}]" not in result.info["admissible_actions"]:
        assert "click[next >]" in result.info["admissible_actions"], "target not found"
        result = env.step("click[next >]")
    result = env.step(f"click[{goal.asin.lower()}]")
    assert result.info["page"] == "item"
    for option in goal.goal_options:
        result = env.step(f"click[{option}]")
        assert not result.info["invalid_action"], (task.task_id, option)
    result = env.step("click[buy now]")
    assert result.terminated and not result.truncated
    assert result.info["success"] == (result.reward == 1.0)
    return result.reward


def test_oracle_walk_solves_all_60(
    env: WebShopEnv, tasks: dict[str, TaskSpec], catalogue: Catalogue
) -> None:
    rewards = {tid: _oracle(env, task, catalogue.goal(tid)) for tid, task in tasks.items()}
    assert [tid for tid, r in rewards.items() if r != 1.0] == []


def _buy(env: WebShopEnv, task: TaskSpec, query: str, asin: str, options: list[str]):
    env.reset(task)
    env.step(f"search[{query}]")
    item = env.step(f"click[{asin.lower()}]")
    assert item.info["page"] == "item", item.observation
    for option in options:
        assert not env.step(f"click[{option}]").info["invalid_action"]
    return env.step("click[buy now]")


def _variant(catalogue: Catalogue, session: str, variant: str) -> Product:
    return next(p for p in catalogue.products if p.source_goal == session and p.variant == variant)


def test_distractor_purchases_get_hand_computed_partial_reward(
    env: WebShopEnv, tasks: dict[str, TaskSpec], catalogue: Catalogue
) -> None:
    # fixed_59: "non gmo sesame pretzels that come in a 12 pack, price < 130"; reconstructed
    # attributes ("pretzels", "12 pack"), options ("sesame", "7.2 ounce (pack of 12)"):
    # denominator 2 + 2 + 1 = 5.
    goal = catalogue.goal("fixed_59")
    task = tasks["fixed_59"]
    assert goal.attributes == ("pretzels", "12 pack")
    assert goal.goal_options == ("sesame", "7.2 ounce (pack of 12)")
    # (a) the over-price look-alike with the right options: attrs 2 + options 2 + price 0
    #     -> 4/5 = 0.8 (same query -> r_type 1)
    over = _variant(catalogue, "fixed_59", "over_price")
    assert over.price > goal.price_upper
    r = _buy(env, task, "snack pretzels", over.asin, list(goal.goal_options))
    assert r.reward == pytest.approx(0.8) and r.info["success"] is False
    # (b) the look-alike without the goal's options, bought with "graham" (style) and "a-8"
    #     (size): graham vs sesame/7.2 ounce fuzzy < 85 and not in the title; a-8 is not an
    #     exact size match nor in the title -> 0 options; attrs 2; price ok 1 -> 3/5 = 0.6
    wrong = _variant(catalogue, "fixed_59", "wrong_options")
    assert "sesame" not in wrong.option_groups()["style"]
    r = _buy(env, task, "snack pretzels", wrong.asin, ["graham", "a-8"])
    assert r.reward == pytest.approx(0.6)
    # (c) another goal's product (fixed_57's sea salt, query "seaweed snacks"): attributes 0
    #     ("pretzels"/"12 pack" vs "kosher sea salt": no fuzzy or substring hit), no options,
    #     price 17.28 <= 130 -> 1/5; type: other query, nouns of the target name [snack factory
    #     pretzel crisps sea salt cracked pepper ounce pack] share {sea, salt}: 2/10 = 0.2,
    #     not > 0.2 -> r_type 0.5 -> R = 0.2 * 0.5 = 0.1
    salt = catalogue.goal("fixed_57").asin
    r = _buy(env, task, "kosher sea salt", salt, [])
    assert r.info["reward_info"]["title_score"] == pytest.approx(0.2)
    assert r.reward == pytest.approx(0.1)


def test_pages_pagination_and_invalid_actions(
    env: WebShopEnv, tasks: dict[str, TaskSpec], catalogue: Catalogue
) -> None:
    obs, info = env.reset(tasks["fixed_59"])
    assert obs.startswith("WebShop [SEP] Instruction: [SEP] i am looking for non gmo")
    assert info["admissible_actions"] == ["search[<your query>]"]
    junk = env.step("buy the pretzels please")
    assert junk.info["invalid_action"] and "Invalid action" in junk.observation
    assert junk.observation.endswith(obs) and not junk.terminated
    assert env.step("click[search]").info["invalid_action"]
    page1 = env.step("search[salt pack women hair set cable speaker]")
    assert "Page 1 (Total results: " in page1.observation
    assert "click[next >]" in page1.info["admissible_actions"]
    assert "click[< prev]" not in page1.info["admissible_actions"]
    page2 = env.step("click[next >]")
    assert "Page 2 " in page2.observation and "click[< prev]" in page2.info["admissible_actions"]
    assert env.step("click[< prev]").observation == page1.observation
    assert env.step("search[more]").info["invalid_action"]  # no search box on results
    assert env.step("click[b0notthere]").info["invalid_action"]
    asin = catalogue.goal("fixed_59").asin.lower()
    env.step("click[back to search]")
    env.step("search[snack pretzels]")
    item = env.step(f"click[{asin.upper()}]")  # asins click case-insensitively
    assert "Price: $73.33" in item.observation and "Buy Now" in item.observation
    assert env.step("click[sesame]").info["selected_options"] == {"style": "sesame"}
    features = env.step("click[features]")
    assert features.observation.endswith("< Prev [SEP] pretzels [SEP] 12 pack")
    assert env.step("click[buy now]").info["invalid_action"]  # not on the features page
    assert env.step("click[< prev]").info["page"] == "item"
    done = env.step("click[buy now]")
    assert done.terminated and "Your score (min 0.0, max 1.0)" in done.observation
    with pytest.raises(EnvError):
        env.step("click[back to search]")


def test_step_before_reset_and_unknown_task(catalogue: Catalogue) -> None:
    env = WebShopEnv(catalogue=catalogue)
    with pytest.raises(EnvError):
        env.step("search[x]")
    bogus = TaskSpec(
        env="webshop", split="fixed", task_id="fixed_999", task_type="x", instruction="x"
    )
    with pytest.raises(EnvError):
        env.reset(bogus)


# -- prompter --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "action"),
    [
        ("Thought:\nI think so.\n\nAction:\nclick[Buy Now]", "click[buy now]"),
        ("Action: search[Red Shoes size 8]", "search[Red Shoes size 8]"),
        ("Action: click[a]\nObservation: ...\nAction: click[ B07XYZ ]", "click[b07xyz]"),
        ("I would click[B0ABC] and then click[buy now]", "click[b0abc]"),
        ("**Action:** click[< Prev]", "click[< prev]"),
        ("Action: I am not sure. search[lamp]", "search[lamp]"),
        ("hello there", "hello there"),
        ("", ""),
    ],
)
def test_extract_action(raw: str, action: str) -> None:
    assert extract_action(raw) == action
    assert SUITE.prompter.extract_action(raw, {}) == action


def test_prompter_messages(tasks: dict[str, TaskSpec]) -> None:
    task = tasks["fixed_0"]
    system = SUITE.prompter.system_prompt(task)
    assert "search[keywords]" in system and "click[buy now]" in system
    assert "Here is an example" in system
    reset_info = {"admissible_actions": ["search[<your query>]"]}
    obs = "WebShop [SEP] Instruction: [SEP] x [SEP] Search"
    first = SUITE.prompter.first_message(task, obs, reset_info)
    assert "WebShop [SEP] Instruction" in first and "search[<your query>]" in first
    feedback = SUITE.prompter.feedback_message("obs", {"admissible_actions": ["click[a]"]})
    assert "obs" in feedback and "click[a]" in feedback


# -- HTTP adapter against a stand-in server --------------------------------------------------

STAND_IN_PRODUCTS = {
    "B000TARGET": ("Red Desk Lamp with USB Port", "$19.99", {"color": ["red", "blue"]}),
    "B000OTHER1": ("Blue Floor Lamp", "$35.00", {}),
}


def _q(value: object) -> str:
    return quote(str(value), safe="")


class StandInWebShopServer(ThreadingHTTPServer):
    """A STAND-IN for the official WebShop Flask server (test double, not WebShop)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _StandInHandler)
        self.requests: list[tuple[str, str]] = []
        self.fail_next = 0  # answer 503 to this many next requests
        self.delay_s = 0.0  # sleep before answering
        self.instruction = "i need a red desk lamp, and price lower than 30.00 dollars"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out leaves a broken pipe behind; that is the point

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _StandInHandler(BaseHTTPRequestHandler):
    server: StandInWebShopServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _send(self, status: int, body: str = "", location: str | None = None) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if location:
            self.send_header("Location", location)
        self.end_headers()
        self.wfile.write(data)

    def _page(self, body: str) -> str:
        return (
            "<!DOCTYPE html><html><head><title>WebShop</title><style>.x{}</style></head><body>"
            f'<div id="instruction-text"><h4>Instruction: <br>{self.server.instruction}</h4>'
            f"</div>{body}</body></html>"
        )

    def _handle(self, method: str) -> None:
        server = self.server
        server.requests.append((method, self.path))
        if server.delay_s:
            time.sleep(server.delay_s)
        if server.fail_next > 0:
            server.fail_next -= 1
            self._send(503, "busy")
            return
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode("utf-8")) if length else {}
        parts = [unquote(p) for p in self.path.strip("/").split("/")]
        route, args = parts[0], parts[1:]
        if len(parts) == 1:
            sid = route
            if method == "POST" and "search_query" in form:
                keywords = form["search_query"][0].lower().split(" ")
                self._send(302, location=f"/search_results/{sid}/{_q(keywords)}/1")
                return
            self._send(200, self._search_page(sid))
        elif route == "search_results":
            self._send(200, self._results(args[0], ast.literal_eval(args[1]), int(args[2])))
        elif route == "item_page":
            sid, asin, keywords, page, options = args
            self._send(200, self._item(sid, asin, keywords, page, ast.literal_eval(options)))
        elif route == "done":
            self._send(200, self._done(args[1], ast.literal_eval(args[2])))
        else:
            self._send(404, "not found")

    def _search_page(self, sid: str) -> str:
        return self._page(
            f'<div id="logo"><h2>WebShop</h2></div><form method="post" action="/{sid}">'
            '<input id="search_input" type="text" name="search_query" required/>'
            '<button class="btn btn-success" type="submit"><i class="glyphicon"></i>Search'
            "</button></form>"
        )

    def _results(self, sid: str, keywords: list[str], page: int) -> str:
        hits = [
            asin
            for asin, (title, _, _) in STAND_IN_PRODUCTS.items()
            if any(k in title.lower() for k in keywords)
        ]
        items = "".join(
            f'<div class="grid-item"><h4><a class="product-link" href="/item_page/{sid}/{asin}/'
            f'{_q(keywords)}/{page}/{_q({})}">{asin}</a></h4><h4>{STAND_IN_PRODUCTS[asin][0]}'
            f"</h4><h5>{STAND_IN_PRODUCTS[asin][1]}</h5></div>"
            for asin in hits
        )
        return self._page(
            f"<h1>Results</h1><p>Page {page} (Total results: {len(hits)})</p>"
            f'<form method="post" action="/{sid}"><button type="submit" class="btn '
            f'btn-success">Back to Search</button></form><!-- Old Row Layout -->{items}'
        )

    def _item(self, sid: str, asin: str, keywords: str, page: str, options: dict) -> str:
        title, price, groups = STAND_IN_PRODUCTS[asin]
        radios = ""
        for name, values in groups.items():
            radios += f"<h4>{name}</h4>"
            for i, value in enumerate(values):
                url = (
                    f"/item_page/{sid}/{asin}/{_q(keywords)}/{page}/{_q({**options, name: value})}"
                )
                radios += (
                    f'<input type="radio" id="radio_{name}{i}" name="{name}" value="{value}" '
                    f'data-url="{url}"><label for="radio_{name}{i}">{value}</label>'
                )
        return self._page(
            f'<form method="post" action="/{sid}"><button type="submit" class="btn btn-success">'
            f"Back to Search</button></form>"
            f'<form method="post" action="/search_results/{sid}/{_q(keywords)}/{page}">'
            f'<button type="submit" class="btn btn-primary">&lt; Prev</button></form>'
            f"{radios}<h2>{title}</h2><h4>Price: {price}</h4>"
            f'<form method="post" action="/done/{sid}/{asin}/{_q(options)}">'
            f'<button type="submit" class="btn btn-lg purchase">Buy Now</button></form>'
        )

    def _done(self, asin: str, options: dict) -> str:
        # the stand-in's own scoring: target with the red option 1.0, other options 0.5
        reward = 0.0
        if asin == "B000TARGET":
            reward = 1.0 if options == {"color": "red"} else 0.5
        return self._page(
            '<h1>Thank you for shopping with us!</h1><div style="display:none">'
            f'<h4 id="asin">asin<pre>{asin}</pre></p><h4 id="goal-attrs">attrs<pre>secret</pre>'
            f'</h4></div><h3 id="reward">Your score (min 0.0, max 1.0)<pre>{reward}</pre></h3>'
            "<h4 hidden>Reward Details <div><pre>{'r_type': 1.0}</pre></div></h4>"
        )


@pytest.fixture()
def stand_in() -> Iterator[StandInWebShopServer]:
    server = StandInWebShopServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


HTTP_TASK = TaskSpec(
    env="webshop", split="fixed", task_id="fixed_7", task_type="lamps", instruction="red lamp"
)


def _http_env(server: StandInWebShopServer, **kw: Any) -> WebShopHttpEnv:
    kw.setdefault("timeout_s", 2.0)
    return WebShopHttpEnv(server.url, backoff_s=0.01, sleep=lambda _s: None, **kw)


def test_http_env_full_episode_against_stand_in(stand_in: StandInWebShopServer) -> None:
    env = _http_env(stand_in)
    obs, info = env.reset(HTTP_TASK)
    assert stand_in.requests[-1] == ("GET", "/fixed_7")
    assert obs == (
        "Instruction: [SEP] i need a red desk lamp, and price lower than 30.00 dollars "
        "[SEP] WebShop [SEP] Search"
    )
    assert info["admissible_actions"] == ["search[<your query>]"]
    results = env.step("search[Red Lamp]")
    assert [r[0] for r in stand_in.requests[-2:]] == ["POST", "GET"]  # form post, redirect
    assert "Page 1 (Total results: 2)" in results.observation
    assert "<!--" not in results.observation and "Old Row" not in results.observation
    assert results.info["admissible_actions"] == [
        "click[back to search]", "click[b000target]", "click[b000other1]"
    ]  # fmt: skip
    item = env.step("click[b000target]")
    assert "click[< prev]" in item.info["admissible_actions"]
    assert "click[red]" in item.info["admissible_actions"] and "Price: $19.99" in item.observation
    assert env.step("click[red]").info["invalid_action"] is False
    n_requests = len(stand_in.requests)
    assert env.step("click[green]").info["invalid_action"] is True
    assert len(stand_in.requests) == n_requests  # invalid actions never reach the server
    done = env.step("click[buy now]")
    assert done.terminated and done.reward == 1.0 and done.info["success"] is True
    assert "secret" not in done.observation and "r_type" not in done.observation
    assert done.observation.endswith("Your score (min 0.0, max 1.0) [SEP] 1.0")
    with pytest.raises(EnvError):
        env.step("click[buy now]")
    env.close()


def test_http_env_partial_reward_and_conformance(stand_in: StandInWebShopServer) -> None:
    env = _http_env(stand_in)
    check_env(env, HTTP_TASK)
    env.reset(HTTP_TASK)
    env.step("search[lamp]")
    env.step("click[b000target]")
    env.step("click[blue]")
    done = env.step("click[buy now]")
    assert done.reward == 0.5 and done.info["success"] is False
    env.reset(HTTP_TASK)
    assert env.step("click[back to search]").info["invalid_action"]  # not on the search page
    env.close()


def test_http_env_retries_server_errors(stand_in: StandInWebShopServer) -> None:
    stand_in.fail_next = 2
    env = _http_env(stand_in, attempts=3)
    obs, _ = env.reset(HTTP_TASK)
    assert "WebShop" in obs and len(stand_in.requests) == 3
    stand_in.fail_next = 10
    before = len(stand_in.requests)
    with pytest.raises(EnvError, match="after 3 attempt"):
        env.step("search[lamp]")
    assert len(stand_in.requests) - before == 3
    env.close()


def test_http_env_timeout_is_an_env_error(stand_in: StandInWebShopServer) -> None:
    stand_in.delay_s = 0.5
    env = _http_env(stand_in, attempts=2, timeout_s=0.1)
    started = time.monotonic()
    with pytest.raises(EnvError, match="ReadTimeout"):
        env.reset(HTTP_TASK)
    assert time.monotonic() - started < 2.0
    env.close()


def test_parse_page_handles_stray_end_tags() -> None:
    html = (
        '<div style="display:none"><h4 id="asin">asin<pre>B0</pre></p></div>'
        '<h3 id="reward">Your score (min 0.0, max 1.0)<pre>0.6666666666666666</pre></h3>'
    )
    page = parse_page(html, "http://x/")
    assert page.texts == ["Your score (min 0.0, max 1.0)", "0.6666666666666666"]
    assert page.reward == pytest.approx(2 / 3)


def test_the_train_and_heldout_splits_cut_the_fixed_goals_in_two(data_root: Path) -> None:
    """Goals 0-39 train, 40-59 held out (issue 20): disjoint, together every fixed goal, and an
    env plays a held-out goal like any other."""
    every = [t.task_id for t in load_tasks(data_root, "fixed")]
    train = [t.task_id for t in load_tasks(data_root, "fixed_train")]
    heldout = load_tasks(data_root, "fixed_heldout")
    assert train == every[:40] and [t.task_id for t in heldout] == every[40:]
    assert not set(train) & {t.task_id for t in heldout}
    assert all(t.split == "fixed_heldout" for t in heldout)
    env = WebShopEnv(data_root)
    observation, _ = env.reset(heldout[0])
    assert observation
    with pytest.raises(DataError, match="fixed_train, fixed_heldout"):
        load_tasks(data_root, "train")

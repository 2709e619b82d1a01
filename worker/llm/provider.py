"""What every provider shares: :class:`ProviderModel` answers the :class:`~worker.conversation.model.Model`
protocol's questions about the model (its provider, which locks state; its name; whether it reads pictures), and
:class:`HttpModel` adds the set-up of a provider over HTTP (base URL, headers, timeouts, retries, the circuit
breaker of its endpoint) and the call itself, so a provider over HTTP writes only its request body and its parse."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

import httpx

from worker.conversation.model import ModelRequest, ModelResponse
from worker.errors import ModelResponseError
from worker.llm.transport import RetryPolicy, breaker_for, count_model_error, post_json, shared_clients


class ProviderModel(ABC):
    """A model of one provider: ``PROVIDER`` names it (a state written with one is not replayed to another)."""

    PROVIDER: ClassVar[str]
    reads_images: bool = False

    def __init__(self, model: str) -> None:
        self._model = model

    @property
    def provider(self) -> str:
        return self.PROVIDER

    @property
    def model_name(self) -> str:
        return self._model

    @abstractmethod
    def complete(self, request: ModelRequest) -> ModelResponse:
        """One model call; raises only :class:`~worker.errors.ModelError` types."""


class HttpModel(ProviderModel):
    """A provider over HTTP: ``POST {base_url}{PATH}`` with :meth:`body`, the JSON answer read by :meth:`parse`.

    ``timeout`` is the read timeout and ``connect_timeout`` the connect one (seconds); ``retry`` (default: up to
    ``max_retries`` retries with backoff) and a circuit breaker shared by every model of the same endpoint
    (``breaker_threshold`` failures in a row open it for ``breaker_reset`` seconds). ``vision``: whether the model
    reads pictures (``None``: decided by its name)."""

    DEFAULT_BASE_URL: ClassVar[str]
    PATH: ClassVar[str]

    def __init__(self, *, model: str, base_url: str | None, headers: dict[str, str], timeout: float,
                 connect_timeout: float, max_retries: int, retry: RetryPolicy | None, breaker_threshold: int,
                 breaker_reset: float, vision: bool | None, reads_images_by_name: Callable[[str], bool]) -> None:
        super().__init__(model)
        self.reads_images = reads_images_by_name(model) if vision is None else vision
        self.base_url = (base_url or self.DEFAULT_BASE_URL).rstrip("/")
        self._headers = {"Content-Type": "application/json", **headers}
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self.retry = retry or RetryPolicy(max_retries=max_retries)
        self.breaker = breaker_for(f"{self.PROVIDER}:{self.base_url}", breaker_threshold, breaker_reset)

    @abstractmethod
    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The request body for ``request``."""

    @abstractmethod
    def parse(self, data: dict[str, Any]) -> ModelResponse:
        """The response the JSON answer ``data`` holds; raises :class:`~worker.errors.ModelResponseError`."""

    def _readable(self, request: ModelRequest) -> ModelRequest:
        """``request`` as this model can read it: a text model gets a photo as words (no pictures attached), never
        a 400."""
        if request.attachments and not self.reads_images:
            return replace(request, attachments={})
        return request

    def complete(self, request: ModelRequest) -> ModelResponse:
        data = post_json(provider=self.PROVIDER, clients=shared_clients(self.base_url),
                         path=f"{self.base_url}{self.PATH}", body=self.body(request), headers=self._headers,
                         timeout=self._timeout, retry=self.retry, breaker=self.breaker)
        try:
            return self.parse(data)
        except ModelResponseError as exc:
            count_model_error(self.PROVIDER, exc)
            raise

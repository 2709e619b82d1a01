"""The pure conversation core: messages, state codec, chat loop, events, compaction, token counting.

No Redis, Celery or HTTP in here; the model, tools and clock are injected. A custom compactor that
calls a model calls it through :func:`complete_observed`, so the round trip reaches ``Chat.observer``.
"""

from worker.conversation.chat import Chat, CompactionReport, EventResult, RoundTrip, SpliceResult, TurnResult
from worker.conversation.compaction import (
    Compactor,
    Compose,
    CompressToolExchanges,
    Hysteresis,
    KeepLastExchanges,
    Summarize,
    TokenBudget,
)
from worker.conversation.inspect import inspect_state
from worker.conversation.messages import MediaRef, Message, ToolCall
from worker.conversation.model import Attachment, Model, ModelRequest, ModelResponse, ToolSpec, Usage
from worker.conversation.observe import complete_observed
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.state import ConversationState, decode_state, encode_state, load_state
from worker.conversation.tokens import EstimateCounter, TiktokenCounter, TokenCounter
from worker.conversation.tools import Tool, ToolCallContext, current_call, turn_context
from worker.errors import CompactionFailed

__all__ = [
    "Attachment", "Chat", "CompactionFailed", "CompactionReport", "Compactor", "Compose", "CompressToolExchanges",
    "ConversationState", "EstimateCounter", "EventResult", "Hysteresis", "KeepLastExchanges", "MediaRef", "Message", "Model",
    "ModelRequest", "ModelResponse", "Reply", "RoundTrip", "ScriptedModel", "SpliceResult", "Summarize",
    "TiktokenCounter", "TokenBudget", "TokenCounter", "Tool", "ToolCall", "ToolCallContext", "ToolSpec", "TurnResult", "Usage",
    "complete_observed", "current_call", "decode_state", "encode_state", "inspect_state", "load_state", "turn_context",
]

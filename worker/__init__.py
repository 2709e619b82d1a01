"""Parley: a worker for stateful LLM conversations.

The library contract::

    from worker import Chat, Tool, KeepLastExchanges, TokenBudget, Summarize, CompressToolExchanges, Compose
    chat = Chat(model=model, compactor=Compose(CompressToolExchanges(), TokenBudget(8000)), tools=[...])
    reply, state = chat.chat_with_state(state, system="...", user="...")
    state = chat.append_to_state(state, "User has just visited Harrogate Theatre", pinned=False)
    state = chat.append_to_state(state, "The player's current target is Harrogate Theatre", key="target")
    reply, state = chat.respond_to_event(state, "The player has just tagged Harrogate Theatre", system="...")
    state = chat.compact(state)
    worker.inspect_state(state)

Models come from :func:`worker.llm.build_model`; producers use :class:`worker.client.ConversationClient`.
"""

from worker.conversation import (
    Chat,
    CompactionReport,
    Compactor,
    Compose,
    CompressToolExchanges,
    EstimateCounter,
    Hysteresis,
    KeepLastExchanges,
    Message,
    Model,
    Reply,
    ScriptedModel,
    Summarize,
    TiktokenCounter,
    TokenBudget,
    TokenCounter,
    Tool,
    TurnResult,
    inspect_state,
)

__all__ = [
    "Chat", "CompactionReport", "Compactor", "Compose", "CompressToolExchanges", "EstimateCounter", "Hysteresis",
    "KeepLastExchanges", "Message", "Model", "Reply", "ScriptedModel", "Summarize", "TiktokenCounter",
    "TokenBudget", "TokenCounter", "Tool", "TurnResult", "inspect_state",
]

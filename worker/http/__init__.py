"""Outbound HTTP plumbing shared by the providers, the channels and the tools: pooled clients, the lean
transport, ``Retry-After``, URLs made safe to show."""

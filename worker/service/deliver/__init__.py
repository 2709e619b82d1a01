"""Delivering replies: the deliverer sends a conversation's outbox in order under its delivery lease; a part\nleft in flight is settled; every send keeps the fleet's shared pace."""

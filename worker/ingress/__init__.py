"""WhatsApp webhook ingress: parsing and the ASGI app."""

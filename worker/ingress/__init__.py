"""WhatsApp webhook ingress: parsing and the ASGI app.

The Procfile runs the ingress as ``uvicorn ... --workers N``: N spawned processes behind one socket, and a scrape of
``GET /metrics`` reaches one of them. So that the counts add up across them, the first thing importing the ingress
does in such a worker is to give prometheus-client a directory shared with its siblings (its multiprocess mode),
which must happen before anything imports prometheus-client (see :mod:`worker.ingress.multiproc`).
"""

from worker.ingress.multiproc import share_metrics_with_sibling_workers

share_metrics_with_sibling_workers()

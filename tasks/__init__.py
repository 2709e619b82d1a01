"""Celery entry points. ``celery -A tasks worker`` finds :data:`app` here."""

from tasks.app import make_app

app = make_app()

__all__ = ["app"]

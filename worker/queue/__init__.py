"""The broker side: the Celery broker's configuration, wake-ups, kombu's Redis transport, Sentinel URLs."""

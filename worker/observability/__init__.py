"""What Parley says about itself: JSON logs and OpenTelemetry traces (metrics are :mod:`worker.metrics`)."""

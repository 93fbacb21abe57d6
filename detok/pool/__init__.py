"""The worker pool: DetokPool and its supervisor."""

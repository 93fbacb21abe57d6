"""`detok serve` and `detok frontend`: the process stack, the HTTP frontend processes and their
supervision. The only package that starts the stand-ins (scheduler_stub, reference_engine)."""

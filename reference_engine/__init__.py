"""A reference engine on CPU: a Llama-family GGUF model in numpy that drives the detok pool through
`SchedulerClient` as a real serving engine does (see docs/reference-engine.md)."""

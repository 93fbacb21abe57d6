"""The OpenAI-compatible HTTP API: request and response shapes, validation, routes, HTTP hardening,
and the frontend's link to the scheduler."""

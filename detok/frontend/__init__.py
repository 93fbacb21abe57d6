"""The OpenAI-compatible HTTP frontend and `detok serve` (FastAPI + uvicorn); see app.py and serve.py."""

"""HTTP API (FastAPI) under /v1."""

"""Inference service (docs/serve.md): load a `wanka export` directory, run a KV-cached model with
continuous batching, optional INT8 weights, and serve it over an OpenAI-compatible HTTP API.

    wanka serve --model runs/export --port 8000
    wanka loadtest --url http://127.0.0.1:8000 --concurrency 1,8,32 --requests 64
"""

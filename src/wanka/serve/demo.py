"""The serving end of `make demo`: serve an export, answer one completion over HTTP, shut down."""

from __future__ import annotations

import tempfile
import time

import httpx

from wanka.serve.fixtures import write_random_export
from wanka.serve.server import build_state, start_server


def run(export_dir=None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if export_dir is None:
            export_dir = write_random_export(tmp, "tiny", seed=0)
            print("serve: no export given; serving a random-weight `tiny` model (its text is noise)")
        state = build_state(export_dir, max_batch=8)
        with start_server(state) as server:
            body = {"model": state.model_id, "prompt": "3 nodes with 8 gpus", "max_tokens": 24, "temperature": 0.0}
            start = time.perf_counter()
            resp = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
            resp.raise_for_status()
            out = resp.json()
            took_s = time.perf_counter() - start
        print(f"serve: {state.model_id} from {export_dir} on {server.url} "
              f"({state.info['weight_bytes'] / 1e6:.1f} MB weights)")
        print(f"  POST /v1/completions {{\"prompt\": {body['prompt']!r}, \"max_tokens\": 24, greedy}}")
        print(f"  -> {out['choices'][0]['text']!r} (finish {out['choices'][0]['finish_reason']}, "
              f"{out['usage']['completion_tokens']} tokens in {took_s * 1e3:.0f} ms); server drained and stopped")


if __name__ == "__main__":
    run()

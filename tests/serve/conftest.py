"""Shared fixtures: export directories of seeded random `tiny` / `tiny-moe` models."""

from __future__ import annotations

import pytest

from wanka.serve.export import load_export
from wanka.serve.fixtures import write_random_export


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return write_random_export(tmp_path_factory.mktemp("tiny"), "tiny", seed=0)


@pytest.fixture(scope="session")
def moe_dir(tmp_path_factory):
    return write_random_export(tmp_path_factory.mktemp("tiny-moe"), "tiny-moe", seed=1)


@pytest.fixture(scope="session")
def long_dir(tmp_path_factory):
    """tiny with a 512-token context, for requests that must stay in flight for a while."""
    return write_random_export(tmp_path_factory.mktemp("tiny-long"), "tiny", seed=2, seq_len=512)


@pytest.fixture(scope="session")
def tiny_export(tiny_dir):
    return load_export(tiny_dir)


@pytest.fixture(scope="session")
def moe_export(moe_dir):
    return load_export(moe_dir)


API_KEY = "test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def server(tiny_dir):
    """The real server (uvicorn in a thread) on 127.0.0.1 and a free port, with an API key."""
    from wanka.serve.server import build_state, start_server

    with start_server(build_state(tiny_dir, max_batch=8, api_key=API_KEY)) as handle:
        yield handle


@pytest.fixture(scope="session")
def cycle_dir(tmp_path_factory):
    """tiny with weights that greedily repeat the bytes of "万卡" (3 bytes per character)."""
    from wanka.serve.fixtures import write_cycle_export

    return write_cycle_export(tmp_path_factory.mktemp("tiny-cycle"), "万卡")


@pytest.fixture(scope="module")
def cycle_server(cycle_dir):
    from wanka.serve.server import build_state, start_server

    with start_server(build_state(cycle_dir, max_batch=8, api_key=API_KEY)) as handle:
        yield handle


@pytest.fixture(scope="session")
def run_alone():
    """run_alone(export, prompt_ids, params) -> the finished Request, run by a fresh engine on its own."""
    from wanka.serve.engine import Engine, EngineConfig, Request
    from wanka.serve.model import InferenceModel

    def run(export, prompt_ids, params):
        engine = Engine(InferenceModel.from_tensors(export.spec, export.tensors), export.tokenizer,
                        EngineConfig(max_batch=1))
        req = engine.add_request(Request(list(prompt_ids), params))
        while engine.has_work():
            engine.step()
        return req

    return run

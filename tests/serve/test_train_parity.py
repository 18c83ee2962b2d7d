"""The two sides of the export contract agree: a model written by the training runtime's
`Transformer` gives the same logits in the serving engine (skipped where the train layer is absent)."""

from __future__ import annotations

import pytest
import torch

from wanka.serve.export import load_export, params_sha256
from wanka.serve.fixtures import write_export
from wanka.serve.model import BatchLayout, InferenceModel
from wanka.workload import load_model

train_model = pytest.importorskip("wanka.model.decoder")


@pytest.mark.parametrize("preset", ["tiny", "tiny-moe"])
def test_training_model_and_serving_model_agree(preset, tmp_path):
    spec = load_model(preset)
    torch.manual_seed(0)
    trained = train_model.Transformer(spec).eval()
    with torch.no_grad():
        for p in trained.parameters():  # move off the init values so every tensor matters
            p.add_(0.02 * torch.randn_like(p))
    params = {k: v.detach().float() for k, v in trained.state_dict().items()}
    export = load_export(write_export(tmp_path, spec, params, step=3))
    assert export.params_sha256 == params_sha256(params)
    tokens = torch.randint(0, 258, (1, 50), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = trained(tokens)[0]
    served = InferenceModel.from_tensors(export.spec, export.tensors)
    cache = served.new_cache(4, 16)
    got = served(tokens[0], BatchLayout([cache.table(50)], [0], [50]), cache)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)

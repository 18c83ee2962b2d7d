import pytest

from wanka.data.corpus import write_corpus
from wanka.data.pipeline import prepare


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    """Prepared shards of the shipped corpus (a smaller generated part keeps it fast)."""
    root = tmp_path_factory.mktemp("corpus")
    prepare(write_corpus(root / "text", n_sentences=4000), root / "shards")
    return root / "shards"


@pytest.fixture(scope="module")
def one_step_ckpt(corpus_dir, tmp_path_factory):
    """A committed step_00000001 checkpoint of the tiny model from one real in-process step."""
    from wanka.train.config import TrainConfig
    from wanka.train.trainer import Trainer

    root = tmp_path_factory.mktemp("ck")
    cfg = TrainConfig(model="tiny", layout="precision=fp32,gbs=2,mbs=1", seq_len=32, ckpt_every=1, steps=1,
                      ckpt=str(root))
    Trainer(cfg, 0, 1, corpus_dir).fit()
    return root

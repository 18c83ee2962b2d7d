import pytest

from wanka.data.corpus import write_corpus
from wanka.data.pipeline import prepare


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    """Prepared shards of the shipped corpus (a smaller generated part keeps it fast)."""
    root = tmp_path_factory.mktemp("corpus")
    prepare(write_corpus(root / "text", n_sentences=4000), root / "shards")
    return root / "shards"

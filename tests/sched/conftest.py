from pathlib import Path

import pytest

from wanka.cluster import load_cluster

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def tiny4():
    """64 GPUs: 4 leaves x 4 nodes x 4 GPUs, two leaves per spine block, 2:1 oversubscribed leaves."""
    return load_cluster(str(DATA / "tiny4.yaml"))

import torch

from wanka.data.sampler import Sampler, SamplerState, microbatches
from wanka.data.pipeline import prepare
from wanka.data.shards import TokenShards


def _shards(tmp_path):
    (tmp_path / "t.txt").write_text("".join(chr(97 + i % 26) for i in range(5000)))
    prepare([tmp_path / "t.txt"], tmp_path / "d")
    return TokenShards(tmp_path / "d")


def test_dp_ranks_partition_the_global_batch(tmp_path):
    data = _shards(tmp_path)
    whole = Sampler(data, 16, gbs=8, seed=3)
    parts = [Sampler(data, 16, gbs=8, dp_rank=r, dp=4, seed=3) for r in range(4)]
    for index in (0, 7, 40):  # 40 is past the first epoch (312 windows / 8)
        x, y = whole.batch(index)
        xs = torch.cat([p.batch(index)[0] for p in parts])
        assert torch.equal(x, xs)
        assert torch.equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one


def test_resume_and_skip_are_exact(tmp_path):
    data = _shards(tmp_path)
    a = Sampler(data, 16, gbs=4, seed=0)
    seq = [a.next()[0] for _ in range(6)]
    assert seq == list(range(6))
    b = Sampler(data, 16, gbs=4, seed=0)
    b.state = SamplerState.from_dict({"next_batch": 3, "skip": [4]})
    index, x, _ = b.next()
    assert index == 3 and torch.equal(x, a.batch(3)[0])
    assert b.next()[0] == 5  # batch 4 skipped
    assert Sampler(data, 16, gbs=4, seed=1).batch(0)[0].tolist() != a.batch(0)[0].tolist()


def test_microbatches_split_rows():
    x = torch.arange(12).view(6, 2)
    parts = microbatches(x, x + 1, 2)
    assert len(parts) == 3 and torch.equal(parts[1][0], x[2:4])

"""Scale-up domains tile the cluster: every layer sees whole domains, or the spec is refused."""

import pytest

from wanka.cluster import load_cluster
from wanka.errors import SpecError


def _spec(tmp_path, gpus: int, domain: int):
    p = tmp_path / "c.yaml"
    p.write_text(f"name: c\ngpu: h100-sxm\ngpus: {gpus}\nscale_up: {{domain: {domain}}}\n")
    return str(p)


def test_domain_that_does_not_divide_the_gpus_is_rejected(tmp_path):
    # a partial last domain would pass `cluster show` and `plan` but not the scheduler's nesting of
    # scale-up groups inside leaves, so the cluster loader refuses it for every layer at once
    with pytest.raises(SpecError) as exc:
        load_cluster(_spec(tmp_path, 1024, 24))
    assert exc.value.field == "scale_up.domain"


# 2048 > 1024: a slice of one domain (like 8 GPUs of a 64-GPU supernode), not a partial tiling
@pytest.mark.parametrize("gpus, domain", [(1024, 16), (1024, 1024), (1024, 2048)])
def test_domains_that_tile_or_cover_the_cluster_load(tmp_path, gpus, domain):
    c = load_cluster(_spec(tmp_path, gpus, domain))
    assert c.levels[0].span_gpus == min(domain, gpus)



def test_bare_group_command_is_one_stderr_line(capsys):
    # a usage error goes to stderr as one line, so a script that reads stdout sees nothing
    from wanka.cli import main
    assert main(["cluster"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and "list | show" in out.err

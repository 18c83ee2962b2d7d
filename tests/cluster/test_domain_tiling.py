"""Scale-up domains tile the cluster: every layer sees whole domains, or the spec is refused."""

import pytest

from wanka.cluster import load_cluster


def _spec(tmp_path, gpus: int, domain: int):
    p = tmp_path / "c.yaml"
    p.write_text(f"name: c\ngpu: h100-sxm\ngpus: {gpus}\nscale_up: {{domain: {domain}}}\n")
    return str(p)


@pytest.mark.parametrize("gpus, domain, gpu, per_node", [(1024, 24, "h100-sxm", 8), (256, 72, "gb200", 4)])
def test_a_partial_last_domain_is_priced_and_scheduled(tmp_path, gpus, domain, gpu, per_node):
    # before (Dec 2026): "scale_up.domain: expected a divisor of the GPUs per campus" -- a 256-GPU job
    # on GB200 NVL72 racks was refused; now the last domain is partial and the levels above nest
    from wanka.comm import group_for_stride
    from wanka.sched.state import FreeGPUs

    p = tmp_path / "c.yaml"
    p.write_text(f"name: c\ngpu: {gpu}\ngpus: {gpus}\ngpus_per_node: {per_node}\nscale_up: {{domain: {domain}}}\n")
    c = load_cluster(str(p))
    assert c.levels[0].span_gpus == domain and c.levels[1].span_gpus % domain == 0
    free = FreeGPUs(c)  # the scheduler's node groups nest (raised before the leaves were rounded up)
    assert free.total_avail == gpus
    inside, across = group_for_stride(c, per_node, 1), group_for_stride(c, gpus // per_node, per_node)
    assert inside.fanout[0] == per_node and across.fanout[0] < gpus // per_node


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

"""RecoveryPolicy.respond: the one recovery decision every twin applies (reliability/recovery.py)."""

import pytest

from wanka.reliability.failures import load_failure_model
from wanka.reliability.recovery import (DROP_REPLICAS, REPLACE_NODES, RESTART_IN_PLACE, SHRINK, Failure,
                                        RecoveryPolicy, failure_of)

NODE = Failure(node_lost=True)
CRASH = Failure(node_lost=False)


def test_a_crash_restarts_in_place_after_detection_and_rolls_back():
    r = RecoveryPolicy(detect_s=60, restart_s=300).respond(CRASH, replicas_left=7)
    assert (r.action, r.detect_s, r.restart_s, r.rolls_back) == (RESTART_IN_PLACE, 60, 300, True)


@pytest.mark.parametrize(("failure", "detect_s"), [
    (Failure(node_lost=False, detect="hang"), 600.0),  # only the NCCL watchdog sees a hang
    (Failure(node_lost=True, detect="injected"), 0.0),  # a kill loop's kill: the quorum change sees it
    (Failure(node_lost=True, manual=True), 60.0 + 7200.0),  # manual diagnosis on top
])
def test_detection_time_by_class(failure, detect_s):
    assert RecoveryPolicy(detect_s=60, hang_detect_s=600, manual_s=7200).respond(failure, 3).detect_s == detect_s


def test_node_loss_costs_requeue_for_full_restart_and_swap_plus_restart_for_hot_spare():
    full = RecoveryPolicy(kind="full_restart", restart_s=300, requeue_s=768, swap_s=60).respond(NODE, 3)
    hot = RecoveryPolicy(kind="hot_spare", restart_s=300, requeue_s=768, swap_s=60).respond(NODE, 3)
    assert (full.action, full.restart_s) == (REPLACE_NODES, 768)  # ByteRobust Table 7 requeue at 16k GPUs [P]
    assert (hot.action, hot.restart_s) == (REPLACE_NODES, 360)


def test_torchft_drops_replicas_without_rollback_unless_job_scoped_or_too_few_left():
    ft = RecoveryPolicy(kind="torchft", min_dp=2)
    drop = ft.respond(NODE, replicas_left=5)
    assert drop.action == DROP_REPLICAS and not drop.rolls_back
    assert ft.respond(Failure(node_lost=True, job_scoped=True), 5).action == REPLACE_NODES
    assert ft.respond(NODE, replicas_left=1).action == REPLACE_NODES  # below min_dp: a whole restart
    assert ft.respond(CRASH, 5).action == RESTART_IN_PLACE


def test_elastic_shrinks_only_without_a_ready_spare():
    el = RecoveryPolicy(kind="elastic", restart_s=300)
    assert el.respond(NODE, 3, spare_ready=False).action == SHRINK
    assert el.respond(NODE, 3, spare_ready=True).action == REPLACE_NODES


def test_failure_of_reads_the_taxonomy():
    causes = {c.name: c for c in load_failure_model("byterobust-mix").causes}
    hang = failure_of(causes["job_hang_infra"])
    assert hang.node_lost and hang.detect == "hang" and not hang.job_scoped
    assert failure_of(causes["job_hang_user"]).job_scoped
    assert failure_of(causes["job_hang_user"], manual=True).node_lost  # a manual case always needs a node

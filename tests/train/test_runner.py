"""`wanka train`'s torchrun supervisor: a failed run names the workers' own exception, and a
SIGTERM to `wanka train` (kill, scancel) stops torchrun and its workers instead of orphaning them."""

import os
import signal
import subprocess
import sys

import pytest

from wanka.train import runner
from wanka.train.config import TrainConfig
from wanka.train.runner import TrainingFailed


def test_training_failure_names_the_worker_exception(tmp_path, monkeypatch):
    log = "\n".join(["[rank0]: Traceback (most recent call last):", "[rank0]: IndexError: index out of range in self",
                     "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "  x"])

    class FakeProc:
        def __init__(self, cmd, stdout, **kw):
            stdout.write(log)

        def wait(self):
            return 1

    monkeypatch.setattr(subprocess, "Popen", FakeProc)
    with pytest.raises(TrainingFailed, match="IndexError: index out of range"):
        runner.run_local(TrainConfig(model="tiny", ckpt=str(tmp_path)), tmp_path, 1, 0)


class SignalledWhileWaiting:
    """A stand-in for torchrun (a child that waits for a signal). The first `wait()` is the moment
    `run_local` blocks on torchrun with its SIGTERM handler installed: the test's SIGTERM is sent
    exactly then, as `kill` would send it, with no timer."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.pid, self.signalled = proc, proc.pid, False

    def wait(self, timeout=None):
        if not self.signalled:
            self.signalled = True
            os.kill(os.getpid(), signal.SIGTERM)
        return self.proc.wait(timeout)

    def poll(self):
        return self.proc.poll()

    def terminate(self):
        self.proc.terminate()


def test_sigterm_to_wanka_train_stops_torchrun(tmp_path, monkeypatch):
    started = []
    real_popen = subprocess.Popen

    def popen(cmd, **kw):
        child = SignalledWhileWaiting(real_popen([sys.executable, "-c", "import signal; signal.pause()"], **kw))
        started.append(child)
        return child

    monkeypatch.setattr(subprocess, "Popen", popen)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        runner.run_local(TrainConfig(model="tiny", ckpt=str(tmp_path)), tmp_path, 1, 0)
    assert started and started[0].signalled
    assert started[0].poll() is not None  # the stand-in for torchrun was stopped (and reaped)
    assert signal.getsignal(signal.SIGTERM) == before  # our handler is only installed while torchrun runs

"""The operations plane (docs/control.md): a service that runs, watches and recovers real training jobs.

    wanka control up --db sqlite:///runs/control/state.db --port 8470
    wanka control submit --model tiny --layout dp=2 --steps 20 --ckpt runs/ctl/a
    wanka control list | show JOB | logs JOB | cancel JOB
"""

"""Shared test helpers."""

from __future__ import annotations

import json

import pytest

from wanka.cli import main


@pytest.fixture
def run_cli(capsys):
    """Run `wanka ARGS...` in-process; returns (exit_code, stdout, stderr)."""

    def _run(*args: str):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse exits for usage errors and --version
            code = exc.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


@pytest.fixture
def run_json(run_cli):
    """Run a command with --json and parse its one JSON document."""

    def _run(*args: str):
        code, out, err = run_cli(*args, "--json")
        assert code == 0, err
        return json.loads(out)

    return _run

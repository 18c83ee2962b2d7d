"""The one `wanka` entry point. Each layer adds its subcommands through `register(subparsers)`.

    wanka --version
    wanka cluster list
    wanka cluster show wanka-10k --json

Every command takes --json and then prints exactly one JSON document. User errors end with exit
code 2 and one line on stderr naming what to fix.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from wanka import __version__
from wanka.errors import SpecError
from wanka.output import emit


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print exactly one JSON document on stdout")


def needs_subcommand(choices: str, example: str):
    """A handler for a bare group command (`wanka cluster`): a usage error, exit 2, one stderr line."""

    def handler(args) -> None:
        raise SpecError("command", f"a subcommand: {choices} (e.g. `{example}`; -h for help)")

    return handler


def positive_int_list(text: str, flag: str, example: str = "1,8,32") -> list[int]:
    """Parse a comma-separated list of positive integers given to `flag` (e.g. --gpus 1024,2048)."""
    try:
        values = [int(x) for x in (text or "").split(",") if x.strip()]
    except ValueError:
        raise SpecError(flag, f"comma-separated positive integers like {example}", text) from None
    if not values or min(values) < 1:
        raise SpecError(flag, f"comma-separated positive integers like {example}", text)
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="wanka", description="software stack of a 10,000-GPU AI cluster")
    parser.add_argument("--version", action="version", version=f"wanka {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    # Each layer adds its subcommands; the layer modules import this one, hence the late import.
    from wanka.cluster import cli as cluster_cli  # noqa: PLC0415
    from wanka.control import cli as control_cli  # noqa: PLC0415
    from wanka.plan import cli as plan_cli  # noqa: PLC0415
    from wanka.sched import cli as sched_cli  # noqa: PLC0415
    from wanka.serve import cli as serve_cli  # noqa: PLC0415
    from wanka.sim import cli as sim_cli  # noqa: PLC0415
    from wanka.train import cli as train_cli  # noqa: PLC0415

    for layer in (cluster_cli, plan_cli, sched_cli, sim_cli, train_cli, serve_cli, control_cli):
        layer.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # An argument with a NUL character cannot come from a shell (execve ends strings at NUL), only from
    # a caller in Python, and every path operation raises ValueError on it: refuse it here, once.
    for arg in sys.argv[1:] if argv is None else argv:
        if "\x00" in arg:
            sys.stderr.write(f"wanka: error: command line: expected arguments without NUL characters, got {arg!r}\n")
            return 2
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        result: Any = args.func(args)
    except SpecError as exc:
        sys.stderr.write(f"wanka: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    if result is None:
        return 0
    if isinstance(result, int):
        return result
    payload, render = result
    emit(payload, render, getattr(args, "json", False))
    # a command that ran but whose check failed (e.g. plan validate --fail-above) says so in its payload
    return int(payload.get("exit_code", 0)) if isinstance(payload, dict) else 0


if __name__ == "__main__":
    raise SystemExit(main())

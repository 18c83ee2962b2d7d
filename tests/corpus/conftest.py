"""The bad-input corpus: every case is one command line (plus the files it names) that must be refused
the way every wanka command refuses bad input (README, "Contracts"):

    exit code 2; exactly one line on stderr, naming the field; no traceback; nothing written.

Cases are tables of `Case` rows; `refused` runs one in-process through `wanka.cli.main` inside an
empty working directory and checks all four properties. "Nothing written" compares the tree under
the test's tmp_path (the case's own files, outputs and working directory) before and after.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from wanka.cli import main

DIR = object()  # a file table value that makes a directory instead of a file

# billion laughs: 9 levels of 9 references; expanded, 9**9 (387 million) strings
YAML_BOMB = "\n".join(['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] + [
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]) + "\n"


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]  # "{d}" stands for the case's directory
    field: str             # the stderr line must contain this (the field or flag it names)
    files: dict = field(default_factory=dict)  # relative name -> str | bytes | DIR

    def param(self):
        return pytest.param(self, id=self.id)


def case(id: str, argv: str | list[str], field: str, **files) -> Case:
    args = tuple(argv.split()) if isinstance(argv, str) else tuple(argv)
    return Case(id, args, field, {k.replace("__", "."): v for k, v in files.items()})


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with (size, mtime_ns); directories with size -1."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (-1 if p.is_dir() else st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def refused(tmp_path, monkeypatch, capsys):
    """Run a Case and assert it is refused cleanly; returns the stderr line."""

    def _run(c: Case, d: Path | None = None) -> str:
        d = d or tmp_path / "case"
        d.mkdir(parents=True, exist_ok=True)
        for name, content in c.files.items():
            p = d / name
            p.parent.mkdir(parents=True, exist_ok=True)
            if content is DIR:
                p.mkdir()
            elif isinstance(content, bytes):
                p.write_bytes(content)
            else:
                p.write_text(content)
        cwd = tmp_path / "cwd"
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        before = tree(tmp_path)
        argv = [a.replace("{d}", str(d)) for a in c.argv]
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse usage errors
            code = exc.code
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err, err
        assert code == 2, f"exit {code}; stderr {err!r}; stdout {out[:300]!r}"
        assert err.endswith("\n") and err.count("\n") == 1, f"expected one stderr line, got {err!r}"
        assert c.field.lower() in err.lower(), f"{c.field!r} not named in {err!r}"
        assert out == "", f"stdout should be empty on a refusal, got {out[:300]!r}"
        assert tree(tmp_path) == before, "a refused command left files behind or changed them"
        return err

    return _run

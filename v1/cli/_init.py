"""`v1 init NAME`: scaffold an environment package whose own test passes unchanged.

Writes ``NAME/`` (in ``--dir``, default the current directory) with the loader and
config class (``__init__.py``), a config file (``NAME.toml``), a test
(``test_NAME.py``) and a README. Bad input (a name that is not a lower-case Python
identifier, or one that would import another module; an existing folder) is one line
on stderr and exit status 2, with nothing written.
"""

from __future__ import annotations

import argparse
import importlib.util
import keyword
import re
import sys
from pathlib import Path
from typing import Any

from v1.cli._standalone import run_command

SCAFFOLD = Path(__file__).parent / "scaffold"
FILES = {
    "__init__.py": "__init__.py.tmpl",
    "{name}.toml": "env.toml.tmpl",
    "test_{name}.py": "test_env.py.tmpl",
    "README.md": "README.md.tmpl",
}
NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "init",
        help="scaffold a new environment package (loader, config class, TOML, test, README)",
        description="Create NAME/ with a working environment: its test passes as is and `v1 eval ./NAME` runs it.",
    )
    parser.add_argument("name", metavar="NAME", help="the package name: lower case letters, digits and _ (e.g. my_env)")
    parser.add_argument("--dir", default=".", help="where to create NAME/ (default: the current directory)")
    parser.set_defaults(run=run)


def check_name(name: str) -> None:
    """Raise `ValueError` (one line) when `name` can't be a new environment package."""
    if not NAME.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a valid name: use lower-case letters, digits and _, starting with a letter (e.g. my_env)"
        )
    if keyword.iskeyword(name):
        raise ValueError(f"{name!r} is a Python keyword; pick another name")
    if name in sys.stdlib_module_names or importlib.util.find_spec(name) is not None:
        raise ValueError(
            f"{name!r} is already an importable module here; pick another name, or `import {name}` would find that one"
        )


def class_name(name: str) -> str:
    """``my_env`` -> ``MyEnv``."""
    return "".join(part.capitalize() for part in name.split("_") if part) or "Env"


def scaffold(name: str, parent: Path) -> list[Path]:
    """Write the package `parent/name/` and return the files written.

    Raises:
        ValueError: a bad name, or the folder already exists.
    """
    target = parent / name
    if NAME.fullmatch(name) and target.exists():
        raise ValueError(f"{target} already exists; pick another name or remove it")
    check_name(name)
    if not parent.is_dir():
        raise ValueError(f"--dir {parent}: no such directory")
    target.mkdir()
    written = []
    for destination, template in FILES.items():
        text = (SCAFFOLD / template).read_text(encoding="utf-8")
        path = target / destination.format(name=name)
        path.write_text(text.replace("{{name}}", name).replace("{{Class}}", class_name(name)), encoding="utf-8")
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    try:
        written = scaffold(args.name, Path(args.dir))
    except ValueError as exc:
        print(f"v1 init: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"v1 init: error: cannot write {args.name}/: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"created {written[0].parent}/ with {', '.join(path.name for path in written)}")
    print(f"next: python -m pytest {written[0].parent}    then: v1 eval {written[1]} -m MODEL -b BASE_URL")
    return 0


__all__ = ["check_name", "class_name", "scaffold"]

if __name__ == "__main__":
    sys.exit(run_command(sys.modules[__name__]))

"""The ``dsv`` command installed with the package: the Rust command line (the same code as the
``dsv`` binary built by ``cargo install``), compiled into ``dsv._dsv`` and run in this
process. ``python -m dsv`` runs it too."""

from __future__ import annotations

import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> None:
    """Runs ``dsv ARGS...`` and exits with its status (the table in docs/cli.md)."""
    from . import _dsv

    args = sys.argv[1:] if argv is None else list(argv)
    # Flush what Python buffered: the command writes to the same descriptors directly.
    sys.stdout.flush()
    sys.stderr.flush()
    code = _dsv.run_cli(["dsv", *args])
    sys.exit(code)

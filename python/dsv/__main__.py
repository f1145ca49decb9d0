"""``python -m dsv ARGS...``: the ``dsv`` command (see ``dsv._cli``)."""

from ._cli import main

main()

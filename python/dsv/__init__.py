"""dsv: read versions of datasets from Python, without a checkout.

A thin front end over the dsv library (the same code the ``dsv`` CLI runs)::

    import dsv
    store = dsv.Store()                       # the nearest .dsv, as the CLI finds it
    v = store.version("mnist@v3")             # any revision the CLI takes
    v.id, len(v), v.size_bytes, v.files(include="train/**")
    with v.open("train/0/1.png") as f:        # a binary file object
        data = f.read()
    v.read("labels.csv", start=0, end=1024)   # bytes [start, end)
    v.shard(rank, world_size)                 # the files of `--shard RANK/WORLD_SIZE`

Data that lives only on a remote (a store made by ``dsv.clone``) is fetched when a file is
first opened and kept in the store, so every process on the machine downloads it once.
Reads release the GIL. Store and Version objects survive ``fork()`` (each process opens its
own engine when it first reads) and pickle (as the store's path and the version's id), so a
PyTorch ``DataLoader`` with worker processes works with either start method.

Installing the package also installs the ``dsv`` command (the Rust command line, from the
same build; ``python -m dsv`` runs it too). ``dsv.torch`` has PyTorch datasets over a version, ``dsv.fsspec`` an fsspec file system
(protocol ``dsv``: pandas, pyarrow, Dask, DuckDB, Hugging Face datasets read through it),
``dsv.ray`` a Ray Data source and ``dsv.spark`` a Spark 4 Python data source. Errors are :class:`dsv.Error` subclasses (``dsv.errors``).
"""

from __future__ import annotations

from . import errors
from ._dsv import Store, Version, __build__, __version__, clone, open_remote
from ._file import File
from .errors import *  # noqa: F401,F403  (the exception classes, also as dsv.NAME)
from .errors import __all__ as _errors_all

import os as _os

from . import _dsv

# A fork (a DataLoader worker) waits until no fetch of this process holds a lock file, so
# the child never inherits one.
_os.register_at_fork(
    before=_dsv._before_fork,
    after_in_parent=_dsv._after_fork,
    after_in_child=_dsv._after_fork,
)

__all__ = ["Store", "Version", "File", "clone", "open_remote", "errors", "__version__", "__build__", *_errors_all]

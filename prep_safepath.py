"""Imported first by prep's forkserver on Python 3.10, where PYTHONSAFEPATH does not exist.

CPython before 3.12.8 starts the forkserver as `python -c`, which puts the working directory ('')
first on sys.path and ignores the parent's path (gh-117378). prep hands the parent's path over in
PYTHONPATH (pipeline/pool.py, the working directory as an absolute path where the parent had it);
3.11+ drops the '' with PYTHONSAFEPATH. Here this module drops it, before any of prep's own modules
are imported, so a project's `pipeline/` (or `numpy.py`) in the working directory cannot replace
them. A top-level module with an unlikely name: anything inside `pipeline` could itself be shadowed.
"""

import sys

sys.path[:] = [p for p in sys.path if p != ""]

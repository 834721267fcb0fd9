"""Imported first in the forkserver (and set by the `prep` launcher before numpy loads): one OpenBLAS
thread. numpy's OpenBLAS otherwise starts a thread per extra core at import, and those threads spin
for a while waiting for work prep never gives them: `import numpy; sleep(2)` takes 0.18 s of CPU
instead of 0.09 s on the 2-core VM, and `perf` showed them at ~1% of a 460 MB run's CPU in each of
the parent and the forkserver, during start-up, where those two share the cores. A value the user
set wins."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

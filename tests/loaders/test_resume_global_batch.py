"""windows and packed: a state is resumed at its own global batch (batch_size x world_size) only; under
another one it resumed silently, the same samples cut into other batches from there on."""

import numpy as np
import pytest

from loaders import MemmapLoader
from pipeline.errors import PrepError

from .loaderkit import collect

T = 64


@pytest.mark.parametrize("mode,kw", [("windows", {}), ("windows", {"doc_aligned": True}), ("packed", {}),
                                     ("packed", {"packing": "concat"})])
def test_another_global_batch_is_refused_naming_the_batch_size_that_resumes_it(dataset, mode, kw):
    args = dict(seq_len=T, mode=mode, seed=4, cache_dir=False, **kw)
    two = [MemmapLoader(dataset, batch_size=4, rank=r, world_size=2, **args) for r in range(2)]
    for loader in two:
        collect(loader, limit=3)
    state = two[0].state_dict()
    bigger = MemmapLoader(dataset, batch_size=6, rank=0, world_size=2, **args)
    with pytest.raises(PrepError) as e:
        bigger.load_state_dict(state)
    message = str(e.value)
    assert ("global batch 8 (this loader: 12 = batch_size 6 x world_size 2; batches are cut per global batch: "
            "pass batch_size=4 to resume it on 2 ranks)") in message and "\n" not in message
    three = MemmapLoader(dataset, batch_size=3, rank=0, world_size=3, **args)
    with pytest.raises(PrepError, match=r"global batch 8 on world_size 2 \(this loader: 9 = batch_size 3 x "
                                        r"world_size 3; batches are cut per global batch\)"):
        three.load_state_dict(state)
    # the batch_size it names resumes exactly: four ranks of 2 rows are the one-rank batch of 8
    four = [MemmapLoader(dataset, batch_size=2, rank=r, world_size=4, **args).load_state_dict(state) for r in range(4)]
    want = collect(MemmapLoader(dataset, batch_size=8, **args))[3:6]
    got = [collect(loader, limit=3) for loader in four]
    for step in range(3):
        for key in ("input_ids", "labels"):
            assert np.array_equal(np.concatenate([g[step][key] for g in got]), want[step][key])
    # strict=False takes it anyway: the next sample after the saved position, in batches of 12
    loose = MemmapLoader(dataset, batch_size=12, **args).load_state_dict(state, strict=False)
    first = collect(loose, limit=1)[0]["input_ids"]
    assert np.array_equal(first[:8], np.concatenate([w["input_ids"] for w in want[:1]]))

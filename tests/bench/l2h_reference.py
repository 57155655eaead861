#!/usr/bin/python3
"""Wall time of the paper's reference L2H (appendix A) on the benchmark data.

The reference function is the one in tests/golden/l2h/gen_l2h_goldens.py:
appendix A of Palumbo et al., "Logits to Hierarchies", verbatim except for
the fix of its re_pp_per_group line. The input is the synthetic matrix that
l2h_bench generates (same generator, same seed), written with

    build/tests/bench/l2h_bench --write_npy=/tmp/l2h_50000x100.npy

and then timed with

    /usr/bin/python3 tests/bench/l2h_reference.py /tmp/l2h_50000x100.npy [repeats]
        [--compare STEPS.json] [--float32]

Prints the wall time of each run (softmax included, .npy loading excluded)
and a checksum of the merge steps. With --compare, also checks that the
steps equal Dendro's, as written by
    build/tests/bench/l2h_bench --write_steps=STEPS.json

--float32 runs the code on the float32 logits as loaded instead of a float64
copy. At 1,281,167 x 1,000 the float64 route (a 10 GB copy and SciPy's
softmax temporaries of the same size) needs more than 24 GB and is killed on
a 24 GB machine; in float32 it fits. Its steps can then differ from Dendro's (which follow the
float64 arithmetic), so --compare is meant for the float64 route.
"""
import hashlib
import importlib.util
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATOR = os.path.join(HERE, "..", "golden", "l2h", "gen_l2h_goldens.py")


def load_reference():
    spec = importlib.util.spec_from_file_location("gen_l2h_goldens", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.L2H


def main():
    args = sys.argv[1:]
    compare = None
    if "--compare" in args:
        at = args.index("--compare")
        if at + 1 >= len(args):
            raise SystemExit("--compare needs a file")
        compare = args[at + 1]
        del args[at:at + 2]
    use_float32 = "--float32" in args
    if use_float32:
        args.remove("--float32")
    if not args:
        raise SystemExit(__doc__)
    path = args[0]
    repeats = int(args[1]) if len(args) > 1 else 1
    l2h = load_reference()
    logits32 = np.load(path)
    if logits32.dtype != np.float32 or logits32.ndim != 2:
        raise SystemExit("%s: expected a 2-D float32 array, got %s %s" % (
            path, logits32.dtype, logits32.shape))
    logits = logits32 if use_float32 else logits32.astype(np.float64)
    del logits32
    print("input %s: %d x %d, %s" % (path, logits.shape[0], logits.shape[1], logits.dtype))
    steps = None
    for r in range(max(1, repeats)):
        start = time.perf_counter()
        steps = l2h(logits)
        elapsed = time.perf_counter() - start
        steps = [[list(map(int, a)), list(map(int, b))] for a, b in steps]
        digest = hashlib.sha256(json.dumps(steps).encode()).hexdigest()
        print("run %d: %.3f s  (%d steps, sha256 %s)" % (r + 1, elapsed, len(steps), digest[:16]))
    if compare is not None:
        with open(compare) as f:
            dendro_steps = json.load(f)
        if dendro_steps != steps:
            first = next((t for t, (a, b) in enumerate(zip(steps, dendro_steps)) if a != b),
                         min(len(steps), len(dendro_steps)))
            raise SystemExit("steps differ from %s at step %d" % (compare, first))
        print("steps identical to %s" % compare)


if __name__ == "__main__":
    main()

"""The L2H merge loop's prefetches are in the compiled code.

GCC's interprocedural pure/const analysis treats a lambda whose only effects
are __builtin_prefetch calls as pure and deletes the calls to it, since they
return nothing; core/l2h/l2h.cc therefore forces its prefetch lambdas inline.
Without that the release object has 2 prefetch instructions (the point-state
prefetches in the loop itself) and the merges run about a third slower
(docs/benchmarks.md, L2H). This counts them in the object file.

Usage: l2h_prefetch_check.py OBJECT... (the dendro_l2h library's objects)
"""
import subprocess
import sys

MIN_PREFETCHES = 12  # 16 in the release build, 16-18 under the sanitizers


def main() -> int:
    objects = [o for o in sys.argv[1:] if o.endswith("/l2h.cc.o")]
    if len(objects) != 1:
        print(f"expected one l2h.cc.o among {sys.argv[1:]}")
        return 1
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", objects[0]],
                         check=True, capture_output=True, text=True).stdout
    count = sum(1 for line in out.splitlines() if "\tprefetch" in line)
    print(f"{count} prefetch instructions in l2h.cc.o (need >= {MIN_PREFETCHES})")
    return 0 if count >= MIN_PREFETCHES else 1


if __name__ == "__main__":
    sys.exit(main())

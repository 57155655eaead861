#!/usr/bin/python3
"""Markdown table for the t-NEB report in docs/methods.md (issue 12).

Reads tneb_densired output files (their SUMMARY lines; each run reports the
merge order it used and the other one, from the same fits; for a run cut
short before its SUMMARY, the per-seed rows, whose `merge` column names the
order behind `ari` (`ari_other` is the other one; rows without it come from
older runs, where `ari` was persistence)) and one
tneb_baselines.py output, and prints one row per dataset: t-NEB median / best
ARI with persistence and with density merging, then k-means and the Gaussian
mixture, and the number of seeds behind each t-NEB figure. Datasets without a
t-NEB summary (runs cut short) are listed with "-".

Usage: /usr/bin/python3 tests/bench/tneb_report_table.py BASELINES.tsv TNEB.out [TNEB.out ...]
"""
import re
import statistics
import sys


def main():
    base = {}
    with open(sys.argv[1]) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) == 5 and p[0] != "dataset":
                base[(p[0], p[1])] = (float(p[2]), float(p[3]))
    tneb = {}
    pat = re.compile(r"SUMMARY\t(\S+)\tmerge (\w+)\tbest (\S+)\tmedian (\S+)\tworst \S+\t\((\d+) seeds\)")
    rows = {}
    for path in sys.argv[2:]:
        with open(path) as f:
            for line in f:
                m = pat.match(line)
                if m:
                    tneb[(m.group(1), m.group(2))] = (float(m.group(4)), float(m.group(3)),
                                                      int(m.group(5)))
                    continue
                p = line.rstrip("\n").split("\t")
                if 12 <= len(p) <= 17 and p[0] != "dataset":
                    ari, other = float(p[2]), float(p[11])
                    if len(p) >= 13 and p[12] == "density":
                        ari, other = other, ari
                    rows.setdefault(p[0], []).append((ari, other))
    for name, r in rows.items():
        for i, merge in enumerate(("persistence", "density")):
            if (name, merge) not in tneb:
                v = sorted(x[i] for x in r)
                tneb[(name, merge)] = (statistics.median(v), v[-1], len(v))
    names = []
    for key in list(base) + list(tneb):
        if key[0] not in names:
            names.append(key[0])

    def cell(v):
        return "-" if v is None else f"{v[0]:.3f} / {v[1]:.3f}"

    print("| dataset | t-NEB persistence | t-NEB density (paper) | k-means | GMM | t-NEB seeds |")
    print("|---|---|---|---|---|---|")
    for n in names:
        p, d = tneb.get((n, "persistence")), tneb.get((n, "density"))
        seeds = p[2] if p else (d[2] if d else 0)
        label = n.replace("_X.npy", "")
        print(f"| {label} | {cell(p)} | {cell(d)} | {cell(base.get((n, 'kmeans')))} | "
              f"{cell(base.get((n, 'gmm')))} | {seeds} |")


if __name__ == "__main__":
    main()

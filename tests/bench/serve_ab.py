"""Serving, one dendrod build against another, in the same session.

  /usr/bin/python3 tests/bench/serve_ab.py --a NEW/dendrod --b OLD/dendrod \
      --bench build-rel/tests/bench/serve_bench [--rounds 3] [--duration 10] \
      [--catalog sqlite|postgres] [--callers 32] [--fit-rate 0] [--flat] \
      [--flags-a "..."] [--flags-b "..."] [--no-closed]
      [--fit-cli build-rel/client/dendro --fit "tneb X.npy --standardize"]
      [--fit-delay 2] [--fit-window 8]

Starts both servers (each with its own data directory; with --catalog
postgres each on its own database of one throwaway PostgreSQL 15, see
tests/blackbox/pg_lib.py), creates the same models on each through
serve_bench (hierarchical PPCA K=2000 d=128 for Predict, L2H K=1000 for
Assign), then, round after round, runs each measurement on A and then on
B, so that drift in the machine's speed falls on both alike. Only the idle
server's process is waiting meanwhile; the load generator is C++ (no Python
in the measured path: this script only starts processes and reads their
JSON).

Measurements: closed-loop single-row Predict and Assign with --callers
callers; the in-process ceiling of both models (serve_bench --ceiling, once,
on A's files); with --fit-rate R > 0, open-loop Predict at R calls/s idle
and again while a fit runs on the same server: a hierarchical PPCA fit
(K=2000) by default, or with --fit-cli and --fit the CLI command given
(e.g. a t-NEB fit of a file; each gets its own --name); --no-closed skips
the closed-loop cases.

Prints one Markdown table of medians over the rounds, and writes every run's
JSON to --out.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "blackbox"))
import pg_lib  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name, binary, root, catalog, extra_flags):
        self.name = name
        self.port = free_port()
        self.data = os.path.join(root, name + ".data")
        self.log = open(os.path.join(root, name + ".log"), "wb")
        cmd = [binary, "--listen", f"127.0.0.1:{self.port}", "--data_dir", self.data]
        if catalog:
            cmd += ["--catalog", catalog]
        self.proc = subprocess.Popen(cmd + extra_flags, stdout=self.log, stderr=self.log)
        deadline = time.time() + 60
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                raise SystemExit(f"{name}: dendrod exited at start; see {self.log.name}")
            time.sleep(0.1)
        raise SystemExit(f"{name}: dendrod did not listen within 60 s")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def bench(args, server, *flags, extra_pids=()):
    cmd = [args.bench, "--server", f"127.0.0.1:{server.port}", "--server-pid",
           str(server.proc.pid)]
    for pid in extra_pids:
        cmd += ["--extra-pid", str(pid)]
    cmd += list(flags)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"serve_bench failed ({done.returncode}): {' '.join(cmd)}\n"
                         f"{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(runs):
    """Median over rounds of the figures the table shows."""
    def med(get):
        vals = [get(r) for r in runs]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None
    return {
        "calls_s": med(lambda r: r.get("ended_per_second", r.get("calls_per_second"))),
        "p50": med(lambda r: r["latency_ms"]["p50"]),
        "p99": med(lambda r: r["latency_ms"]["p99"]),
        "errors": sum(r.get("error_total", 0) for r in runs),
        "server_cpu": med(lambda r: r["cpu"]["server"].get("cpu_seconds_per_1000_calls")),
        "extra_cpu": med(lambda r: r["cpu"].get("extra_total", {}).get(
            "cpu_seconds_per_1000_calls")),
    }


def fmt(v, digits=2):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="dendrod under test")
    ap.add_argument("--b", required=True, help="dendrod to compare with")
    ap.add_argument("--bench", required=True, help="serve_bench binary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--callers", type=int, default=32)
    ap.add_argument("--catalog", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--fit-rate", type=float, default=0,
                    help="open-loop Predict rate, idle and during an hPPCA fit (0: skip)")
    ap.add_argument("--flat", action="store_true",
                    help="also closed-loop single-row flat Predict (every class scored)")
    ap.add_argument("--fit-cli", default=None, help="dendro CLI binary for --fit")
    ap.add_argument("--fit", default=None,
                    help='the fit to run under load, as CLI arguments ("tneb X.npy --standardize")')
    ap.add_argument("--fit-delay", type=float, default=2,
                    help="seconds from the fit's start to the window's")
    ap.add_argument("--fit-window", type=float, default=8, help="seconds of the window")
    ap.add_argument("--no-closed", action="store_true", help="skip the closed-loop cases")
    ap.add_argument("--out", default=None)
    ap.add_argument("--flags-a", default="", help="extra dendrod flags for A")
    ap.add_argument("--flags-b", default="", help="extra dendrod flags for B")
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="dendro_serve_ab_")
    out_dir = args.out or root
    os.makedirs(out_dir, exist_ok=True)
    pg = None
    servers = {}
    try:
        catalogs = {"A": "", "B": ""}
        extra = []
        if args.catalog == "postgres":
            pg = pg_lib.Postgres()
            why = pg.why_missing()
            if why:
                raise SystemExit(f"PostgreSQL unavailable: {why}")
            pg.start()
            catalogs = {"A": pg.create_database("serve_a"), "B": pg.create_database("serve_b")}
            with open(os.path.join(pg.dir, "data", "postmaster.pid")) as f:
                extra = [int(f.readline())]
        servers["A"] = Server("A", args.a, root, catalogs["A"], args.flags_a.split())
        servers["B"] = Server("B", args.b, root, catalogs["B"], args.flags_b.split())
        for s in servers.values():  # the same models on both (same seeds)
            bench(args, s, "--create", "hppca", "--rpc", "predict", "--callers", "1",
                  "--duration", "1", "--warmup", "0")
            bench(args, s, "--create", "l2h", "--rpc", "assign", "--callers", "1",
                  "--duration", "1", "--warmup", "0")
        cases = [("Predict, closed, single row", ["--create", "hppca", "--rpc", "predict",
                                                  "--callers", str(args.callers)]),
                 ("Assign, closed, single row", ["--create", "l2h", "--rpc", "assign",
                                                 "--callers", str(args.callers)])]
        if args.no_closed:
            cases = []
        if args.flat:
            cases.insert(1, ("Predict flat, closed, single row",
                             ["--create", "hppca", "--rpc", "predict", "--flat",
                              "--callers", str(args.callers)]))
        if args.fit_rate > 0:
            cases.append((f"Predict, open {args.fit_rate:g}/s, idle",
                          ["--create", "hppca", "--rpc", "predict", "--mode", "open",
                           "--rate", str(args.fit_rate)]))
        results = {(c, w): [] for c, _ in cases for w in servers}
        under_fit = {w: [] for w in servers}
        for r in range(args.rounds):
            for case, flags in cases:
                for who, s in servers.items():
                    res = bench(args, s, *flags, "--duration", str(args.duration),
                                extra_pids=extra)
                    results[(case, who)].append(res)
                    with open(os.path.join(out_dir, f"r{r}_{who}_{case[:14]}.json".replace(
                            " ", "_").replace(",", "")), "w") as f:
                        json.dump(res, f)
            if args.fit_rate > 0:
                for who, s in servers.items():
                    under_fit[who].append(run_under_fit(args, s, extra))
        ceiling = {
            "hppca": bench(args, servers["A"], "--create", "hppca", "--ceiling", "--data-dir",
                           servers["A"].data, "--duration", "5"),
            "l2h": bench(args, servers["A"], "--create", "l2h", "--rpc", "assign", "--ceiling",
                         "--data-dir", servers["A"].data, "--duration", "5"),
        }
        with open(os.path.join(out_dir, "ceiling.json"), "w") as f:
            json.dump(ceiling, f)
        extra_col = " | PostgreSQL CPU-s/1000" if extra else ""
        print(f"catalog: {args.catalog}; {args.rounds} rounds of {args.duration:g} s; "
              f"medians over rounds; A = {args.a}, B = {args.b}\n")
        print(f"| case | build | calls/s | p50 ms | p99 ms | errors | server CPU-s/1000"
              f"{extra_col} |")
        print("|---|---|---|---|---|---|---|" + ("---|" if extra else ""))
        rows = list(results.items())
        if args.fit_rate > 0:
            fit_name = args.fit.split()[0] if args.fit else "hPPCA"
            rows += [((f"Predict, open {args.fit_rate:g}/s, during a {fit_name} fit", w), v)
                     for w, v in under_fit.items()]
        for (case, who), runs in rows:
            s = summary(runs)
            line = (f"| {case} | {who} | {fmt(s['calls_s'], 0)} | {fmt(s['p50'])} | "
                    f"{fmt(s['p99'])} | {s['errors']} | {fmt(s['server_cpu'], 3)}")
            if extra:
                line += f" | {fmt(s['extra_cpu'], 3)}"
            print(line + " |")
        for name, c in ceiling.items():
            cc = c["ceiling"]
            print(f"\nin-process ceiling, {name}: single row {fmt(cc['single_row']['rows_per_second'], 0)}"
                  f" rows/s, batches of {cc['batch'].get('rows_per_call', 256)}: "
                  f"{fmt(cc['batch']['rows_per_second'], 0)} rows/s "
                  f"({fmt(cc['batch'].get('cpu_seconds_per_1000_rows'), 4)} CPU-s/1000 rows)")
        print(f"\nJSON of every run: {out_dir}")
    finally:
        for s in servers.values():
            s.stop()
        if pg is not None:
            pg.stop()
        if args.out is None:
            print(f"(kept {root})")


def run_under_fit(args, server, extra):
    """Open-loop Predict at --fit-rate while a fit runs on the same server (a
    new K=2000 hierarchical PPCA model, every core, about 13 s on 2 cores, or
    the --fit command): the window opens 2 s after the fit's command started
    (its upload first) and lasts 8 s (--fit-delay, --fit-window)."""
    run_under_fit.count = getattr(run_under_fit, "count", 0) + 1
    name = f"fit-load-{run_under_fit.count}"
    if args.fit:
        cmd = ([args.fit_cli or "dendro", "--server", f"127.0.0.1:{server.port}"] +
               args.fit.split() + ["--name", name])
    else:
        cmd = [args.bench, "--server", f"127.0.0.1:{server.port}", "--create", "hppca",
               "--model", name, "--rpc", "predict", "--callers", "1",
               "--duration", "0.5", "--warmup", "0"]
    fit = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(args.fit_delay)
        return bench(args, server, "--create", "hppca", "--rpc", "predict", "--mode", "open",
                     "--rate", str(args.fit_rate), "--duration", str(args.fit_window),
                     "--warmup", "0",
                     extra_pids=extra)
    finally:
        fit.wait()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Times `benchlake replay dimemas` and `benchlake replay bandela` the way
users run them: each replay a fresh process, on a synthetic 1,024-rank halo
trace (`benchlake probe dimemas`, 7.3 M records, 182 MB by default; `benchlake
probe bandela`, one text file per rank, 200 iterations by default: 1.9 M
records), with `--threads 1` and `--threads 2` interleaved run by run, next to
`zstd -1 -T1` of the same bytes in the same run. Prints medians, spreads (min-max), CPU, peak memory (GNU time's maximum
resident set) and the 1-thread / 2-thread ratio (of the medians, and the
median of each run's ratio to the run after it), checks that both print the
same predictions, and gives the load average before and after, since the
machine may be shared. Peak memory at 8, 64, 256 and 1,024 ranks, of
`benchlake replay dimemas` and of the replay-only `benchlake-replay` built
beside it, is compared with Dimemas's on the same traces, run in the same
session (`Dimemas -t --dim TRACE CFG`, the configuration
shared/data/replay/dimemas/configs/c1_base.cfg) when a Dimemas binary is
found (`--dimemas PATH`, else `Dimemas` on PATH). Without one the comparison
says "not measured" and prints the figures recorded elsewhere
(anchor_speed.tsv) as a reminder only, never as a verdict.

    python3 bench/replay_speed.py [--bin target/release/benchlake] [--runs 7]
                                  [--ranks 1024] [--iters 1000] [--work DIR]
                                  [--bandela-iters 200] [--only dimemas|bandela]
                                  [--dimemas PATH]

Exit status 1 when a goal it prints is missed: the predictions differ between
thread counts or binaries, or (Dimemas measured) a replay's peak memory is
above Dimemas's at some size.

The page cache is left warm (the trace was just written); the replay reads
182 MB that the reference reads too.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def run_once(argv):
    """One fresh process: wall s, CPU s, peak RSS MB, stdout."""
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", *map(str, argv)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(map(str, argv))}\n{r.stderr[-2000:]}")
    user, sys_s, rss_kb = r.stderr.strip().splitlines()[-1].split()
    return wall, float(user) + float(sys_s), int(rss_kb) / 1024, r.stdout


def summary(name, samples):
    walls = [s[0] for s in samples]
    cpus = [s[1] for s in samples]
    rss = max(s[2] for s in samples)
    med = statistics.median(walls)
    print(f"  {name:<40} wall {med:7.3f} s ({min(walls):.3f}-{max(walls):.3f})  "
          f"cpu {statistics.median(cpus):7.3f} s  peak {rss:6.1f} MiB")
    return {"wall": med, "min": min(walls), "rss": rss}


def predictions(stdout):
    """The printed predictions without the replay's own wall time."""
    return [line.split(" records replayed in ")[0] for line in stdout.splitlines()]


def load():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def dimemas_anchor_rss():
    """(ranks, iters) -> Dimemas 5.5's peak RSS (MiB) and wall from the anchor runs."""
    out = {}
    tsv = SHARED / "data/replay/dimemas/anchor_speed.tsv"
    if tsv.exists():
        for line in tsv.read_text().splitlines()[1:]:
            f = line.split("\t")
            if f[0] == "dimemas-5.5":
                out[(int(f[1]), int(f[2]))] = (int(f[5]) / 1024, float(f[4]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" /
                                         "benchlake"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--work")
    ap.add_argument("--bandela-iters", type=int, default=200)
    ap.add_argument("--only", choices=("dimemas", "bandela"))
    ap.add_argument("--speedup-goal", type=float, default=1.7,
                    help="1-thread / 2-thread wall time (median of the run-by-run ratios) to reach")
    ap.add_argument("--dimemas", default=shutil.which("Dimemas"),
                    help="the Dimemas binary to compare with in this run (default: Dimemas on PATH)")
    a = ap.parse_args()
    exe = Path(a.bin)
    if not exe.is_file():
        sys.exit(f"{exe} not found: cargo build --release -p benchlake (or --bin PATH)")
    for tool in ("zstd", "/usr/bin/time"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed (apt-get install zstd time)")
    work = Path(a.work or tempfile.mkdtemp(prefix="benchlake-replay-speed-"))
    work.mkdir(parents=True, exist_ok=True)

    def trace(ranks, iters):
        p = work / f"halo1d_P{ranks}_I{iters}.dim"
        if not p.exists():
            subprocess.run([exe, "probe", "dimemas", "--ranks", str(ranks), "--iters", str(iters), "--out", p],
                           check=True, stdout=subprocess.DEVNULL)
        return p

    print(f"benchlake replay speed: {exe}, {a.runs} runs each (threads 1 and 2 interleaved), warm page cache, "
          f"{os.cpu_count()} cores, load average before: {load()}")
    same, under = True, None
    if a.only != "bandela":
        same, under = dimemas(a, exe, trace)
    if a.only != "dimemas":
        same = bandela(a, exe, work) and same
    print(f"\nload average after: {load()}")
    if not same:
        sys.exit("goal missed: the predictions differ between thread counts or binaries")
    if under is False:
        sys.exit("goal missed: a replay's peak memory is above Dimemas's (measured in this run)")
    if getattr(a, "missed", []):
        sys.exit("goal missed: " + "; ".join(a.missed) + f" (load average {load()})")


def bandela(a, exe, work):
    """The Bandela model on the same halo, one text file per rank."""
    d = work / f"bandela_P{a.ranks}_I{a.bandela_iters}"
    if not (d / "replaympi.input").exists():
        subprocess.run([exe, "probe", "bandela", "--ranks", str(a.ranks), "--iters", str(a.bandela_iters),
                        "--out", d], check=True, stdout=subprocess.DEVNULL)
    files = sorted(d.glob("bandela.*.txt"))
    size = sum(f.stat().st_size for f in files)
    print(f"\nBandela-model replay of a synthetic {a.ranks}-rank halo, {a.bandela_iters} iterations "
          f"({size / 1e6:.1f} MB in {len(files)} rank files, {d.name})")
    return one_against_two(a, "bandela", [exe, "replay", "bandela", d, "--input", d / "replaympi.input"],
                           f"cat {d}/bandela.*.txt | zstd -1 -T1 -q -c > /dev/null", "cat | zstd -1 -T1",
                           "every CPU's lines")


def one_against_two(a, model, argv, reference, ref_name, rows):
    """`argv --threads 1` and `--threads 2` alternating, then the reference
    shell command, each a.runs times; prints medians and ratios, returns
    whether both thread counts printed the same predictions."""
    one, two, outs = [], [], {}
    for _ in range(a.runs):
        for threads, acc in ((1, one), (2, two)):
            w, c, m, out = run_once([*argv, "--threads", threads])
            acc.append((w, c, m))
            outs.setdefault(threads, predictions(out))
    zs = [run_once(["sh", "-c", reference])[:3] for _ in range(a.runs)]
    s1 = summary(f"benchlake replay {model} --threads 1", one)
    s2 = summary(f"benchlake replay {model} --threads 2", two)
    z = summary(f"{ref_name} (same bytes)", zs)
    print(f"  -> 1 thread / 2 threads wall: {s1['wall'] / s2['wall']:.2f}x")
    # Each 1-thread run against the 2-thread run right after it: a host that
    # slows down for a few seconds slows both, so these ratios drift less
    # than the medians do.
    paired = sorted(o[0] / t[0] for o, t in zip(one, two))
    q = len(paired) // 4
    print(f"  -> the same, run by run: median {statistics.median(paired):.2f}x "
          f"(middle half {paired[q]:.2f}-{paired[-1 - q]:.2f}x)")
    # On a shared host a 2-thread run is slowed whenever another tenant takes
    # either core; the fastest run of each is the least disturbed one.
    print(f"  -> fastest runs: {s1['min']:.3f} s on 1 thread, {s2['min']:.3f} s on 2: "
          f"{s1['min'] / s2['min']:.2f}x")
    print(f"  -> 2 threads / zstd wall: {s2['wall'] / z['wall']:.2f}x")
    same = outs.get(1) == outs.get(2)
    print(f"  -> predictions (predicted time and {rows}) identical on 1 and 2 threads: "
          f"{'yes' if same else 'NO'}")
    fast = statistics.median(paired) >= a.speedup_goal
    print(f"  -> goal {a.speedup_goal:.2f}x on 2 threads (run by run): {'met' if fast else 'MISSED'}")
    a.missed = getattr(a, "missed", []) + ([f"{model}: {statistics.median(paired):.2f}x on 2 threads, "
                                             f"goal {a.speedup_goal:.2f}x"] if not fast else [])
    return same


def dimemas(a, exe, trace):
    """The Dimemas model: speed at 1,024 ranks, memory next to Dimemas's.
    Returns (same predictions everywhere, peak memory under Dimemas's at
    every size: None when Dimemas was not measured)."""
    big = trace(a.ranks, a.iters)
    size = big.stat().st_size
    print(f"\nDimemas-model replay of a synthetic {a.ranks}-rank halo, {a.iters} iterations "
          f"({size / 1e6:.1f} MB, {big.name})")
    same = one_against_two(a, "dimemas", [exe, "replay", "dimemas", big],
                           f"zstd -1 -T1 -q -c '{big}' > /dev/null", "zstd -1 -T1", "every rank's row")

    anchors = dimemas_anchor_rss()
    cfg = SHARED / "data/replay/dimemas/configs/c1_base.cfg"
    measure = bool(a.dimemas) and Path(a.dimemas).is_file() and cfg.is_file()
    # The replay-only binary built beside benchlake (cli/src/bin/benchlake-replay.rs).
    lean = exe.with_name("benchlake-replay")
    binaries = [("benchlake replay dimemas", [exe, "replay", "dimemas"])]
    if lean.is_file():
        binaries.append(("benchlake-replay dimemas", [lean, "dimemas"]))
    else:
        print(f"\n(no {lean}: the replay-only binary is left out)")
    if measure:
        print(f"\nPeak memory next to Dimemas ({a.dimemas}, run now on the same traces, {cfg.name})")
    else:
        why = "no Dimemas binary (--dimemas PATH)" if not (a.dimemas and Path(a.dimemas).is_file()) \
            else f"no {cfg}"
        print(f"\nPeak memory; Dimemas not measured in this run: {why}. Figures recorded on another "
              "machine (anchor_speed.tsv) are shown for orientation only and judge nothing.")
    under = {name: True for name, _ in binaries}
    for ranks, iters in ((8, 8000), (64, 1000), (256, 250), (1024, 60)):
        p = trace(ranks, iters)
        ref = None
        if measure:
            runs = [run_once([a.dimemas, "-t", "--dim", p, cfg]) for _ in range(3)]
            ref = summary(f"P={ranks} I={iters}: Dimemas", [r[:3] for r in runs])
        elif (ranks, iters) in anchors:
            rss, wall = anchors[(ranks, iters)]
            print(f"P={ranks} I={iters}: (recorded elsewhere: Dimemas 5.5 {rss:.1f} MiB, {wall:.2f} s)")
        else:
            print(f"P={ranks} I={iters}:")
        want = None
        for name, argv in binaries:
            for threads in (1, 2):
                runs = [run_once([*argv, "--threads", threads, p]) for _ in range(3)]
                s = summary(f"{name} --threads {threads}", [r[:3] for r in runs])
                got = predictions(runs[0][3])
                want = want or got
                same = same and got == want
                if ref:
                    under[name] = under[name] and s["rss"] <= ref["rss"]
                    print(f"  -> / Dimemas: peak memory {s['rss'] / ref['rss']:.2f}x, "
                          f"wall {s['wall'] / ref['wall']:.3f}x")
    for name, ok in under.items():
        verdict = ("yes" if ok else "NO") if measure else "not measured"
        print(f"  -> {name}: peak memory at or under Dimemas's at every size: {verdict}")
    print(f"  -> the same predictions from every binary and thread count: {'yes' if same else 'NO'}")
    return same, (all(under.values()) if measure else None)

if __name__ == "__main__":
    main()

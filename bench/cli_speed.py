#!/usr/bin/env python3
"""Times benchlake's CLI paths the way users meet them: each command as a fresh
process, page cache dropped before every run where the machine allows it,
outputs written as users get them, next to reference commands on the same
bytes in the same run (`zstd -1 -T1`, `cat`). Prints medians, spreads, peak
memory and the ratios issue 16 asks about.

    python3 bench/cli_speed.py [--bin target/release/benchlake] [--runs 5] [--work DIR] [--warm]
                               [--only linktest,counts,many,replay,calibrate]

Inputs are made here: a synthetic 4,096-rank LinkTest 2.1.17 file
(`benchlake probe linktest`, 285 MB), the 156.7 MB synthetic alltoallv count
pair (../shared/data/counts/gen_compact.py 1024 5000 50 30 8 1), 1,000 copies
of a real LinkTest file, and a Dimemas trace from ../shared when present.
Needs numpy for the count generator. Peak memory comes from GNU time, CPU
time from wait4 on it (microseconds, where time prints 10 ms steps).
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


def drop_caches():
    """Drops the page cache (root, and a kernel that lets us); returns whether it did."""
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def measure(argv, runs, cold, stdout=subprocess.DEVNULL, cwd=None, before=None):
    """Runs `argv` `runs` times as fresh processes; wall s, CPU s, peak RSS MB per run."""
    out = []
    for _ in range(runs):
        if before:
            before()
        if cold:
            drop_caches()
        # CPU time from wait4 on GNU time (its child's and its own, which is
        # nil) at microseconds instead of time's 10 ms; peak RSS from time
        # (a Python fork would count the interpreter's memory).
        t0 = time.perf_counter()
        p = subprocess.Popen(["/usr/bin/time", "-f", "%M", *[str(x) for x in argv]], stdout=stdout,
                             stderr=subprocess.PIPE, cwd=cwd)
        err = p.stderr.read().decode(errors="replace")
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            sys.exit(f"failed ({p.returncode}): {' '.join(map(str, argv))}\n{err[-2000:]}")
        rss_kb = err.strip().splitlines()[-1].split()[-1]
        out.append((wall, ru.ru_utime + ru.ru_stime, int(rss_kb) / 1024, ru.ru_utime, ru.ru_stime))
    return out


def summary(name, samples, nbytes=None):
    walls = [s[0] for s in samples]
    cpus = [s[1] for s in samples]
    rss = max(s[2] for s in samples)
    med, cpu = statistics.median(walls), statistics.median(cpus)
    line = (f"  {name:<44} wall {med:7.3f} s ({min(walls):.3f}–{max(walls):.3f})  cpu {cpu:7.3f} s  "
            f"peak {rss:7.1f} MB")
    if nbytes:
        line += f"  {nbytes / 1e9 / max(cpu, 1e-9):5.2f} GB per CPU-second"
    # User and system CPU apart: on a VM the kernel's share (page cache, disk)
    # can swing from run to run while the program's own work stays put.
    user = statistics.median(s[3] for s in samples)
    system = statistics.median(s[4] for s in samples)
    line += f"  (user {user:.3f} s, system {system:.3f} s ({min(s[4] for s in samples):.3f}–{max(s[4] for s in samples):.3f}))"
    print(line)
    return {"wall": med, "cpu": cpu, "rss": rss}


def ratio(label, a, b, key="wall"):
    print(f"  -> {label}: {a[key] / b[key]:.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" /
                                         "benchlake"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work")
    ap.add_argument("--warm", action="store_true",
                    help="keep the page cache (inputs read once before timing): CPU without the disk")
    ap.add_argument("--only", default="linktest,counts,many,replay,calibrate")
    a = ap.parse_args()
    exe = Path(a.bin)
    if not exe.is_file():
        sys.exit(f"{exe} not found: cargo build --release (or --bin PATH)")
    for tool in ("zstd", "/usr/bin/time"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed (apt-get install zstd time)")
    only = set(a.only.split(","))
    work = Path(a.work or tempfile.mkdtemp(prefix="benchlake-cli-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    cold = not a.warm and drop_caches()
    print(f"benchlake CLI speed: {exe}, {a.runs} runs each, page cache "
          f"{'dropped before each run' if cold else 'kept (--warm)' if a.warm else 'NOT dropped (not permitted here): warm-cache figures'}, "
          f"work dir {work}")
    zstd = ["zstd", "-1", "-T1", "-q", "-c"]

    if "linktest" in only:
        lt = work / "lt4096.sion"
        if not lt.exists():
            subprocess.run([exe, "probe", "linktest", "--ranks", "4096", "--out", lt], check=True,
                           stdout=subprocess.DEVNULL)
        n = lt.stat().st_size
        print(f"\nLinkTest ingest of a synthetic 4,096-rank 2.1.17 file ({n / 1e6:.1f} MB)")
        out = work / "lt-out"
        ing = summary("benchlake ingest linktest", measure(
            [exe, "ingest", "linktest", lt, "--out", out, "--run-id", "01JBENCH000000000000000001"], a.runs, cold,
            before=lambda: shutil.rmtree(out, ignore_errors=True)), n)
        z = summary("zstd -1 -T1 (same bytes)", measure([*zstd, lt], a.runs, cold), n)
        c = summary("cat (same bytes)", measure(["cat", lt], a.runs, cold), n)
        ratio("benchlake / zstd wall", ing, z)
        ratio("benchlake / cat wall", ing, c)

    if "calibrate" in only:
        # Two synthetic 4,096-rank files at 8 B and 1 MiB per message (the
        # generator adds size / bandwidth), as a message-size sweep gives them.
        files = []
        for size in (8, 1 << 20):
            f = work / f"lt4096-{size}.sion"
            if not f.exists():
                subprocess.run([exe, "probe", "linktest", "--ranks", "4096", "--message-size", str(size),
                                "--out", f], check=True, stdout=subprocess.DEVNULL)
            files.append(f)
        n = sum(f.stat().st_size for f in files)
        print(f"\nreplay calibrate of two synthetic 4,096-rank files ({n / 1e6:.1f} MB, 33.5 M pair times)")
        cal = summary("benchlake replay calibrate", measure([exe, "replay", "calibrate", *files], a.runs, cold), n)
        z = summary("cat … | zstd -1 -T1 (same bytes)",
                    measure(["sh", "-c", f"cat {files[0]} {files[1]} | zstd -1 -T1 -q -c"], a.runs, cold), n)
        ratio("benchlake / zstd wall", cal, z)

    if "counts" in only:
        gen = SHARED / "data" / "counts" / "gen_compact.py"
        cdir = work / "counts1024"
        if not (cdir / "send-counters.job0.rank0.txt").exists():
            if not gen.exists():
                sys.exit(f"{gen} not found (../shared beside the repository)")
            subprocess.run([sys.executable, gen, cdir, "1024", "5000", "50", "30", "8", "1"], check=True)
        n = sum(f.stat().st_size for f in cdir.iterdir())
        print(f"\nalltoallv count analysis of the synthetic pair ({n / 1e6:.1f} MB)")
        out = work / "counts-out"
        an = summary("benchlake analyze counts (reports and tables)", measure(
            [exe, "analyze", "counts", cdir, "--out", out], a.runs, cold,
            before=lambda: shutil.rmtree(out, ignore_errors=True)), n)
        z = summary("zstd -1 -T1 (same bytes)", measure(["sh", "-c", f"cat {cdir}/* | zstd -1 -T1 -q -c"],
                                                        a.runs, cold), n)
        ratio("benchlake / zstd wall", an, z)

    if "many" in only:
        real = sorted((SHARED / "data" / "linktest").rglob("pingpong_results_bin.sion"))
        if real:
            src = real[0]
            many = work / "many"
            if not many.exists():
                many.mkdir()
                for i in range(1000):
                    (many / f"r{i:04}").mkdir()
                    shutil.copy(src, many / f"r{i:04}" / src.name)
            n = sum(f.stat().st_size for f in many.rglob("*.sion"))
            print(f"\n1,000 LinkTest files in one ingest call ({src.parent.name}/{src.name}, {n / 1e6:.1f} MB in all)")
            out = work / "many-out"
            ing = summary("benchlake ingest linktest DIR", measure(
                [exe, "ingest", "linktest", many, "--out", out, "--run-id", "01JBENCH000000000000000002"], a.runs,
                cold, before=lambda: shutil.rmtree(out, ignore_errors=True)), n)
            z = summary("cat … | zstd -1 -T1", measure(["sh", "-c", f"cat {many}/*/*.sion | zstd -1 -T1 -q -c"],
                                                      a.runs, cold), n)
            one = summary("benchlake ingest linktest (one of the files)", measure(
                [exe, "ingest", "linktest", many / "r0000", "--out", out, "--run-id",
                 "01JBENCH000000000000000002"], a.runs, cold,
                before=lambda: shutil.rmtree(out, ignore_errors=True)))
            ratio("benchlake / (cat | zstd) wall", ing, z)
            print(f"  -> per file: {ing['wall'] / 1000 * 1e6:.0f} µs of wall, "
                  f"{ing['cpu'] / 1000 * 1e6:.0f} µs of CPU; over one file's run: "
                  f"{(ing['cpu'] - one['cpu']) / 999 * 1e6:.0f} µs of CPU per further file")

    if "replay" in only:
        traces = sorted((SHARED / "data").rglob("*.dim"))
        if traces:
            tr = max(traces, key=lambda p: p.stat().st_size)
            print(f"\nDimemas-model replay of {tr.relative_to(SHARED)} ({tr.stat().st_size / 1e6:.2f} MB)")
            summary("benchlake replay dimemas", measure([exe, "replay", "dimemas", tr], a.runs, cold))


if __name__ == "__main__":
    main()

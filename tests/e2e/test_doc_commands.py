"""Every documented `benchlake` command line is exercised as written
(issue 36, item 3): a doc example that breaks fails the suite.

- Fenced shell blocks (```sh, ```bash, ```console, ```shell or no language)
  of README.md, docs/*.md and deploy/README.md: every command that runs
  `benchlake` (also as `target/release/benchlake`, `cargo run --release --`,
  or after `mpirun …`/`srun …`/`sudo`/`VAR=value`) is parsed by the real
  binary with BENCHLAKE_CHECK_ARGS=1 — every subcommand, flag and value
  parser, pio's own parameters through pio's parser — and must parse.
  Placeholders such as RUN or DIR are ordinary values and parse; an argument
  that is only `…` or `...` (the text says "and so on") is left out.
- Inline code spans that start with `benchlake ` name commands in prose,
  often without their required arguments (`benchlake replay calibrate`):
  they must name an existing command and existing flags; a missing required
  argument is accepted there, an unknown command, flag or bad value is not.
  `a|b` alternatives are each checked; `[…]` optional parts are left out.
- The README's quick tour runs as written, line by line, against a fresh
  `benchlake up` in an empty directory (the one substitution: the binary
  under test for `target/release/benchlake`, which `cargo build --release`
  makes; the address comes from BENCHLAKE_LISTEN/BENCHLAKE_COORDINATOR so
  that the lines stay as written). The other documented commands that need a
  live cluster run in the tests of their area (docs/testing.md lists them).
"""
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md"]
SHELL_LANGS = {"sh", "bash", "console", "shell", ""}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
ELIDED = {"…", "...", "\u2026"}

# Fenced lines that are synopses (usage with [optional] parts), not
# commands; each must still be one, which the test checks.
SYNOPSIS = re.compile(r"(^|\s)\[-")


def _fenced_lines(path):
    """(line number, logical line) of the shell blocks of `path`, with
    backslash continuations and quotes open over lines joined, and a
    leading `$ ` prompt removed."""
    out, lang, buf, start = [], None, "", 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if m:
            lang = None if lang is not None else m.group(2)
            continue
        if lang is None or lang not in SHELL_LANGS:
            continue
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        if _open_quote(buf):
            # A quoted argument that goes on over lines (a long SQL query).
            buf += "\n"
            continue
        text = buf.strip()
        buf = ""
        if text.startswith("$ "):
            text = text[2:]
        if text:
            out.append((start, text))
    return out


def _open_quote(text):
    """Whether `text` ends inside a quoted string."""
    try:
        _words(text)
    except ValueError:
        return True
    return False


def _words(text):
    """The shell words of `text` (quotes as the shell reads them, a `#`
    comment dropped, `&&`, `;`, `|` and `&` as separate words)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = "#"
    return list(lex)


def _commands(text):
    """The simple commands of a shell line."""
    cmd, out = [], []
    for w in _words(text):
        if w in ("&&", "||", ";", "|", "&"):
            out.append(cmd)
            cmd = []
        else:
            cmd.append(w)
    out.append(cmd)
    return [c for c in out if c]


def _benchlake_args(cmd):
    """The arguments after `benchlake` in a simple command, or None when it
    does not run benchlake."""
    i = 0
    while i < len(cmd) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[i]):
        i += 1
    rest = cmd[i:]
    if rest[:1] == ["sudo"]:
        rest = rest[1:]
    if rest[:3] == ["cargo", "run", "--release"] and "--" in rest:
        return rest[rest.index("--") + 1:]
    if rest and rest[0] in ("mpirun", "srun", "mpiexec"):
        # `mpirun -np 64 benchlake pio …`: the program after the launcher's options.
        for j, w in enumerate(rest):
            if w == "benchlake" or w.endswith("/benchlake"):
                return rest[j + 1:]
        return None
    if rest and (rest[0] == "benchlake" or rest[0].endswith("/benchlake")):
        return rest[1:]
    return None


def fenced_commands():
    """(place, args) of every fenced benchlake command of the docs."""
    out = []
    for path in DOCS:
        for n, text in _fenced_lines(path):
            if SYNOPSIS.search(text):
                continue
            for cmd in _commands(text):
                args = _benchlake_args(cmd)
                if args is not None:
                    out.append((f"{path.relative_to(ROOT)}:{n}", [a for a in args if a not in ELIDED]))
    return out


def inline_commands():
    """(place, args) of every inline `benchlake …` span in the docs' prose,
    alternatives expanded and optional parts left out."""
    out = []
    for path in DOCS:
        text = path.read_text()
        # Blank the fenced blocks (keeping line numbers).
        text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        for m in re.finditer(r"`(benchlake [^`]+)`", text):
            line = text.count("\n", 0, m.start()) + 1
            span = m.group(1).replace("\\|", "|")
            span = re.sub(r"\[[^\]]*\]", " ", span)
            if "<" in span:
                continue  # `benchlake <command> --help`: a pattern, not a command
            try:
                words = shlex.split(span)[1:]
            except ValueError:
                words = span.split()[1:]
            words = [w for w in words if w not in ELIDED]
            variants = [[]]
            for w in words:
                alts = w.split("|") if "|" in w and not w.startswith("-") else [w]
                variants = [v + [a] for v in variants for a in alts if a]
            for v in variants:
                out.append((f"{path.relative_to(ROOT)}:{line}", v))
    return out


def check(args):
    """(exit code, stderr, clap error kind) of parsing `args`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    env["BENCHLAKE_CHECK_ARGS"] = "1"
    p = subprocess.run([BIN, *args], env=env, capture_output=True, text=True, timeout=60)
    kind = ""
    for line in p.stderr.splitlines():
        if line.startswith("check-args: "):
            kind = line.removeprefix("check-args: ")
    return p.returncode, p.stderr, kind


def test_the_extraction_finds_the_documented_commands():
    fenced = fenced_commands()
    places = {p.split(":")[0] for p, _ in fenced}
    # The README's quick tour and the docs with command examples.
    assert {"README.md", "docs/replay.md", "docs/slurm.md", "docs/linktest.md", "docs/io.md"} <= places, places
    assert len(fenced) >= 25, fenced
    assert ["replay", "dimemas", "app.dim", "--config", "machine.cfg"] in [a for _, a in fenced]
    assert len(inline_commands()) >= 100


def test_every_fenced_command_line_parses():
    bad = []
    for place, args in fenced_commands():
        code, err, _ = check(args)
        if code != 0:
            bad.append(f"{place}: benchlake {shlex.join(args)}\n{err.strip()}")
    assert not bad, "documented command lines that do not parse:\n\n" + "\n\n".join(bad)


# Inline spans may leave out required arguments and subcommands, ask for
# --help, and name a flag's value by a placeholder (`--ranks N`) or not at all
# (`--out …`).
INCOMPLETE = {"MissingRequiredArgument", "MissingSubcommand", "DisplayHelpOnMissingArgumentOrSubcommand",
              "DisplayHelp"}
PLACEHOLDER = re.compile(r"invalid value '[A-Z][A-Z0-9_]*' for|a value is required for")


def _incomplete(kind, err):
    return kind in INCOMPLETE or (kind in ("ValueValidation", "InvalidValue") and PLACEHOLDER.search(err))


def test_every_inline_command_names_real_commands_and_flags():
    bad = []
    for place, args in inline_commands():
        code, err, kind = check(args)
        if code != 0 and not _incomplete(kind, err):
            bad.append(f"{place}: benchlake {shlex.join(args)} ({kind or 'exit ' + str(code)})\n{err.strip()}")
    assert not bad, "documented commands that name no command or flag of benchlake:\n\n" + "\n\n".join(bad)


def test_a_broken_command_line_is_caught():
    # The checker itself: a renamed flag, a missing subcommand and a bad value fail.
    assert check(["run", "submit", "hostinfo", "--no-such-flag"])[2] == "UnknownArgument"
    assert check(["runz", "list"])[2] == "InvalidSubcommand"
    assert check(["run", "submit", "hostinfo", "--count", "x"])[2] == "ValueValidation"
    assert not _incomplete("ValueValidation", check(["run", "submit", "hostinfo", "--count", "x"])[1])
    assert _incomplete("ValueValidation", check(["run", "submit", "hostinfo", "--count", "N"])[1])
    assert check(["pio", "--np=x"])[0] == 2
    assert check(["replay", "dimemas", "app.dim", "--config", "machine.cfg"])[0] == 0


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_readme_quick_tour_runs_as_written(tmp_path):
    text = (ROOT / "README.md").read_text()
    block = text[text.index("## Quick tour"):]
    block = block[block.index("```sh") + len("```sh"):]
    block = block[:block.index("```")]
    tour = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
    assert tour[0] == "cargo build --release", tour
    assert tour[1].startswith("target/release/benchlake up &"), tour
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    env.update(BENCHLAKE_LISTEN=f"127.0.0.1:{port}", BENCHLAKE_COORDINATOR=f"127.0.0.1:{port}",
               BENCHLAKE_HTTP_ADDR="127.0.0.1:0")
    (tmp_path / "target" / "release").mkdir(parents=True)
    # The one substitution: the binary under test where `cargo build --release` puts it.
    os.symlink(BIN, tmp_path / "target" / "release" / "benchlake")
    up = subprocess.Popen(shlex.split(tour[1].split("&")[0]), cwd=tmp_path, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # Typed by hand, the next line comes after `up` is listening: wait
        # for its port as a reader would wait for the "benchlake is up" line.
        deadline = time.monotonic() + 120
        while True:
            assert up.poll() is None, f"benchlake up ended: {up.stderr.read()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "benchlake up did not listen within 120 s"
                time.sleep(0.2)
        for line in tour[2:]:
            if line.startswith("duckdb ") and shutil.which("duckdb") is None:
                # The DuckDB CLI is not installed here: the same query through
                # DuckDB's Python package (test_docs.py runs every doc query too).
                import duckdb

                q = _words(line)[2]
                rows = duckdb.connect().execute(q.replace("benchlake-data/", str(tmp_path / "benchlake-data") + "/")).fetchall()
                assert len(rows) >= 1, line
                continue
            t0 = time.monotonic()
            p = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, f"{line}\nexit {p.returncode} after {time.monotonic() - t0:.1f} s\n{p.stdout}\n{p.stderr}"
            if "agents list" in line:
                assert "ONLINE" in p.stdout and "hostinfo" in p.stdout, p.stdout
            if "run submit" in line:
                assert "SUCCEEDED" in p.stdout + p.stderr, p.stdout + p.stderr
            if "tables list" in line:
                assert "node_facts" in p.stdout, p.stdout
    finally:
        up.terminate()
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()

"""deploy/: the systemd units pass `systemd-analyze verify` and keep their
hardening score; the example configurations are valid for every service; the
install layout (bin/ and lib/benchlake/) works when copied anywhere: the demo
finds the tracer library through it and lands a traced run."""
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from conftest import BIN, require_under_ci

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Exposure scores of `systemd-analyze security` (0 = locked down, 10 = exposed):
# the agent runs benchmarks (MPI, devices, file systems under test), so it is
# allowed more.
MAX_EXPOSURE = {"coordinator": 2.0, "worker": 2.0, "agent": 5.5}


def analyze():
    exe = shutil.which("systemd-analyze")
    if exe is None:
        # a failure under CI=true (conftest.py's pytest_runtest_makereport)
        pytest.skip("systemd-analyze not installed (scripts/test.sh installs systemd)")
    return exe


@pytest.mark.parametrize("service", sorted(MAX_EXPOSURE))
def test_units_verify_and_stay_hardened(tmp_path, service):
    exe = analyze()
    text = (DEPLOY / "systemd" / f"benchlake-{service}.service").read_text()
    assert f"ExecStart=/usr/local/bin/benchlake {service}" in text
    assert "User=benchlake" in text and "Restart=always" in text and "PrivateTmp=yes" in text
    assert "Environment=BENCHLAKE_CONFIG=/etc/benchlake/benchlake.toml" in text
    # verify needs the ExecStart binary to exist: point it at the build.
    unit = tmp_path / f"benchlake-{service}.service"
    unit.write_text(text.replace("/usr/local/bin/benchlake", BIN))
    r = subprocess.run([exe, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and unit.name not in r.stderr, r.stdout + r.stderr
    r = subprocess.run([exe, "security", "--offline=true", str(unit)], capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    score = float(m.group(1))
    print(f"{service}: exposure {score}")
    assert score <= MAX_EXPOSURE[service], r.stdout


@pytest.mark.parametrize("site", ["small-site", "large-site"])
def test_example_configurations_are_valid_for_every_service(site):
    path = DEPLOY / "config" / f"{site}.toml"
    cfg = tomllib.loads(path.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    for command in ("coordinator", "worker", "agent"):
        r = subprocess.run([BIN, "--config", str(path), "config", "show", command], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        # Every key of the command's own table and of [all] that the command
        # has is taken from the file.
        keys = dict(cfg.get(command, {}))
        for k, v in keys.items():
            assert re.search(rf"^{k} = .*  # file", r.stdout, re.M), (command, k, r.stdout)
        for k in cfg.get("all", {}):
            if re.search(rf"^(# )?{k} = ", r.stdout, re.M):
                assert re.search(rf"^{k} = .*  # file", r.stdout, re.M), (command, k, r.stdout)
    # A user command picks up the coordinator list.
    r = subprocess.run([BIN, "--config", str(path), "config", "show", "run", "list"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f'coordinator = "{cfg["all"]["coordinator"]}"  # file' in r.stdout, r.stdout


def test_installed_tree_runs_the_demo_from_anywhere(tmp_path):
    prefix = tmp_path / "opt" / "benchlake"
    build = Path(BIN).parent
    r = subprocess.run(["bash", str(DEPLOY / "install.sh"), "--from", str(build), str(prefix)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    exe = prefix / "bin" / "benchlake"
    assert exe.is_file()
    # Installed without debug information, the symbols kept (backtraces name functions).
    if require_under_ci(shutil.which("readelf"), "readelf (binutils) missing"):
        sections = subprocess.run(["readelf", "-S", "-W", str(exe)], capture_output=True,
                                  text=True, check=True).stdout
        assert ".debug_info" not in sections and ".debug_line" not in sections, sections
        assert ".symtab" in sections, sections
    assert (prefix / "share" / "benchlake" / "systemd" / "benchlake-coordinator.service").is_file()
    assert (prefix / "share" / "doc" / "benchlake" / "configuration.md").is_file()
    catalogs = prefix / "share" / "benchlake" / "catalogs"
    assert {p.name for p in catalogs.glob("*.toml")} >= {"ior.toml", "linktest.toml", "builtin.toml"}
    assert '[[benchmark]]\nname = "hostinfo"' in (catalogs / "builtin.toml").read_text()
    assert (prefix / "share" / "man" / "man1" / "benchlake-coordinator.1").is_file()
    assert "_benchlake()" in (prefix / "share" / "bash-completion" / "completions" / "benchlake").read_text()
    replay_completion = (prefix / "share" / "bash-completion" / "completions" / "benchlake-replay").read_text()
    assert "-o default benchlake-replay\n" in replay_completion and "dimemas" in replay_completion
    assert "submit" not in replay_completion, "the replay-only binary has no submit"
    assert "benchlake-replay" in (prefix / "share" / "man" / "man1" / "benchlake-replay.1").read_text()
    lib = prefix / "lib" / "benchlake" / "libbenchlake_tracer.so"
    # The copied tree is all the demo has: nothing beside the build is found.
    moved = tmp_path / "elsewhere"
    shutil.move(str(prefix), str(moved))
    exe = moved / "bin" / "benchlake"
    lib = moved / "lib" / "benchlake" / "libbenchlake_tracer.so"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHLAKE_")}
    r = subprocess.run([str(exe), "up", "--demo", "--data", str(tmp_path / "data")], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "landed" in r.stdout, r.stdout
    if require_under_ci(lib.is_file(), f"the installed tree has no tracer library ({lib})"):
        m = re.search(r"^tracer library: (.+)$", r.stdout, re.M)
        assert m and Path(m.group(1)).resolve() == lib.resolve(), r.stdout
        if require_under_ci(shutil.which("mpicc") and shutil.which("mpirun"), "mpicc/mpirun missing"):
            assert "submitted traced run" in r.stdout, r.stdout
    else:
        assert "skipping the traced demo run" in r.stdout, r.stdout


def test_the_release_profile_strips_debug_information():
    """Issue 35 item 12: the release binary was 296 MB with line tables. The profile
    builds without debug information and strips what the standard library brings,
    keeping the symbols (README, "Install"); no release build runs in the tests."""
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    release = cargo["profile"]["release"]
    assert release.get("debug") is False, release
    assert release.get("strip") == "debuginfo", release
    # install.sh strips whatever build it installs the same way.
    assert 'strip --strip-debug "$1"' in (DEPLOY / "install.sh").read_text()

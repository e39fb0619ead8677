"""The coordinator's state directory: a read-only one is refused with a message
that says so (not SQLite's "unable to open database file")."""
import shutil
import subprocess

import pytest

from conftest import BIN, free_port


def test_read_only_state_directory_says_so(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare is missing")
    state = tmp_path / "state"
    state.mkdir()
    # A private mount namespace: the read-only bind mount is seen by this
    # command alone and vanishes with it.
    script = (
        f'mount --bind "{state}" "{state}" && mount -o remount,ro,bind "{state}" && '
        f'exec "{BIN}" coordinator --listen 127.0.0.1:{free_port()} '
        f'--state "{state}/state.db" --lake "{tmp_path}/lake"'
    )
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f'mount --bind "{state}" "{state}"'],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mounts here: {probe.stderr.strip()}")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r
    err = r.stderr + r.stdout
    assert f"state directory {state} is read-only or not writable" in err, err
    assert "Read-only file system" in err, err

"""The `mpirun` launcher with real Open MPI: the run's single task runs
`mpirun -np N --host …` on the first selected agent, with the host list of all
selected agents."""
import shutil

from conftest import Api


def test_mpirun_launcher_runs_ranks_over_the_selected_hosts(cluster, pb):
    assert shutil.which("mpirun"), "Open MPI (openmpi-bin) is not installed: run scripts/test.sh"
    mpi_env = {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "BENCHLAKE_MPIRUN": "mpirun --oversubscribe",
    }
    cluster.coordinator()
    cluster.agent("m1", mpi_env)
    cluster.agent("m2", mpi_env)
    cluster.worker("w1")
    api = Api(pb, cluster.addr)
    api.wait_agents(2)
    run = api.submit("mpi-hostname", {"np": "4"}, count=2)
    d = api.wait(run.run_id, timeout=120)
    assert d.run.state == pb["common"].RUN_STATE_SUCCEEDED, (d, cluster.log("m1"), cluster.log("m2"))
    # One task (the launcher's), naming both agents; four ranks printed their host.
    assert len(d.tasks) == 1
    assert sorted(d.run.agents) == ["m1", "m2"]
    lines = [l for l in d.tasks[0].stdout_tail.splitlines() if l.strip()]
    assert len(lines) == 4, d.tasks[0].stdout_tail

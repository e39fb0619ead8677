/* Controls test program for the benchlake tracer (Bandela manual's API): on every rank
 *   Barrier (A); bandela_end(); Bcast (B, outside the window); bandela_start();
 *   bandela_caliper(2,0); work; Allreduce (C, 1st Allreduce); bandela_caliper(0,0);
 *   bandela_ignore_next_col(1,0); Bcast (D); bandela_ignore_next_col(1,0); Barrier (E);
 *   6 x { work; Allreduce } (2nd..7th Allreduce).
 * The controls are declared weak (bandela.h): the program also runs untraced. */
#include <mpi.h>
#include "bandela.h"

static volatile double sink;
static void work(int n) {
    double x = 0;
    for (int i = 0; i < n * 1000; i++) x += i * 0.5;
    sink = x;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int v[16] = {0}, w[16];
    MPI_Barrier(MPI_COMM_WORLD);
    BANDELA_CALL(bandela_end);
    MPI_Bcast(v, 16, MPI_INT, 0, MPI_COMM_WORLD);
    BANDELA_CALL(bandela_start);
    BANDELA_CALL(bandela_caliper, 2, 0);
    work(200);
    MPI_Allreduce(v, w, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    BANDELA_CALL(bandela_caliper, 0, 0);
    BANDELA_CALL(bandela_ignore_next_col, 1, 0);
    MPI_Bcast(v, 8, MPI_INT, 0, MPI_COMM_WORLD);
    BANDELA_CALL(bandela_ignore_next_col, 1, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 6; i++) {
        work(20);
        MPI_Allreduce(v, w, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}

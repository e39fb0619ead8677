/* Overhead benchmark program: ranks 0 and 1 exchange an 8-byte message ITER times
 * with MPI_Irecv + MPI_Isend + MPI_Wait + MPI_Wait (4 intercepted calls per
 * iteration); rank 0 prints the loop's wall time in nanoseconds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    double a = 1, b;
    int peer = 1 - r;
    MPI_Request q[2];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++) {
        MPI_Irecv(&b, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(&a, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD, &q[1]);
        MPI_Wait(&q[1], MPI_STATUS_IGNORE);
        MPI_Wait(&q[0], MPI_STATUS_IGNORE);
    }
    double t1 = MPI_Wtime();
    if (r == 0) printf("loop_ns %.0f\n", (t1 - t0) * 1e9);
    MPI_Finalize();
    return 0;
}

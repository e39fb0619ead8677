/* Collective test program for the benchlake tracer. Every rank r of N calls, on
 * MPI_COMM_WORLD unless said otherwise:
 *   Barrier; Bcast 1000 int from root 1%N; Reduce 10 double to root 0; Allreduce 3
 *   double; Gather 5 int to root 0; Gatherv r+1 int to root 0; Scatter 2 int from
 *   root 0; Scatterv r+1 char from root N-1; Allgather 1 int; Allgatherv r+1 short;
 *   Alltoall 2 int;
 *   Comm_split(color r%2, key r) -> sub; Allreduce 1 int on sub; Comm_dup(WORLD) ->
 *   dup; Barrier on dup;
 *   Alltoallv (int) twice on WORLD, r sends (r+j)%3 ints to j;
 *   Alltoallv (char) on WORLD, r sends (r*j)%2+1 chars to j;
 *   Alltoallv (int) on sub, 1 int to every member. */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int big[1000] = {0}, ib[64] = {0}, *iall = calloc((size_t)n * 64, sizeof(int));
    double d[10] = {0}, d2[10];
    char *call = calloc((size_t)n * 64, 1);
    short sh[64] = {0}, *shall = calloc((size_t)n * 64, sizeof(short));
    int *cnt = calloc((size_t)n, sizeof(int)), *dsp = calloc((size_t)n, sizeof(int));
    int *sc = calloc((size_t)n, sizeof(int)), *sd = calloc((size_t)n, sizeof(int));
    int *rc = calloc((size_t)n, sizeof(int)), *rd = calloc((size_t)n, sizeof(int));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Bcast(big, 1000, MPI_INT, 1 % n, MPI_COMM_WORLD);
    MPI_Reduce(d, d2, 10, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Allreduce(d, d2, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Gather(ib, 5, MPI_INT, iall, 5, MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++) { cnt[i] = i + 1; dsp[i] = i * 64; }
    MPI_Gatherv(ib, r + 1, MPI_INT, iall, cnt, dsp, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Scatter(iall, 2, MPI_INT, ib, 2, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Scatterv(call, cnt, dsp, MPI_CHAR, ib, r + 1, MPI_CHAR, n - 1, MPI_COMM_WORLD);
    MPI_Allgather(ib, 1, MPI_INT, iall, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Allgatherv(sh, r + 1, MPI_SHORT, shall, cnt, dsp, MPI_SHORT, MPI_COMM_WORLD);
    MPI_Alltoall(iall, 2, MPI_INT, iall + n * 32, 2, MPI_INT, MPI_COMM_WORLD);
    MPI_Comm sub, dup;
    MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &sub);
    int one = 1, sum;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, sub);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Barrier(dup);
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < n; j++) {
            sc[j] = (r + j) % 3; sd[j] = j * 8;
            rc[j] = (j + r) % 3; rd[j] = j * 8;
        }
        MPI_Alltoallv(iall, sc, sd, MPI_INT, iall + n * 32, rc, rd, MPI_INT, MPI_COMM_WORLD);
    }
    for (int j = 0; j < n; j++) {
        sc[j] = (r * j) % 2 + 1; sd[j] = j * 8;
        rc[j] = (j * r) % 2 + 1; rd[j] = j * 8;
    }
    MPI_Alltoallv(call, sc, sd, MPI_CHAR, call + n * 32, rc, rd, MPI_CHAR, MPI_COMM_WORLD);
    int sn;
    MPI_Comm_size(sub, &sn);
    for (int j = 0; j < sn; j++) { sc[j] = 1; sd[j] = j; rc[j] = 1; rd[j] = j; }
    MPI_Alltoallv(iall, sc, sd, MPI_INT, iall + n * 32, rc, rd, MPI_INT, sub);
    MPI_Comm_free(&sub);
    MPI_Comm_free(&dup);
    MPI_Finalize();
    return 0;
}

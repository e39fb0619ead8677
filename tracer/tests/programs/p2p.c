/* Point-to-point test program for the benchlake tracer. Every rank r of N:
 *   1. MPI_Send 100 int (400 B) tag 10 to right, MPI_Recv from left (even ranks send
 *      first, odd ranks receive first);
 *   2. MPI_Irecv from left and right, MPI_Isend to right and left, 1000 double
 *      (8000 B) tag 20, MPI_Waitall;
 *   3. MPI_Irecv(MPI_ANY_SOURCE) 4 int tag 30, MPI_Isend 4 int (16 B) to right,
 *      MPI_Wait on the send, MPI_Test loop on the receive;
 *   4. MPI_Sendrecv 3 char tag 40 to right / from left;
 *   5. MPI_Ssend 8 B tag 50 to right / MPI_Recv from left, ordered as in 1.
 * right = (r+1)%N, left = (r-1+N)%N. */
#include <mpi.h>
#include <stdio.h>

static volatile double sink;
static void work(int n) {
    double x = 0;
    for (int i = 0; i < n * 1000; i++) x += i * 0.5;
    sink = x;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    int ibuf[100] = {0}, ibuf2[100];
    double d1[1000] = {0}, d2[1000] = {0}, d3[1000], d4[1000];
    work(50);
    if (r % 2 == 0) {
        MPI_Send(ibuf, 100, MPI_INT, right, 10, MPI_COMM_WORLD);
        MPI_Recv(ibuf2, 100, MPI_INT, left, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(ibuf2, 100, MPI_INT, left, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(ibuf, 100, MPI_INT, right, 10, MPI_COMM_WORLD);
    }
    work(20);
    MPI_Request q[4];
    MPI_Irecv(d3, 1000, MPI_DOUBLE, left, 20, MPI_COMM_WORLD, &q[0]);
    MPI_Irecv(d4, 1000, MPI_DOUBLE, right, 20, MPI_COMM_WORLD, &q[1]);
    MPI_Isend(d1, 1000, MPI_DOUBLE, right, 20, MPI_COMM_WORLD, &q[2]);
    MPI_Isend(d2, 1000, MPI_DOUBLE, left, 20, MPI_COMM_WORLD, &q[3]);
    MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
    work(20);
    int a[4] = {1, 2, 3, 4}, b[4];
    MPI_Request rr, sr;
    MPI_Irecv(b, 4, MPI_INT, MPI_ANY_SOURCE, 30, MPI_COMM_WORLD, &rr);
    MPI_Isend(a, 4, MPI_INT, right, 30, MPI_COMM_WORLD, &sr);
    MPI_Wait(&sr, MPI_STATUS_IGNORE);
    int flag = 0;
    while (!flag) MPI_Test(&rr, &flag, MPI_STATUS_IGNORE);
    char c[3] = "ab", c2[3];
    MPI_Sendrecv(c, 3, MPI_CHAR, right, 40, c2, 3, MPI_CHAR, left, 40, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    double s = 1, s2;
    if (r % 2 == 0) {
        MPI_Ssend(&s, 1, MPI_DOUBLE, right, 50, MPI_COMM_WORLD);
        MPI_Recv(&s2, 1, MPI_DOUBLE, left, 50, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(&s2, 1, MPI_DOUBLE, left, 50, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Ssend(&s, 1, MPI_DOUBLE, right, 50, MPI_COMM_WORLD);
    }
    work(10);
    MPI_Finalize();
    return 0;
}

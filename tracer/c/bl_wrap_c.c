/* benchlake tracer: the C bindings. Each wrapper times the PMPI routine and hands
 * the call's description to a recorder of bl_core.c. Before MPI_Init and after
 * MPI_Finalize the wrappers only forward. */
#include "bl_internal.h"

#include <stdlib.h>
#include <string.h>

#define LIVE (bl.initialized && !bl.finalized)

static int *scratch_done;

static void scratch(int n) {
    if ((size_t)n <= bl.scratch_cap) return;
    size_t c = (size_t)n * 2;
    MPI_Request *r = realloc(bl.scratch_req, c * sizeof *r);
    if (r) bl.scratch_req = r;
    MPI_Status *s = realloc(bl.scratch_st, c * sizeof *s);
    if (s) bl.scratch_st = s;
    int *d = realloc(scratch_done, c * sizeof *d);
    if (d) scratch_done = d;
    if (r && s && d) bl.scratch_cap = c;
    else PMPI_Abort(MPI_COMM_WORLD, 70);
}

static int comm_size(MPI_Comm c) {
    int n = 0;
    PMPI_Comm_size(c, &n);
    return n;
}

static int comm_rank(MPI_Comm c) {
    int r = 0;
    PMPI_Comm_rank(c, &r);
    return r;
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) bl_init_after(BL_FN_INIT);
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) bl_init_after(BL_FN_INIT);
    return rc;
}

int MPI_Finalize(void) {
    if (LIVE) bl_finalize_before();
    return PMPI_Finalize();
}

int MPI_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    if (!LIVE) return PMPI_Send(buf, count, dt, dest, tag, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Send(buf, count, dt, dest, tag, comm);
    uint64_t t1 = bl_now();
    bl_rec_send(BL_FN_SEND, t0, t1, 0, dest, tag, comm, bl_type_bytes(count, dt));
    return rc;
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    if (!LIVE) return PMPI_Ssend(buf, count, dt, dest, tag, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Ssend(buf, count, dt, dest, tag, comm);
    uint64_t t1 = bl_now();
    bl_rec_send(BL_FN_SSEND, t0, t1, 1, dest, tag, comm, bl_type_bytes(count, dt));
    return rc;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
              MPI_Request *req) {
    if (!LIVE) return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
    uint64_t t0 = bl_now();
    int rc = PMPI_Isend(buf, count, dt, dest, tag, comm, req);
    uint64_t t1 = bl_now();
    bl_rec_isend(BL_FN_ISEND, t0, t1, dest, tag, comm, bl_type_bytes(count, dt), *req);
    return rc;
}

int MPI_Recv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,
             MPI_Status *status) {
    if (!LIVE) return PMPI_Recv(buf, count, dt, src, tag, comm, status);
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    uint64_t t0 = bl_now();
    int rc = PMPI_Recv(buf, count, dt, src, tag, comm, st);
    uint64_t t1 = bl_now();
    int got = 0;
    PMPI_Get_count(st, MPI_BYTE, &got);
    bl_rec_recv(BL_FN_RECV, t0, t1, src, tag, comm, bl_type_bytes(count, dt), st->MPI_SOURCE,
                st->MPI_TAG, got > 0 ? (uint64_t)got : 0);
    return rc;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,
              MPI_Request *req) {
    if (!LIVE) return PMPI_Irecv(buf, count, dt, src, tag, comm, req);
    uint64_t t0 = bl_now();
    int rc = PMPI_Irecv(buf, count, dt, src, tag, comm, req);
    uint64_t t1 = bl_now();
    bl_rec_irecv(BL_FN_IRECV, t0, t1, src, tag, comm, bl_type_bytes(count, dt), *req);
    return rc;
}

int MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag, void *rbuf,
                 int rcount, MPI_Datatype rtype, int src, int rtag, MPI_Comm comm,
                 MPI_Status *status) {
    if (!LIVE)
        return PMPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm,
                             status);
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    uint64_t t0 = bl_now();
    int rc = PMPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, st);
    uint64_t t1 = bl_now();
    int got = 0;
    PMPI_Get_count(st, MPI_BYTE, &got);
    bl_rec_sendrecv(t0, t1, dest, stag, bl_type_bytes(scount, stype), src, rtag,
                    bl_type_bytes(rcount, rtype), comm, st->MPI_SOURCE, st->MPI_TAG,
                    got > 0 ? (uint64_t)got : 0);
    return rc;
}

int MPI_Wait(MPI_Request *req, MPI_Status *status) {
    if (!LIVE) return PMPI_Wait(req, status);
    MPI_Request before = *req;
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    uint64_t t0 = bl_now();
    int rc = PMPI_Wait(req, st);
    uint64_t t1 = bl_now();
    int done = 1;
    bl_rec_complete(BL_FN_WAIT, t0, t1, 1, &before, st, &done);
    return rc;
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[]) {
    if (!LIVE || n <= 0) return PMPI_Waitall(n, reqs, sts);
    scratch(n);
    memcpy(bl.scratch_req, reqs, (size_t)n * sizeof *reqs);
    MPI_Status *st = sts == MPI_STATUSES_IGNORE ? bl.scratch_st : sts;
    uint64_t t0 = bl_now();
    int rc = PMPI_Waitall(n, reqs, st);
    uint64_t t1 = bl_now();
    for (int i = 0; i < n; i++) scratch_done[i] = 1;
    bl_rec_complete(BL_FN_WAITALL, t0, t1, n, bl.scratch_req, st, scratch_done);
    return rc;
}

int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *status) {
    if (!LIVE || n <= 0) return PMPI_Waitany(n, reqs, index, status);
    scratch(n);
    memcpy(bl.scratch_req, reqs, (size_t)n * sizeof *reqs);
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    uint64_t t0 = bl_now();
    int rc = PMPI_Waitany(n, reqs, index, st);
    uint64_t t1 = bl_now();
    if (*index != MPI_UNDEFINED && *index >= 0 && *index < n) {
        int done = 1;
        bl_rec_complete(BL_FN_WAITANY, t0, t1, 1, &bl.scratch_req[*index], st, &done);
    } else {
        bl_rec_complete(BL_FN_WAITANY, t0, t1, 0, NULL, NULL, NULL);
    }
    return rc;
}

static void some_done(int fn, uint64_t t0, uint64_t t1, int n, int outcount, const int *idx,
                      MPI_Status *st) {
    /* completed requests with their statuses in outcount order */
    if (outcount == MPI_UNDEFINED || outcount <= 0) {
        for (int i = 0; i < n; i++) scratch_done[i] = 0;
        bl_rec_complete(fn, t0, t1, n, bl.scratch_req, NULL, scratch_done);
        return;
    }
    MPI_Request *sel = malloc((size_t)outcount * sizeof *sel);
    int *one = malloc((size_t)outcount * sizeof *one);
    if (!sel || !one) PMPI_Abort(MPI_COMM_WORLD, 70);
    for (int i = 0; i < outcount; i++) {
        sel[i] = bl.scratch_req[idx[i]];
        one[i] = 1;
    }
    bl_rec_complete(fn, t0, t1, outcount, sel, st, one);
    free(sel);
    free(one);
}

int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]) {
    if (!LIVE || n <= 0) return PMPI_Waitsome(n, reqs, outcount, idx, sts);
    scratch(n);
    memcpy(bl.scratch_req, reqs, (size_t)n * sizeof *reqs);
    MPI_Status *st = sts == MPI_STATUSES_IGNORE ? bl.scratch_st : sts;
    uint64_t t0 = bl_now();
    int rc = PMPI_Waitsome(n, reqs, outcount, idx, st);
    uint64_t t1 = bl_now();
    some_done(BL_FN_WAITSOME, t0, t1, n, *outcount, idx, st);
    return rc;
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status) {
    if (!LIVE) return PMPI_Test(req, flag, status);
    MPI_Request before = *req;
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    uint64_t t0 = bl_now();
    int rc = PMPI_Test(req, flag, st);
    uint64_t t1 = bl_now();
    int done = *flag != 0;
    bl_rec_complete(BL_FN_TEST, t0, t1, 1, &before, done ? st : NULL, &done);
    return rc;
}

int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[]) {
    if (!LIVE || n <= 0) return PMPI_Testall(n, reqs, flag, sts);
    scratch(n);
    memcpy(bl.scratch_req, reqs, (size_t)n * sizeof *reqs);
    MPI_Status *st = sts == MPI_STATUSES_IGNORE ? bl.scratch_st : sts;
    uint64_t t0 = bl_now();
    int rc = PMPI_Testall(n, reqs, flag, st);
    uint64_t t1 = bl_now();
    for (int i = 0; i < n; i++) scratch_done[i] = *flag != 0;
    bl_rec_complete(BL_FN_TESTALL, t0, t1, n, bl.scratch_req, *flag ? st : NULL, scratch_done);
    return rc;
}

int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *status) {
    if (!LIVE || n <= 0) return PMPI_Testany(n, reqs, index, flag, status);
    scratch(n);
    memcpy(bl.scratch_req, reqs, (size_t)n * sizeof *reqs);
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    uint64_t t0 = bl_now();
    int rc = PMPI_Testany(n, reqs, index, flag, st);
    uint64_t t1 = bl_now();
    if (*flag && *index != MPI_UNDEFINED && *index >= 0 && *index < n) {
        int done = 1;
        bl_rec_complete(BL_FN_TESTANY, t0, t1, 1, &bl.scratch_req[*index], st, &done);
    } else {
        for (int i = 0; i < n; i++) scratch_done[i] = 0;
        bl_rec_complete(BL_FN_TESTANY, t0, t1, n, bl.scratch_req, NULL, scratch_done);
    }
    return rc;
}

int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]) {
    if (!LIVE || n <= 0) return PMPI_Testsome(n, reqs, outcount, idx, sts);
    scratch(n);
    memcpy(bl.scratch_req, reqs, (size_t)n * sizeof *reqs);
    MPI_Status *st = sts == MPI_STATUSES_IGNORE ? bl.scratch_st : sts;
    uint64_t t0 = bl_now();
    int rc = PMPI_Testsome(n, reqs, outcount, idx, st);
    uint64_t t1 = bl_now();
    some_done(BL_FN_TESTSOME, t0, t1, n, *outcount, idx, st);
    return rc;
}

int MPI_Barrier(MPI_Comm comm) {
    if (!LIVE) return PMPI_Barrier(comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Barrier(comm);
    uint64_t t1 = bl_now();
    bl_rec_barrier(t0, t1, comm);
    return rc;
}

int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm) {
    if (!LIVE) return PMPI_Bcast(buf, count, dt, root, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Bcast(buf, count, dt, root, comm);
    uint64_t t1 = bl_now();
    uint64_t m = bl_type_bytes(count, dt);
    bl_rec_coll(BL_FN_BCAST, t0, t1, comm, root, m, m, NULL, 0);
    return rc;
}

int MPI_Reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op, int root,
               MPI_Comm comm) {
    if (!LIVE) return PMPI_Reduce(sbuf, rbuf, count, dt, op, root, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Reduce(sbuf, rbuf, count, dt, op, root, comm);
    uint64_t t1 = bl_now();
    uint64_t m = bl_type_bytes(count, dt);
    bl_rec_coll(BL_FN_REDUCE, t0, t1, comm, root, m, m, NULL, 0);
    return rc;
}

int MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op,
                  MPI_Comm comm) {
    if (!LIVE) return PMPI_Allreduce(sbuf, rbuf, count, dt, op, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Allreduce(sbuf, rbuf, count, dt, op, comm);
    uint64_t t1 = bl_now();
    uint64_t m = bl_type_bytes(count, dt);
    bl_rec_coll(BL_FN_ALLREDUCE, t0, t1, comm, -1, m, m, NULL, 0);
    return rc;
}

int MPI_Gather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
               MPI_Datatype rtype, int root, MPI_Comm comm) {
    if (!LIVE) return PMPI_Gather(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Gather(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
    uint64_t t1 = bl_now();
    int me = comm_rank(comm);
    uint64_t rb = me == root ? bl_type_bytes(rcount, rtype) : 0;
    uint64_t sb = sbuf == MPI_IN_PLACE ? rb : bl_type_bytes(scount, stype);
    bl_rec_coll(BL_FN_GATHER, t0, t1, comm, root, sb, rb, NULL, 0);
    return rc;
}

int MPI_Gatherv(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf,
                const int rcounts[], const int displs[], MPI_Datatype rtype, int root,
                MPI_Comm comm) {
    if (!LIVE) return PMPI_Gatherv(sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Gatherv(sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm);
    uint64_t t1 = bl_now();
    int me = comm_rank(comm), n = comm_size(comm);
    if (me == root) {
        int64_t *p = malloc((size_t)n * 8);
        if (!p) PMPI_Abort(MPI_COMM_WORLD, 70);
        uint64_t tot = 0;
        for (int i = 0; i < n; i++) tot += (uint64_t)(p[i] = (int64_t)bl_type_bytes(rcounts[i], rtype));
        bl_rec_coll(BL_FN_GATHERV, t0, t1, comm, root, (uint64_t)p[me], tot, p, (uint32_t)n);
        free(p);
    } else {
        bl_rec_coll(BL_FN_GATHERV, t0, t1, comm, root, bl_type_bytes(scount, stype), 0, NULL, 0);
    }
    return rc;
}

int MPI_Scatter(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                MPI_Datatype rtype, int root, MPI_Comm comm) {
    if (!LIVE) return PMPI_Scatter(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Scatter(sbuf, scount, stype, rbuf, rcount, rtype, root, comm);
    uint64_t t1 = bl_now();
    int me = comm_rank(comm);
    uint64_t sb = me == root ? bl_type_bytes(scount, stype) : 0;
    uint64_t rb = rbuf == MPI_IN_PLACE ? sb : bl_type_bytes(rcount, rtype);
    bl_rec_coll(BL_FN_SCATTER, t0, t1, comm, root, sb, rb, NULL, 0);
    return rc;
}

int MPI_Scatterv(const void *sbuf, const int scounts[], const int displs[], MPI_Datatype stype,
                 void *rbuf, int rcount, MPI_Datatype rtype, int root, MPI_Comm comm) {
    if (!LIVE) return PMPI_Scatterv(sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Scatterv(sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm);
    uint64_t t1 = bl_now();
    int me = comm_rank(comm), n = comm_size(comm);
    if (me == root) {
        int64_t *p = malloc((size_t)n * 8);
        if (!p) PMPI_Abort(MPI_COMM_WORLD, 70);
        uint64_t tot = 0;
        for (int i = 0; i < n; i++) tot += (uint64_t)(p[i] = (int64_t)bl_type_bytes(scounts[i], stype));
        bl_rec_coll(BL_FN_SCATTERV, t0, t1, comm, root, tot, (uint64_t)p[me], p, (uint32_t)n);
        free(p);
    } else {
        bl_rec_coll(BL_FN_SCATTERV, t0, t1, comm, root, 0, bl_type_bytes(rcount, rtype), NULL, 0);
    }
    return rc;
}

int MPI_Allgather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                  MPI_Datatype rtype, MPI_Comm comm) {
    if (!LIVE) return PMPI_Allgather(sbuf, scount, stype, rbuf, rcount, rtype, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Allgather(sbuf, scount, stype, rbuf, rcount, rtype, comm);
    uint64_t t1 = bl_now();
    uint64_t rb = bl_type_bytes(rcount, rtype);
    bl_rec_coll(BL_FN_ALLGATHER, t0, t1, comm, -1, rb, rb, NULL, 0);
    return rc;
}

int MPI_Allgatherv(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf,
                   const int rcounts[], const int displs[], MPI_Datatype rtype, MPI_Comm comm) {
    if (!LIVE) return PMPI_Allgatherv(sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Allgatherv(sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm);
    uint64_t t1 = bl_now();
    int me = comm_rank(comm), n = comm_size(comm);
    int64_t *p = malloc((size_t)n * 8);
    if (!p) PMPI_Abort(MPI_COMM_WORLD, 70);
    uint64_t tot = 0;
    for (int i = 0; i < n; i++) tot += (uint64_t)(p[i] = (int64_t)bl_type_bytes(rcounts[i], rtype));
    bl_rec_coll(BL_FN_ALLGATHERV, t0, t1, comm, -1, (uint64_t)p[me], tot, p, (uint32_t)n);
    free(p);
    return rc;
}

int MPI_Alltoall(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
                 MPI_Datatype rtype, MPI_Comm comm) {
    if (!LIVE) return PMPI_Alltoall(sbuf, scount, stype, rbuf, rcount, rtype, comm);
    uint64_t t0 = bl_now();
    int rc = PMPI_Alltoall(sbuf, scount, stype, rbuf, rcount, rtype, comm);
    uint64_t t1 = bl_now();
    uint64_t rb = bl_type_bytes(rcount, rtype);
    uint64_t sb = sbuf == MPI_IN_PLACE ? rb : bl_type_bytes(scount, stype);
    bl_rec_coll(BL_FN_ALLTOALL, t0, t1, comm, -1, sb, rb, NULL, 0);
    return rc;
}

int MPI_Alltoallv(const void *sbuf, const int scounts[], const int sdispls[], MPI_Datatype stype,
                  void *rbuf, const int rcounts[], const int rdispls[], MPI_Datatype rtype,
                  MPI_Comm comm) {
    if (!LIVE)
        return PMPI_Alltoallv(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm);
    double late = 0;
    if (bl.a2a_late && bl.active) {
        /* the profiler's late-arrival measure: time in a barrier before the call */
        uint64_t b0 = bl_now();
        PMPI_Barrier(comm);
        bl_calibrate();
        late = (double)bl_ticks_ns(bl_now() - b0) * 1e-9;
    }
    uint64_t t0 = bl_now();
    int rc = PMPI_Alltoallv(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm);
    uint64_t t1 = bl_now();
    bl_rec_a2av(t0, t1, comm, scounts, stype, rcounts, rtype, sbuf == MPI_IN_PLACE, late,
                bl.a2a_late);
    return rc;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *nc) {
    if (!LIVE) return PMPI_Comm_split(comm, color, key, nc);
    uint64_t t0 = bl_now();
    int rc = PMPI_Comm_split(comm, color, key, nc);
    uint64_t t1 = bl_now();
    if (rc == MPI_SUCCESS) bl_comm_created(BL_FN_COMM_SPLIT, t0, t1, nc);
    return rc;
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *nc) {
    if (!LIVE) return PMPI_Comm_dup(comm, nc);
    uint64_t t0 = bl_now();
    int rc = PMPI_Comm_dup(comm, nc);
    uint64_t t1 = bl_now();
    if (rc == MPI_SUCCESS) bl_comm_created(BL_FN_COMM_DUP, t0, t1, nc);
    return rc;
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *nc) {
    if (!LIVE) return PMPI_Comm_create(comm, group, nc);
    uint64_t t0 = bl_now();
    int rc = PMPI_Comm_create(comm, group, nc);
    uint64_t t1 = bl_now();
    if (rc == MPI_SUCCESS) bl_comm_created(BL_FN_COMM_CREATE, t0, t1, nc);
    return rc;
}

int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm *nc) {
    if (!LIVE) return PMPI_Comm_split_type(comm, type, key, info, nc);
    uint64_t t0 = bl_now();
    int rc = PMPI_Comm_split_type(comm, type, key, info, nc);
    uint64_t t1 = bl_now();
    if (rc == MPI_SUCCESS) bl_comm_created(BL_FN_COMM_SPLIT_TYPE, t0, t1, nc);
    return rc;
}

int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[], int reorder,
                    MPI_Comm *nc) {
    if (!LIVE) return PMPI_Cart_create(comm, ndims, dims, periods, reorder, nc);
    uint64_t t0 = bl_now();
    int rc = PMPI_Cart_create(comm, ndims, dims, periods, reorder, nc);
    uint64_t t1 = bl_now();
    if (rc == MPI_SUCCESS) bl_comm_created(BL_FN_CART_CREATE, t0, t1, nc);
    return rc;
}

int MPI_Cart_sub(MPI_Comm comm, const int remain[], MPI_Comm *nc) {
    if (!LIVE) return PMPI_Cart_sub(comm, remain, nc);
    uint64_t t0 = bl_now();
    int rc = PMPI_Cart_sub(comm, remain, nc);
    uint64_t t1 = bl_now();
    if (rc == MPI_SUCCESS) bl_comm_created(BL_FN_CART_SUB, t0, t1, nc);
    return rc;
}

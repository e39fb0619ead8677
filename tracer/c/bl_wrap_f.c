/* benchlake tracer: the Fortran (mpif.h / use mpi) bindings. Open MPI's Fortran
 * wrappers call the PMPI_ C routines directly, so C interposition does not see
 * Fortran calls: these wrappers replace mpi_xxx_ and call Open MPI's own pmpi_xxx_
 * (found with dlsym(RTLD_NEXT)), which keeps Fortran's MPI_IN_PLACE, MPI_BOTTOM and
 * status handling intact; handles are converted with MPI_*_f2c for the records. */
#define _GNU_SOURCE
#include "bl_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE (bl.initialized && !bl.finalized)
#define F MPI_Fint
#define FSTATUS_WORDS ((int)(sizeof(MPI_Status) / sizeof(MPI_Fint)))

static void *real(const char *name, void **cache) {
    if (!*cache) {
        *cache = dlsym(RTLD_NEXT, name);
        if (!*cache) *cache = dlsym(RTLD_DEFAULT, name);
        if (!*cache) {
            fprintf(stderr, "benchlake-tracer: Fortran symbol %s not found\n", name);
            abort();
        }
    }
    return *cache;
}
#define REAL(type, name) ((type)real("pmpi_" #name "_", &cache_##name))
#define CACHE(name) static void *cache_##name
/* each wrapper is exported as name_ and name__ (gfortran, g77-style) */
#define ALIAS(name, impl) \
    __attribute__((alias(#impl), visibility("default"))) typeof(impl) name##_; \
    __attribute__((alias(#impl), visibility("default"))) typeof(impl) name##__;

#include <stdio.h>

static uint64_t fbytes(const F *count, const F *type) {
    return bl_type_bytes((int)*count, MPI_Type_f2c(*type));
}

static int fstatus_ignored(const F *st) { return st == MPI_F_STATUS_IGNORE; }

CACHE(init);
static void f_init(F *ierr) {
    REAL(void (*)(F *), init)(ierr);
    if (*ierr == MPI_SUCCESS) bl_init_after(BL_FN_INIT);
}
ALIAS(mpi_init, f_init)

CACHE(init_thread);
static void f_init_thread(F *req, F *prov, F *ierr) {
    REAL(void (*)(F *, F *, F *), init_thread)(req, prov, ierr);
    if (*ierr == MPI_SUCCESS) bl_init_after(BL_FN_INIT);
}
ALIAS(mpi_init_thread, f_init_thread)

CACHE(finalize);
static void f_finalize(F *ierr) {
    if (LIVE) bl_finalize_before();
    REAL(void (*)(F *), finalize)(ierr);
}
ALIAS(mpi_finalize, f_finalize)

typedef void (*send_t)(void *, F *, F *, F *, F *, F *, F *);
CACHE(send);
static void f_send(void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(send_t, send)(buf, count, type, dest, tag, comm, ierr);
    uint64_t t1 = bl_now();
    if (LIVE) bl_rec_send(BL_FN_SEND, t0, t1, 0, *dest, *tag, MPI_Comm_f2c(*comm), fbytes(count, type));
}
ALIAS(mpi_send, f_send)

CACHE(ssend);
static void f_ssend(void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(send_t, ssend)(buf, count, type, dest, tag, comm, ierr);
    uint64_t t1 = bl_now();
    if (LIVE) bl_rec_send(BL_FN_SSEND, t0, t1, 1, *dest, *tag, MPI_Comm_f2c(*comm), fbytes(count, type));
}
ALIAS(mpi_ssend, f_ssend)

CACHE(recv);
static void f_recv(void *buf, F *count, F *type, F *src, F *tag, F *comm, F *st, F *ierr) {
    F local[16];
    F *s = fstatus_ignored(st) ? local : st;
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, F *, F *, F *, F *, F *, F *, F *), recv)(buf, count, type, src, tag, comm, s, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    MPI_Status cs;
    MPI_Status_f2c(s, &cs);
    int got = 0;
    PMPI_Get_count(&cs, MPI_BYTE, &got);
    bl_rec_recv(BL_FN_RECV, t0, t1, *src, *tag, MPI_Comm_f2c(*comm), fbytes(count, type),
                cs.MPI_SOURCE, cs.MPI_TAG, got > 0 ? (uint64_t)got : 0);
}
ALIAS(mpi_recv, f_recv)

typedef void (*isend_t)(void *, F *, F *, F *, F *, F *, F *, F *);
CACHE(isend);
static void f_isend(void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *req, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(isend_t, isend)(buf, count, type, dest, tag, comm, req, ierr);
    uint64_t t1 = bl_now();
    if (LIVE)
        bl_rec_isend(BL_FN_ISEND, t0, t1, *dest, *tag, MPI_Comm_f2c(*comm), fbytes(count, type),
                     MPI_Request_f2c(*req));
}
ALIAS(mpi_isend, f_isend)

CACHE(irecv);
static void f_irecv(void *buf, F *count, F *type, F *src, F *tag, F *comm, F *req, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(isend_t, irecv)(buf, count, type, src, tag, comm, req, ierr);
    uint64_t t1 = bl_now();
    if (LIVE)
        bl_rec_irecv(BL_FN_IRECV, t0, t1, *src, *tag, MPI_Comm_f2c(*comm), fbytes(count, type),
                     MPI_Request_f2c(*req));
}
ALIAS(mpi_irecv, f_irecv)

CACHE(wait);
static void f_wait(F *req, F *st, F *ierr) {
    MPI_Request before = MPI_Request_f2c(*req);
    F local[16];
    F *s = fstatus_ignored(st) ? local : st;
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *), wait)(req, s, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    MPI_Status cs;
    MPI_Status_f2c(s, &cs);
    int done = 1;
    bl_rec_complete(BL_FN_WAIT, t0, t1, 1, &before, &cs, &done);
}
ALIAS(mpi_wait, f_wait)

CACHE(waitall);
static void f_waitall(F *n, F *reqs, F *sts, F *ierr) {
    int cnt = (int)*n;
    MPI_Request *before = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *before);
    F *fs = malloc((size_t)(cnt > 0 ? cnt : 1) * FSTATUS_WORDS * sizeof(F));
    MPI_Status *cs = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *cs);
    int *done = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *done);
    if (!before || !fs || !cs || !done) abort();
    for (int i = 0; i < cnt; i++) before[i] = MPI_Request_f2c(reqs[i]);
    F *s = sts == MPI_F_STATUSES_IGNORE ? fs : sts;
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *), waitall)(n, reqs, s, ierr);
    uint64_t t1 = bl_now();
    if (LIVE) {
        for (int i = 0; i < cnt; i++) {
            MPI_Status_f2c(s + (size_t)i * FSTATUS_WORDS, &cs[i]);
            done[i] = 1;
        }
        bl_rec_complete(BL_FN_WAITALL, t0, t1, cnt, before, cs, done);
    }
    free(before);
    free(fs);
    free(cs);
    free(done);
}
ALIAS(mpi_waitall, f_waitall)

CACHE(test);
static void f_test(F *req, F *flag, F *st, F *ierr) {
    MPI_Request before = MPI_Request_f2c(*req);
    F local[16];
    F *s = fstatus_ignored(st) ? local : st;
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *), test)(req, flag, s, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    MPI_Status cs;
    int done = *flag != 0;
    if (done) MPI_Status_f2c(s, &cs);
    bl_rec_complete(BL_FN_TEST, t0, t1, 1, &before, done ? &cs : NULL, &done);
}
ALIAS(mpi_test, f_test)

CACHE(sendrecv);
static void f_sendrecv(void *sb, F *sc, F *stype, F *dest, F *stag, void *rb, F *rc, F *rtype,
                       F *src, F *rtag, F *comm, F *st, F *ierr) {
    F local[16];
    F *s = fstatus_ignored(st) ? local : st;
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, F *, F *, F *, F *, void *, F *, F *, F *, F *, F *, F *, F *), sendrecv)
    (sb, sc, stype, dest, stag, rb, rc, rtype, src, rtag, comm, s, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    MPI_Status cs;
    MPI_Status_f2c(s, &cs);
    int got = 0;
    PMPI_Get_count(&cs, MPI_BYTE, &got);
    bl_rec_sendrecv(t0, t1, *dest, *stag, fbytes(sc, stype), *src, *rtag, fbytes(rc, rtype),
                    MPI_Comm_f2c(*comm), cs.MPI_SOURCE, cs.MPI_TAG, got > 0 ? (uint64_t)got : 0);
}
ALIAS(mpi_sendrecv, f_sendrecv)

CACHE(barrier);
static void f_barrier(F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *), barrier)(comm, ierr);
    uint64_t t1 = bl_now();
    if (LIVE) bl_rec_barrier(t0, t1, MPI_Comm_f2c(*comm));
}
ALIAS(mpi_barrier, f_barrier)

CACHE(bcast);
static void f_bcast(void *buf, F *count, F *type, F *root, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, F *, F *, F *, F *, F *), bcast)(buf, count, type, root, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t m = LIVE ? fbytes(count, type) : 0;
    if (LIVE) bl_rec_coll(BL_FN_BCAST, t0, t1, MPI_Comm_f2c(*comm), *root, m, m, NULL, 0);
}
ALIAS(mpi_bcast, f_bcast)

CACHE(reduce);
static void f_reduce(void *sb, void *rb, F *count, F *type, F *op, F *root, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, void *, F *, F *, F *, F *, F *, F *), reduce)(sb, rb, count, type, op, root, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t m = LIVE ? fbytes(count, type) : 0;
    if (LIVE) bl_rec_coll(BL_FN_REDUCE, t0, t1, MPI_Comm_f2c(*comm), *root, m, m, NULL, 0);
}
ALIAS(mpi_reduce, f_reduce)

CACHE(allreduce);
static void f_allreduce(void *sb, void *rb, F *count, F *type, F *op, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, void *, F *, F *, F *, F *, F *), allreduce)(sb, rb, count, type, op, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t m = LIVE ? fbytes(count, type) : 0;
    if (LIVE) bl_rec_coll(BL_FN_ALLREDUCE, t0, t1, MPI_Comm_f2c(*comm), -1, m, m, NULL, 0);
}
ALIAS(mpi_allreduce, f_allreduce)

typedef void (*gath_t)(void *, F *, F *, void *, F *, F *, F *, F *, F *);
CACHE(gather);
static void f_gather(void *sb, F *sc, F *st, void *rb, F *rc, F *rt, F *root, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(gath_t, gather)(sb, sc, st, rb, rc, rt, root, comm, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    MPI_Comm c = MPI_Comm_f2c(*comm);
    int me;
    PMPI_Comm_rank(c, &me);
    uint64_t rbytes = me == *root ? fbytes(rc, rt) : 0;
    bl_rec_coll(BL_FN_GATHER, t0, t1, c, *root, me == *root ? rbytes : fbytes(sc, st), rbytes, NULL, 0);
}
ALIAS(mpi_gather, f_gather)

CACHE(scatter);
static void f_scatter(void *sb, F *sc, F *st, void *rb, F *rc, F *rt, F *root, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(gath_t, scatter)(sb, sc, st, rb, rc, rt, root, comm, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    MPI_Comm c = MPI_Comm_f2c(*comm);
    int me;
    PMPI_Comm_rank(c, &me);
    uint64_t sbytes = me == *root ? fbytes(sc, st) : 0;
    bl_rec_coll(BL_FN_SCATTER, t0, t1, c, *root, sbytes, me == *root ? sbytes : fbytes(rc, rt), NULL, 0);
}
ALIAS(mpi_scatter, f_scatter)

typedef void (*ag_t)(void *, F *, F *, void *, F *, F *, F *, F *);
CACHE(allgather);
static void f_allgather(void *sb, F *sc, F *st, void *rb, F *rc, F *rt, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(ag_t, allgather)(sb, sc, st, rb, rc, rt, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t b = LIVE ? fbytes(rc, rt) : 0;
    if (LIVE) bl_rec_coll(BL_FN_ALLGATHER, t0, t1, MPI_Comm_f2c(*comm), -1, b, b, NULL, 0);
}
ALIAS(mpi_allgather, f_allgather)

CACHE(alltoall);
static void f_alltoall(void *sb, F *sc, F *st, void *rb, F *rc, F *rt, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(ag_t, alltoall)(sb, sc, st, rb, rc, rt, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t b = LIVE ? fbytes(rc, rt) : 0;
    if (LIVE) bl_rec_coll(BL_FN_ALLTOALL, t0, t1, MPI_Comm_f2c(*comm), -1, b, b, NULL, 0);
}
ALIAS(mpi_alltoall, f_alltoall)

CACHE(alltoallv);
static void f_alltoallv(void *sb, F *sc, F *sd, F *st, void *rb, F *rc, F *rd, F *rt, F *comm,
                        F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, F *, F *, F *, void *, F *, F *, F *, F *, F *), alltoallv)
    (sb, sc, sd, st, rb, rc, rd, rt, comm, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    /* MPI_Fint is int here (checked below), so the count arrays are C int arrays */
    _Static_assert(sizeof(F) == sizeof(int), "MPI_Fint must be int");
    bl_rec_a2av(t0, t1, MPI_Comm_f2c(*comm), (const int *)sc, MPI_Type_f2c(*st), (const int *)rc,
                MPI_Type_f2c(*rt), 0, 0.0, 0);
}
ALIAS(mpi_alltoallv, f_alltoallv)

CACHE(comm_split);
static void f_comm_split(F *comm, F *color, F *key, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *, F *), comm_split)(comm, color, key, nc, ierr);
    uint64_t t1 = bl_now();
    if (LIVE && *ierr == MPI_SUCCESS) {
        MPI_Comm c = MPI_Comm_f2c(*nc);
        bl_comm_created(BL_FN_COMM_SPLIT, t0, t1, &c);
    }
}
ALIAS(mpi_comm_split, f_comm_split)

CACHE(comm_dup);
static void f_comm_dup(F *comm, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *), comm_dup)(comm, nc, ierr);
    uint64_t t1 = bl_now();
    if (LIVE && *ierr == MPI_SUCCESS) {
        MPI_Comm c = MPI_Comm_f2c(*nc);
        bl_comm_created(BL_FN_COMM_DUP, t0, t1, &c);
    }
}
ALIAS(mpi_comm_dup, f_comm_dup)

/* ---- v-collectives, the other completions, communicator creation ---------- */

/* per-peer byte sizes of a Fortran count array (the root's view of a v-collective) */
static int64_t *fpeer_bytes(const F *counts, const F *type, int n, uint64_t *tot) {
    int64_t *p = malloc((size_t)(n > 0 ? n : 1) * 8);
    if (!p) PMPI_Abort(MPI_COMM_WORLD, 70);
    MPI_Datatype t = MPI_Type_f2c(*type);
    *tot = 0;
    for (int i = 0; i < n; i++) *tot += (uint64_t)(p[i] = (int64_t)bl_type_bytes((int)counts[i], t));
    return p;
}

static void fcomm_rank_size(const F *comm, MPI_Comm *c, int *me, int *n) {
    *c = MPI_Comm_f2c(*comm);
    PMPI_Comm_rank(*c, me);
    PMPI_Comm_size(*c, n);
}

typedef void (*gathv_t)(void *, F *, F *, void *, F *, F *, F *, F *, F *, F *);
CACHE(gatherv);
static void f_gatherv(void *sb, F *sc, F *st, void *rb, F *rc, F *displs, F *rt, F *root, F *comm,
                      F *ierr) {
    uint64_t t0 = bl_now();
    REAL(gathv_t, gatherv)(sb, sc, st, rb, rc, displs, rt, root, comm, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    MPI_Comm c;
    int me, n;
    fcomm_rank_size(comm, &c, &me, &n);
    if (me == *root) {
        uint64_t tot;
        int64_t *p = fpeer_bytes(rc, rt, n, &tot);
        bl_rec_coll(BL_FN_GATHERV, t0, t1, c, *root, (uint64_t)p[me], tot, p, (uint32_t)n);
        free(p);
    } else {
        bl_rec_coll(BL_FN_GATHERV, t0, t1, c, *root, fbytes(sc, st), 0, NULL, 0);
    }
}
ALIAS(mpi_gatherv, f_gatherv)

CACHE(scatterv);
static void f_scatterv(void *sb, F *scounts, F *displs, F *st, void *rb, F *rc, F *rt, F *root,
                       F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(gathv_t, scatterv)(sb, scounts, displs, st, rb, rc, rt, root, comm, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    MPI_Comm c;
    int me, n;
    fcomm_rank_size(comm, &c, &me, &n);
    if (me == *root) {
        uint64_t tot;
        int64_t *p = fpeer_bytes(scounts, st, n, &tot);
        bl_rec_coll(BL_FN_SCATTERV, t0, t1, c, *root, tot, (uint64_t)p[me], p, (uint32_t)n);
        free(p);
    } else {
        bl_rec_coll(BL_FN_SCATTERV, t0, t1, c, *root, 0, fbytes(rc, rt), NULL, 0);
    }
}
ALIAS(mpi_scatterv, f_scatterv)

CACHE(allgatherv);
static void f_allgatherv(void *sb, F *sc, F *st, void *rb, F *rc, F *displs, F *rt, F *comm,
                         F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, F *, F *, void *, F *, F *, F *, F *, F *), allgatherv)
    (sb, sc, st, rb, rc, displs, rt, comm, ierr);
    uint64_t t1 = bl_now();
    if (!LIVE) return;
    MPI_Comm c;
    int me, n;
    fcomm_rank_size(comm, &c, &me, &n);
    uint64_t tot;
    int64_t *p = fpeer_bytes(rc, rt, n, &tot);
    bl_rec_coll(BL_FN_ALLGATHERV, t0, t1, c, -1, (uint64_t)p[me], tot, p, (uint32_t)n);
    free(p);
}
ALIAS(mpi_allgatherv, f_allgatherv)

/* The requests of a Fortran array as C handles (taken before the call frees them). */
static MPI_Request *fbefore(const F *reqs, int n) {
    MPI_Request *b = malloc((size_t)(n > 0 ? n : 1) * sizeof *b);
    if (!b) PMPI_Abort(MPI_COMM_WORLD, 70);
    for (int i = 0; i < n; i++) b[i] = MPI_Request_f2c(reqs[i]);
    return b;
}

/* Records the completions of a waitsome/testsome: Fortran indices are 1-based. */
static void f_some_done(int fn, uint64_t t0, uint64_t t1, int n, const MPI_Request *before,
                        int outcount, const F *idx, const F *sts) {
    if (outcount == MPI_UNDEFINED || outcount <= 0) {
        int *none = calloc((size_t)(n > 0 ? n : 1), sizeof *none);
        if (!none) PMPI_Abort(MPI_COMM_WORLD, 70);
        bl_rec_complete(fn, t0, t1, n, before, NULL, none);
        free(none);
        return;
    }
    MPI_Request *sel = malloc((size_t)outcount * sizeof *sel);
    MPI_Status *cs = malloc((size_t)outcount * sizeof *cs);
    int *one = malloc((size_t)outcount * sizeof *one);
    if (!sel || !cs || !one) PMPI_Abort(MPI_COMM_WORLD, 70);
    int k = 0;
    for (int i = 0; i < outcount; i++) {
        int j = (int)idx[i] - 1;
        if (j < 0 || j >= n) continue;
        sel[k] = before[j];
        MPI_Status_f2c(sts + (size_t)i * FSTATUS_WORDS, &cs[k]);
        one[k++] = 1;
    }
    bl_rec_complete(fn, t0, t1, k, sel, cs, one);
    free(sel);
    free(cs);
    free(one);
}

CACHE(waitany);
static void f_waitany(F *n, F *reqs, F *index, F *st, F *ierr) {
    int cnt = (int)*n;
    typedef void (*waitany_t)(F *, F *, F *, F *, F *);
    if (!LIVE || cnt <= 0) {
        REAL(waitany_t, waitany)(n, reqs, index, st, ierr);
        return;
    }
    MPI_Request *before = fbefore(reqs, cnt);
    F local[16];
    F *s = fstatus_ignored(st) ? local : st;
    uint64_t t0 = bl_now();
    REAL(waitany_t, waitany)(n, reqs, index, s, ierr);
    uint64_t t1 = bl_now();
    int i = (int)*index; /* 1-based */
    if (i != MPI_UNDEFINED && i >= 1 && i <= cnt) {
        MPI_Status cs;
        MPI_Status_f2c(s, &cs);
        int done = 1;
        bl_rec_complete(BL_FN_WAITANY, t0, t1, 1, &before[i - 1], &cs, &done);
    } else {
        bl_rec_complete(BL_FN_WAITANY, t0, t1, 0, NULL, NULL, NULL);
    }
    free(before);
}
ALIAS(mpi_waitany, f_waitany)

typedef void (*some_t)(F *, F *, F *, F *, F *, F *);
static void f_some(int fn, some_t real_fn, F *n, F *reqs, F *outcount, F *idx, F *sts, F *ierr) {
    int cnt = (int)*n;
    if (!LIVE || cnt <= 0) {
        real_fn(n, reqs, outcount, idx, sts, ierr);
        return;
    }
    MPI_Request *before = fbefore(reqs, cnt);
    F *fs = NULL, *s = sts;
    if (sts == MPI_F_STATUSES_IGNORE) {
        fs = malloc((size_t)cnt * FSTATUS_WORDS * sizeof(F));
        if (!fs) PMPI_Abort(MPI_COMM_WORLD, 70);
        s = fs;
    }
    uint64_t t0 = bl_now();
    real_fn(n, reqs, outcount, idx, s, ierr);
    uint64_t t1 = bl_now();
    f_some_done(fn, t0, t1, cnt, before, (int)*outcount, idx, s);
    free(before);
    free(fs);
}

CACHE(waitsome);
static void f_waitsome(F *n, F *reqs, F *outcount, F *idx, F *sts, F *ierr) {
    f_some(BL_FN_WAITSOME, REAL(some_t, waitsome), n, reqs, outcount, idx, sts, ierr);
}
ALIAS(mpi_waitsome, f_waitsome)

CACHE(testsome);
static void f_testsome(F *n, F *reqs, F *outcount, F *idx, F *sts, F *ierr) {
    f_some(BL_FN_TESTSOME, REAL(some_t, testsome), n, reqs, outcount, idx, sts, ierr);
}
ALIAS(mpi_testsome, f_testsome)

CACHE(testall);
static void f_testall(F *n, F *reqs, F *flag, F *sts, F *ierr) {
    int cnt = (int)*n;
    typedef void (*testall_t)(F *, F *, F *, F *, F *);
    if (!LIVE || cnt <= 0) {
        REAL(testall_t, testall)(n, reqs, flag, sts, ierr);
        return;
    }
    MPI_Request *before = fbefore(reqs, cnt);
    F *fs = malloc((size_t)cnt * FSTATUS_WORDS * sizeof(F));
    MPI_Status *cs = malloc((size_t)cnt * sizeof *cs);
    int *done = malloc((size_t)cnt * sizeof *done);
    if (!fs || !cs || !done) PMPI_Abort(MPI_COMM_WORLD, 70);
    F *s = sts == MPI_F_STATUSES_IGNORE ? fs : sts;
    uint64_t t0 = bl_now();
    REAL(testall_t, testall)(n, reqs, flag, s, ierr);
    uint64_t t1 = bl_now();
    for (int i = 0; i < cnt; i++) {
        done[i] = *flag != 0;
        if (done[i]) MPI_Status_f2c(s + (size_t)i * FSTATUS_WORDS, &cs[i]);
    }
    bl_rec_complete(BL_FN_TESTALL, t0, t1, cnt, before, *flag ? cs : NULL, done);
    free(before);
    free(fs);
    free(cs);
    free(done);
}
ALIAS(mpi_testall, f_testall)

CACHE(testany);
static void f_testany(F *n, F *reqs, F *index, F *flag, F *st, F *ierr) {
    int cnt = (int)*n;
    typedef void (*testany_t)(F *, F *, F *, F *, F *, F *);
    if (!LIVE || cnt <= 0) {
        REAL(testany_t, testany)(n, reqs, index, flag, st, ierr);
        return;
    }
    MPI_Request *before = fbefore(reqs, cnt);
    F local[16];
    F *s = fstatus_ignored(st) ? local : st;
    uint64_t t0 = bl_now();
    REAL(testany_t, testany)(n, reqs, index, flag, s, ierr);
    uint64_t t1 = bl_now();
    int i = (int)*index; /* 1-based */
    if (*flag && i != MPI_UNDEFINED && i >= 1 && i <= cnt) {
        MPI_Status cs;
        MPI_Status_f2c(s, &cs);
        int done = 1;
        bl_rec_complete(BL_FN_TESTANY, t0, t1, 1, &before[i - 1], &cs, &done);
    } else {
        int *none = calloc((size_t)cnt, sizeof *none);
        if (!none) PMPI_Abort(MPI_COMM_WORLD, 70);
        bl_rec_complete(BL_FN_TESTANY, t0, t1, cnt, before, NULL, none);
        free(none);
    }
    free(before);
}
ALIAS(mpi_testany, f_testany)

static void f_created(int fn, uint64_t t0, uint64_t t1, const F *nc, const F *ierr) {
    if (LIVE && *ierr == MPI_SUCCESS) {
        MPI_Comm c = MPI_Comm_f2c(*nc);
        bl_comm_created(fn, t0, t1, &c);
    }
}

CACHE(comm_create);
static void f_comm_create(F *comm, F *group, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *), comm_create)(comm, group, nc, ierr);
    f_created(BL_FN_COMM_CREATE, t0, bl_now(), nc, ierr);
}
ALIAS(mpi_comm_create, f_comm_create)

CACHE(comm_split_type);
static void f_comm_split_type(F *comm, F *type, F *key, F *info, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *, F *, F *), comm_split_type)(comm, type, key, info, nc, ierr);
    f_created(BL_FN_COMM_SPLIT_TYPE, t0, bl_now(), nc, ierr);
}
ALIAS(mpi_comm_split_type, f_comm_split_type)

CACHE(cart_create);
static void f_cart_create(F *comm, F *ndims, F *dims, F *periods, F *reorder, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *, F *, F *, F *), cart_create)
    (comm, ndims, dims, periods, reorder, nc, ierr);
    f_created(BL_FN_CART_CREATE, t0, bl_now(), nc, ierr);
}
ALIAS(mpi_cart_create, f_cart_create)

CACHE(cart_sub);
static void f_cart_sub(F *comm, F *remain, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *), cart_sub)(comm, remain, nc, ierr);
    f_created(BL_FN_CART_SUB, t0, bl_now(), nc, ierr);
}
ALIAS(mpi_cart_sub, f_cart_sub)

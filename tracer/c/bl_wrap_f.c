/* benchlake tracer: the Fortran (mpif.h / use mpi) bindings. Open MPI's Fortran
 * wrappers call the PMPI_ C routines directly, so C interposition does not see
 * Fortran calls: these wrappers replace mpi_xxx_ and call Open MPI's own pmpi_xxx_
 * (found with dlsym(RTLD_NEXT)), which keeps Fortran's MPI_IN_PLACE, MPI_BOTTOM and
 * status handling intact; handles are converted with MPI_*_f2c for the records.
 * The recording lives in blf_xxx(fl, ...), shared with the mpi_f08 entry points of
 * bl_wrap_f08.c: `fl` selects the real routine (pmpi_xxx_ or pmpi_xxx_f08_). */
#define _GNU_SOURCE
#include "bl_internal.h"
#include "bl_fortran.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE (bl.initialized && !bl.finalized)
#define F MPI_Fint
#define FSTATUS_WORDS ((int)(sizeof(MPI_Status) / sizeof(MPI_Fint)))

static void *real(int fl, const char *routine, void **cache) {
    void **slot = &cache[fl == BLF_F08];
    if (!*slot) {
        char name[64];
        snprintf(name, sizeof name, fl == BLF_F08 ? "pmpi_%s_f08_" : "pmpi_%s_", routine);
        *slot = dlsym(RTLD_NEXT, name);
        if (!*slot) *slot = dlsym(RTLD_DEFAULT, name);
        if (!*slot) {
            fprintf(stderr, "benchlake-tracer: Fortran symbol %s not found\n", name);
            abort();
        }
    }
    return *slot;
}
/* the real routine of the binding `fl` (a parameter of every blf_xxx) */
#define REAL(type, name) ((type)real(fl, #name, cache_##name))
#define CACHE(name) static void *cache_##name[2]
/* each mpif.h wrapper is exported as name_ and name__ (gfortran, g77-style) */
#define ALIAS(name, impl) \
    __attribute__((alias(#impl), visibility("default"))) typeof(impl) name##_; \
    __attribute__((alias(#impl), visibility("default"))) typeof(impl) name##__;

/* Fortran's MPI_STATUS_IGNORE / MPI_STATUSES_IGNORE: mpif.h and mpi_f08 both name the
 * common blocks mpi_fortran_status(es)_ignore_; the C handles MPI_F_STATUS(ES)_IGNORE
 * are compared too. */
static void *fsym(const char *name, void **cache, int *looked) {
    if (!*looked) {
        *cache = dlsym(RTLD_DEFAULT, name);
        *looked = 1;
    }
    return *cache;
}
static int fstatus_ignored(const F *st) {
    static void *c;
    static int l;
    return st == MPI_F_STATUS_IGNORE || (st && st == fsym("mpi_fortran_status_ignore_", &c, &l));
}
static int fstatuses_ignored(const F *sts) {
    static void *c;
    static int l;
    return sts == MPI_F_STATUSES_IGNORE ||
           (sts && sts == fsym("mpi_fortran_statuses_ignore_", &c, &l));
}

static uint64_t fbytes(const F *count, const F *type) {
    return bl_type_bytes((int)*count, MPI_Type_f2c(*type));
}

CACHE(init);
void blf_init(int fl, F *ierr) {
    REAL(void (*)(F *), init)(ierr);
    if (*ierr == MPI_SUCCESS) bl_init_after(BL_FN_INIT);
}

CACHE(init_thread);
void blf_init_thread(int fl, F *req, F *prov, F *ierr) {
    REAL(void (*)(F *, F *, F *), init_thread)(req, prov, ierr);
    if (*ierr == MPI_SUCCESS) bl_init_after(BL_FN_INIT);
}

CACHE(finalize);
void blf_finalize(int fl, F *ierr) {
    if (LIVE) bl_finalize_before();
    REAL(void (*)(F *), finalize)(ierr);
}

typedef void (*send_t)(void *, F *, F *, F *, F *, F *, F *);
CACHE(send);
void blf_send(int fl, void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(send_t, send)(buf, count, type, dest, tag, comm, ierr);
    uint64_t t1 = bl_now();
    if (LIVE) bl_rec_send(BL_FN_SEND, t0, t1, 0, *dest, *tag, MPI_Comm_f2c(*comm), fbytes(count, type));
}

CACHE(ssend);
void blf_ssend(int fl, void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(send_t, ssend)(buf, count, type, dest, tag, comm, ierr);
    uint64_t t1 = bl_now();
    if (LIVE) bl_rec_send(BL_FN_SSEND, t0, t1, 1, *dest, *tag, MPI_Comm_f2c(*comm), fbytes(count, type));
}

CACHE(recv);
void blf_recv(int fl, void *buf, F *count, F *type, F *src, F *tag, F *comm, F *st, F *ierr) {
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

typedef void (*isend_t)(void *, F *, F *, F *, F *, F *, F *, F *);
CACHE(isend);
void blf_isend(int fl, void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *req, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(isend_t, isend)(buf, count, type, dest, tag, comm, req, ierr);
    uint64_t t1 = bl_now();
    if (LIVE)
        bl_rec_isend(BL_FN_ISEND, t0, t1, *dest, *tag, MPI_Comm_f2c(*comm), fbytes(count, type),
                     MPI_Request_f2c(*req));
}

CACHE(irecv);
void blf_irecv(int fl, void *buf, F *count, F *type, F *src, F *tag, F *comm, F *req, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(isend_t, irecv)(buf, count, type, src, tag, comm, req, ierr);
    uint64_t t1 = bl_now();
    if (LIVE)
        bl_rec_irecv(BL_FN_IRECV, t0, t1, *src, *tag, MPI_Comm_f2c(*comm), fbytes(count, type),
                     MPI_Request_f2c(*req));
}

CACHE(wait);
void blf_wait(int fl, F *req, F *st, F *ierr) {
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

CACHE(waitall);
void blf_waitall(int fl, F *n, F *reqs, F *sts, F *ierr) {
    int cnt = (int)*n;
    MPI_Request *before = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *before);
    F *fs = malloc((size_t)(cnt > 0 ? cnt : 1) * FSTATUS_WORDS * sizeof(F));
    MPI_Status *cs = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *cs);
    int *done = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *done);
    if (!before || !fs || !cs || !done) abort();
    for (int i = 0; i < cnt; i++) before[i] = MPI_Request_f2c(reqs[i]);
    F *s = fstatuses_ignored(sts) ? fs : sts;
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

CACHE(test);
void blf_test(int fl, F *req, F *flag, F *st, F *ierr) {
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

CACHE(sendrecv);
void blf_sendrecv(int fl, void *sb, F *sc, F *stype, F *dest, F *stag, void *rb, F *rc, F *rtype,
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

CACHE(barrier);
void blf_barrier(int fl, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *), barrier)(comm, ierr);
    uint64_t t1 = bl_now();
    if (LIVE) bl_rec_barrier(t0, t1, MPI_Comm_f2c(*comm));
}

CACHE(bcast);
void blf_bcast(int fl, void *buf, F *count, F *type, F *root, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, F *, F *, F *, F *, F *), bcast)(buf, count, type, root, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t m = LIVE ? fbytes(count, type) : 0;
    if (LIVE) bl_rec_coll(BL_FN_BCAST, t0, t1, MPI_Comm_f2c(*comm), *root, m, m, NULL, 0);
}

CACHE(reduce);
void blf_reduce(int fl, void *sb, void *rb, F *count, F *type, F *op, F *root, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, void *, F *, F *, F *, F *, F *, F *), reduce)(sb, rb, count, type, op, root, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t m = LIVE ? fbytes(count, type) : 0;
    if (LIVE) bl_rec_coll(BL_FN_REDUCE, t0, t1, MPI_Comm_f2c(*comm), *root, m, m, NULL, 0);
}

CACHE(allreduce);
void blf_allreduce(int fl, void *sb, void *rb, F *count, F *type, F *op, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(void *, void *, F *, F *, F *, F *, F *), allreduce)(sb, rb, count, type, op, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t m = LIVE ? fbytes(count, type) : 0;
    if (LIVE) bl_rec_coll(BL_FN_ALLREDUCE, t0, t1, MPI_Comm_f2c(*comm), -1, m, m, NULL, 0);
}

typedef void (*gath_t)(void *, F *, F *, void *, F *, F *, F *, F *, F *);
CACHE(gather);
void blf_gather(int fl, void *sb, F *sc, F *st, void *rb, F *rc, F *rt, F *root, F *comm, F *ierr) {
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

CACHE(scatter);
void blf_scatter(int fl, void *sb, F *sc, F *st, void *rb, F *rc, F *rt, F *root, F *comm, F *ierr) {
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

typedef void (*ag_t)(void *, F *, F *, void *, F *, F *, F *, F *);
CACHE(allgather);
void blf_allgather(int fl, void *sb, F *sc, F *st, void *rb, F *rc, F *rt, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(ag_t, allgather)(sb, sc, st, rb, rc, rt, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t b = LIVE ? fbytes(rc, rt) : 0;
    if (LIVE) bl_rec_coll(BL_FN_ALLGATHER, t0, t1, MPI_Comm_f2c(*comm), -1, b, b, NULL, 0);
}

CACHE(alltoall);
void blf_alltoall(int fl, void *sb, F *sc, F *st, void *rb, F *rc, F *rt, F *comm, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(ag_t, alltoall)(sb, sc, st, rb, rc, rt, comm, ierr);
    uint64_t t1 = bl_now();
    uint64_t b = LIVE ? fbytes(rc, rt) : 0;
    if (LIVE) bl_rec_coll(BL_FN_ALLTOALL, t0, t1, MPI_Comm_f2c(*comm), -1, b, b, NULL, 0);
}

CACHE(alltoallv);
void blf_alltoallv(int fl, void *sb, F *sc, F *sd, F *st, void *rb, F *rc, F *rd, F *rt, F *comm,
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

CACHE(comm_split);
void blf_comm_split(int fl, F *comm, F *color, F *key, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *, F *), comm_split)(comm, color, key, nc, ierr);
    uint64_t t1 = bl_now();
    if (LIVE && *ierr == MPI_SUCCESS) {
        MPI_Comm c = MPI_Comm_f2c(*nc);
        bl_comm_created(BL_FN_COMM_SPLIT, t0, t1, &c);
    }
}

CACHE(comm_dup);
void blf_comm_dup(int fl, F *comm, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *), comm_dup)(comm, nc, ierr);
    uint64_t t1 = bl_now();
    if (LIVE && *ierr == MPI_SUCCESS) {
        MPI_Comm c = MPI_Comm_f2c(*nc);
        bl_comm_created(BL_FN_COMM_DUP, t0, t1, &c);
    }
}

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
void blf_gatherv(int fl, void *sb, F *sc, F *st, void *rb, F *rc, F *displs, F *rt, F *root, F *comm,
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

CACHE(scatterv);
void blf_scatterv(int fl, void *sb, F *scounts, F *displs, F *st, void *rb, F *rc, F *rt, F *root,
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

CACHE(allgatherv);
void blf_allgatherv(int fl, void *sb, F *sc, F *st, void *rb, F *rc, F *displs, F *rt, F *comm,
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
void blf_waitany(int fl, F *n, F *reqs, F *index, F *st, F *ierr) {
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

typedef void (*some_t)(F *, F *, F *, F *, F *, F *);
static void f_some(int fn, some_t real_fn, F *n, F *reqs, F *outcount, F *idx, F *sts, F *ierr) {
    int cnt = (int)*n;
    if (!LIVE || cnt <= 0) {
        real_fn(n, reqs, outcount, idx, sts, ierr);
        return;
    }
    MPI_Request *before = fbefore(reqs, cnt);
    F *fs = NULL, *s = sts;
    if (fstatuses_ignored(sts)) {
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
void blf_waitsome(int fl, F *n, F *reqs, F *outcount, F *idx, F *sts, F *ierr) {
    f_some(BL_FN_WAITSOME, REAL(some_t, waitsome), n, reqs, outcount, idx, sts, ierr);
}

CACHE(testsome);
void blf_testsome(int fl, F *n, F *reqs, F *outcount, F *idx, F *sts, F *ierr) {
    f_some(BL_FN_TESTSOME, REAL(some_t, testsome), n, reqs, outcount, idx, sts, ierr);
}

CACHE(testall);
void blf_testall(int fl, F *n, F *reqs, F *flag, F *sts, F *ierr) {
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
    F *s = fstatuses_ignored(sts) ? fs : sts;
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

CACHE(testany);
void blf_testany(int fl, F *n, F *reqs, F *index, F *flag, F *st, F *ierr) {
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

static void f_created(int fn, uint64_t t0, uint64_t t1, const F *nc, const F *ierr) {
    if (LIVE && *ierr == MPI_SUCCESS) {
        MPI_Comm c = MPI_Comm_f2c(*nc);
        bl_comm_created(fn, t0, t1, &c);
    }
}

CACHE(comm_create);
void blf_comm_create(int fl, F *comm, F *group, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *), comm_create)(comm, group, nc, ierr);
    f_created(BL_FN_COMM_CREATE, t0, bl_now(), nc, ierr);
}

CACHE(comm_split_type);
void blf_comm_split_type(int fl, F *comm, F *type, F *key, F *info, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *, F *, F *), comm_split_type)(comm, type, key, info, nc, ierr);
    f_created(BL_FN_COMM_SPLIT_TYPE, t0, bl_now(), nc, ierr);
}

CACHE(cart_create);
void blf_cart_create(int fl, F *comm, F *ndims, F *dims, F *periods, F *reorder, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *, F *, F *, F *), cart_create)
    (comm, ndims, dims, periods, reorder, nc, ierr);
    f_created(BL_FN_CART_CREATE, t0, bl_now(), nc, ierr);
}

CACHE(cart_sub);
void blf_cart_sub(int fl, F *comm, F *remain, F *nc, F *ierr) {
    uint64_t t0 = bl_now();
    REAL(void (*)(F *, F *, F *, F *), cart_sub)(comm, remain, nc, ierr);
    f_created(BL_FN_CART_SUB, t0, bl_now(), nc, ierr);
}

/* ---- the mpif.h / `use mpi` entry points ------------------------------------ */

#define MPIFH_ENTRY(name, params, args) \
    static void f_##name params { blf_##name BLF_CALL_MPIFH args; } \
    ALIAS(mpi_##name, f_##name)
BLF_ROUTINES(MPIFH_ENTRY)

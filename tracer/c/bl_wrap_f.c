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

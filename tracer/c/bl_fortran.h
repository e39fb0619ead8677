/* benchlake tracer: the Fortran routines wrapped in both Fortran bindings.
 * bl_wrap_f.c owns the recording (one blf_xxx per routine, taking the binding `fl`
 * that selects which real routine it forwards to); bl_wrap_f.c exports the mpif.h /
 * `use mpi` entry points (mpi_xxx_, mpi_xxx__) and bl_wrap_f08.c the `use mpi_f08`
 * ones (mpi_xxx_f08_), both from the one table below, so the argument lists live in
 * one place. With Open MPI the two bindings take the same arguments by reference:
 * TYPE(MPI_Comm)/TYPE(MPI_Datatype)/TYPE(MPI_Request)... hold one INTEGER, the
 * choice buffers arrive as one pointer, TYPE(MPI_Status) has the mpif.h status
 * layout; only the f08 `ierror` is OPTIONAL (a NULL pointer when absent). */
#ifndef BL_FORTRAN_H
#define BL_FORTRAN_H

#include <mpi.h>

/* which real routine blf_xxx forwards to */
#define BLF_MPIFH 0 /* pmpi_xxx_ */
#define BLF_F08 1   /* pmpi_xxx_f08_ */

#define BLF_WITH_FL(...) (int fl, __VA_ARGS__)
#define BLF_CALL_MPIFH(...) (BLF_MPIFH, __VA_ARGS__)
#define BLF_CALL_F08(...) (BLF_F08, __VA_ARGS__)

/* X(routine, (parameters), (arguments)); `ierr` is always the last parameter */
#define BLF_ROUTINES(X) \
    X(init, (MPI_Fint *ierr), (ierr)) \
    X(init_thread, (MPI_Fint *req, MPI_Fint *prov, MPI_Fint *ierr), (req, prov, ierr)) \
    X(finalize, (MPI_Fint *ierr), (ierr)) \
    X(send, (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *ierr), (buf, count, type, dest, tag, comm, ierr)) \
    X(ssend, (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *ierr), (buf, count, type, dest, tag, comm, ierr)) \
    X(recv, (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *src, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *st, MPI_Fint *ierr), (buf, count, type, src, tag, comm, st, ierr)) \
    X(isend, (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *dest, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *req, MPI_Fint *ierr), (buf, count, type, dest, tag, comm, req, ierr)) \
    X(irecv, (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *src, MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *req, MPI_Fint *ierr), (buf, count, type, src, tag, comm, req, ierr)) \
    X(wait, (MPI_Fint *req, MPI_Fint *st, MPI_Fint *ierr), (req, st, ierr)) \
    X(waitall, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *sts, MPI_Fint *ierr), (n, reqs, sts, ierr)) \
    X(test, (MPI_Fint *req, MPI_Fint *flag, MPI_Fint *st, MPI_Fint *ierr), (req, flag, st, ierr)) \
    X(sendrecv, (void *sb, MPI_Fint *sc, MPI_Fint *stype, MPI_Fint *dest, MPI_Fint *stag, void *rb, MPI_Fint *rc, MPI_Fint *rtype, MPI_Fint *src, MPI_Fint *rtag, MPI_Fint *comm, MPI_Fint *st, MPI_Fint *ierr), (sb, sc, stype, dest, stag, rb, rc, rtype, src, rtag, comm, st, ierr)) \
    X(barrier, (MPI_Fint *comm, MPI_Fint *ierr), (comm, ierr)) \
    X(bcast, (void *buf, MPI_Fint *count, MPI_Fint *type, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr), (buf, count, type, root, comm, ierr)) \
    X(reduce, (void *sb, void *rb, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr), (sb, rb, count, type, op, root, comm, ierr)) \
    X(allreduce, (void *sb, void *rb, MPI_Fint *count, MPI_Fint *type, MPI_Fint *op, MPI_Fint *comm, MPI_Fint *ierr), (sb, rb, count, type, op, comm, ierr)) \
    X(gather, (void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rt, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr), (sb, sc, st, rb, rc, rt, root, comm, ierr)) \
    X(scatter, (void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rt, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr), (sb, sc, st, rb, rc, rt, root, comm, ierr)) \
    X(allgather, (void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rt, MPI_Fint *comm, MPI_Fint *ierr), (sb, sc, st, rb, rc, rt, comm, ierr)) \
    X(alltoall, (void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rt, MPI_Fint *comm, MPI_Fint *ierr), (sb, sc, st, rb, rc, rt, comm, ierr)) \
    X(alltoallv, (void *sb, MPI_Fint *sc, MPI_Fint *sd, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rd, MPI_Fint *rt, MPI_Fint *comm, MPI_Fint *ierr), (sb, sc, sd, st, rb, rc, rd, rt, comm, ierr)) \
    X(comm_split, (MPI_Fint *comm, MPI_Fint *color, MPI_Fint *key, MPI_Fint *nc, MPI_Fint *ierr), (comm, color, key, nc, ierr)) \
    X(comm_dup, (MPI_Fint *comm, MPI_Fint *nc, MPI_Fint *ierr), (comm, nc, ierr)) \
    X(gatherv, (void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *displs, MPI_Fint *rt, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr), (sb, sc, st, rb, rc, displs, rt, root, comm, ierr)) \
    X(scatterv, (void *sb, MPI_Fint *scounts, MPI_Fint *displs, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rt, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr), (sb, scounts, displs, st, rb, rc, rt, root, comm, ierr)) \
    X(allgatherv, (void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *displs, MPI_Fint *rt, MPI_Fint *comm, MPI_Fint *ierr), (sb, sc, st, rb, rc, displs, rt, comm, ierr)) \
    X(waitany, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *index, MPI_Fint *st, MPI_Fint *ierr), (n, reqs, index, st, ierr)) \
    X(waitsome, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *outcount, MPI_Fint *idx, MPI_Fint *sts, MPI_Fint *ierr), (n, reqs, outcount, idx, sts, ierr)) \
    X(testsome, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *outcount, MPI_Fint *idx, MPI_Fint *sts, MPI_Fint *ierr), (n, reqs, outcount, idx, sts, ierr)) \
    X(testall, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *flag, MPI_Fint *sts, MPI_Fint *ierr), (n, reqs, flag, sts, ierr)) \
    X(testany, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *index, MPI_Fint *flag, MPI_Fint *st, MPI_Fint *ierr), (n, reqs, index, flag, st, ierr)) \
    X(comm_create, (MPI_Fint *comm, MPI_Fint *group, MPI_Fint *nc, MPI_Fint *ierr), (comm, group, nc, ierr)) \
    X(comm_split_type, (MPI_Fint *comm, MPI_Fint *type, MPI_Fint *key, MPI_Fint *info, MPI_Fint *nc, MPI_Fint *ierr), (comm, type, key, info, nc, ierr)) \
    X(cart_create, (MPI_Fint *comm, MPI_Fint *ndims, MPI_Fint *dims, MPI_Fint *periods, MPI_Fint *reorder, MPI_Fint *nc, MPI_Fint *ierr), (comm, ndims, dims, periods, reorder, nc, ierr)) \
    X(cart_sub, (MPI_Fint *comm, MPI_Fint *remain, MPI_Fint *nc, MPI_Fint *ierr), (comm, remain, nc, ierr))

#define BLF_PROTO(name, params, args) \
    __attribute__((visibility("hidden"))) void blf_##name BLF_WITH_FL params;
BLF_ROUTINES(BLF_PROTO)
#undef BLF_PROTO

#endif

/* benchlake tracer: the `use mpi_f08` bindings. Open MPI's mpi_f08 routines
 * (mpi_xxx_f08_) call the mpif.h implementation (ompi_xxx_f), which calls the PMPI_
 * C routines, so neither the C nor the mpif.h wrappers see them: these entry points
 * record through the same blf_xxx as the mpif.h ones (bl_wrap_f.c) and forward to
 * Open MPI's pmpi_xxx_f08_. The f08 `ierror` is OPTIONAL: when the caller leaves it
 * out it arrives as a NULL pointer, and a local one takes its place (the real
 * routine then sees it present, which only changes where the error code is stored). */
#include "bl_fortran.h"

#define F08_ENTRY(name, params, args)                    \
    __attribute__((visibility("default"))) void mpi_##name##_f08_ params; \
    void mpi_##name##_f08_ params {                      \
        MPI_Fint absent_ierr = MPI_SUCCESS;              \
        if (!ierr) ierr = &absent_ierr;                  \
        blf_##name BLF_CALL_F08 args;                    \
    }
BLF_ROUTINES(F08_ENTRY)

/* benchlake tracer: shared declarations of the PMPI interposition library.
 *
 * The hot path (every intercepted MPI call) appends one fixed-size binary record
 * (struct bl_rec, 72 bytes, plus an optional payload of 64-bit words) to a per-rank
 * memory buffer that is written to a per-rank log file in large blocks. Nothing is
 * formatted while the application runs: at MPI_Finalize each rank converts its log
 * into the Bandela text trace and its part of the Dimemas trace, rank 0 merges the
 * Dimemas parts and writes the statistics, and alltoallv lead ranks write the count
 * and timing files (bl_finalize.c). */
#ifndef BL_INTERNAL_H
#define BL_INTERNAL_H

#include <mpi.h>
#include <stdint.h>
#include <stddef.h>

/* Routines (also the column order of the statistics file). */
enum bl_fn {
    BL_FN_NONE = 0,
    BL_FN_INIT, BL_FN_FINALIZE,
    BL_FN_SEND, BL_FN_SSEND, BL_FN_RECV, BL_FN_ISEND, BL_FN_IRECV, BL_FN_SENDRECV,
    BL_FN_WAIT, BL_FN_WAITALL, BL_FN_WAITANY, BL_FN_WAITSOME,
    BL_FN_TEST, BL_FN_TESTALL, BL_FN_TESTANY, BL_FN_TESTSOME,
    BL_FN_BARRIER, BL_FN_BCAST, BL_FN_REDUCE, BL_FN_ALLREDUCE,
    BL_FN_GATHER, BL_FN_GATHERV, BL_FN_SCATTER, BL_FN_SCATTERV,
    BL_FN_ALLGATHER, BL_FN_ALLGATHERV, BL_FN_ALLTOALL, BL_FN_ALLTOALLV,
    BL_FN_COMM_SPLIT, BL_FN_COMM_DUP, BL_FN_COMM_CREATE, BL_FN_COMM_SPLIT_TYPE,
    BL_FN_CART_CREATE, BL_FN_CART_SUB,
    BL_FN_COUNT
};
extern const char *const bl_fn_names[BL_FN_COUNT];

/* Record types of the binary log. */
enum bl_rtype {
    BL_R_SEND = 1,  /* blocking send: peer tag comm bytes (flag 1 = synchronous) */
    BL_R_ISEND,     /* peer tag comm bytes req */
    BL_R_RECV,      /* posted peer/tag/bytes, actual source peer2, tag2, bytes2 */
    BL_R_IRECV,     /* posted peer tag comm bytes req */
    BL_R_SENDRECV,  /* send peer/tag/bytes; recv posted peer2/tag2/bytes2; req, req+1;
                       payload [actual source, actual tag, actual bytes] */
    BL_R_WAIT,      /* completion of req: flag = BL_K_SEND|BL_K_RECV; for receives the
                       posted peer/tag/bytes/comm and the actual peer2/tag2/bytes2 */
    BL_R_TESTFAIL,  /* unsuccessful test of req */
    BL_R_BARRIER,   /* comm */
    BL_R_COLL,      /* flag = Dimemas glop id; peer = root (comm rank) or -1; bytes =
                       send bytes per peer, bytes2 = recv bytes per peer; payload:
                       per-peer bytes for v-variants (see bl_finalize.c) */
    BL_R_COMM,      /* comm id, payload = world ranks of the members */
    BL_R_CALIPER,   /* flag = caliper index, 0 = pop */
    BL_R_IGNORE,    /* flag = ignore index for the next collective */
    BL_R_END        /* trailing computation (at MPI_Finalize or at a window end) */
};
enum { BL_K_SEND = 1, BL_K_RECV = 2, BL_CONT = 0x100 /* record continues the previous call */ };

typedef struct {
    uint8_t type, fn;
    uint16_t flag;
    uint32_t npay;          /* payload words (int64) following the record */
    int32_t peer, tag, peer2, tag2;
    int64_t comm;
    uint64_t bytes, bytes2;
    int64_t req;
    uint64_t comp_ns;       /* computation since the previous MPI call */
    uint64_t dur_ns;        /* time inside the call (first record of a call) */
} bl_rec;

/* A communicator known to the tracer. */
typedef struct {
    MPI_Comm handle;
    int64_t id;
    int size, rank;
    int *world;             /* world rank of each member */
    /* alltoallv bookkeeping (lead ranks) */
    int a2a_index;          /* per-lead communicator index K, -1 before first use */
} bl_comm;

/* Per-request information kept between start and completion. */
typedef struct {
    uintptr_t key;          /* MPI_Request handle value, 0 = empty */
    int64_t id;
    int kind;               /* BL_K_SEND / BL_K_RECV */
    int32_t peer, tag;
    int64_t comm;
    uint64_t bytes;
    int comm_slot;          /* index in the comm table (to translate the source) */
} bl_req;

/* Global state (one per process; MPI_THREAD_SINGLE/FUNNELED assumed). */
typedef struct {
    int initialized, finalized;
    int world_rank, world_size;
    int active;             /* records are logged */
    uint64_t t_last;        /* end of the previous MPI call (ns) */
    uint64_t ord;           /* traced calls */
    int64_t next_req;       /* request ids */
    /* log buffer */
    unsigned char *buf;
    size_t len, cap;
    int log_fd;
    uint64_t log_bytes, log_records;
    char dir[4096];
    char app[256];
    /* window controls */
    int partial;            /* BANDELA_PARTIAL_EXPERIMENT=YES */
    int api_on;             /* bandela_start/bandela_end state */
    int watch_fn;           /* BANDELA_WATCH_ROUT as bl_fn, 0 = none */
    int64_t watch_comm;     /* BANDELA_COMM_T_W as comm id (default 1 = world) */
    uint64_t watch_calls;
    uint64_t barrier_start, barrier_end;
    int env_on;
    uint64_t show_every;
    uint64_t heart_every;
    int heart_fd;
    uint64_t heart_comp, heart_comm;   /* totals at the previous heartbeat */
    uint64_t tot_comp, tot_comm;       /* running totals inside the window */
    /* pending controls */
    int pending_ignore;
    /* communicators */
    bl_comm *comms;
    int ncomms, capcomms, last_comm;
    int64_t comm_counter;
    /* requests */
    bl_req *reqs;
    size_t reqcap, reqlen;
    /* scratch for request arrays */
    MPI_Request *scratch_req;
    MPI_Status *scratch_st;
    size_t scratch_cap;
    /* alltoallv */
    uint64_t a2a_calls;     /* all MPI_Alltoallv calls of this process */
    int a2a_late;           /* BENCHLAKE_TRACE_A2A_LATE=1: time a barrier before */
    int a2a_ncomms;
    uint64_t mpi_buffer_max;
    /* clock: TSC ticks when the CPU has an invariant TSC (x86-64, constant_tsc and
     * nonstop_tsc), else CLOCK_MONOTONIC ns; ticks become ns with the ratio measured
     * between MPI_Init and the conversion (bl_ticks_ns) */
    int use_tsc;
    uint64_t tsc0, mono0;
    double ns_per_tick;
} bl_state;

extern bl_state bl;

uint64_t bl_now(void);
uint64_t bl_mono_ns(void);
void bl_calibrate(void);               /* sets ns_per_tick from init to now */
static inline uint64_t bl_ticks_ns(uint64_t t) { return (uint64_t)((double)t * bl.ns_per_tick + 0.5); }
void bl_init_after(int fn);                      /* after PMPI_Init */
void bl_finalize_before(void);                   /* before PMPI_Finalize */

/* Hot path helpers. */
static inline uint64_t bl_enter(void) { return bl_now(); }
bl_rec *bl_push(int type, int fn, uint64_t comp, uint64_t dur, uint32_t npay);
int64_t *bl_payload(bl_rec *r);
void bl_log_write(const void *p, size_t n);

bl_comm *bl_comm_find(MPI_Comm c);
int bl_comm_slot(MPI_Comm c);
void bl_comm_register(MPI_Comm newcomm, int fn);
uint64_t bl_type_bytes(int count, MPI_Datatype dt);
int bl_world_of(int slot, int comm_rank);

void bl_req_put(MPI_Request r, int kind, int32_t peer, int32_t tag, int64_t comm,
                uint64_t bytes, int slot, int64_t id);
int bl_req_take(MPI_Request r, bl_req *out);

/* Intercepted-call recorders shared by the C and Fortran bindings: t0 = entry of
 * the call, t1 = return of the PMPI routine. */
void bl_rec_send(int fn, uint64_t t0, uint64_t t1, int sync, int dest, int tag, MPI_Comm comm,
                 uint64_t bytes);
void bl_rec_isend(int fn, uint64_t t0, uint64_t t1, int dest, int tag, MPI_Comm comm,
                  uint64_t bytes, MPI_Request req);
void bl_rec_recv(int fn, uint64_t t0, uint64_t t1, int src, int tag, MPI_Comm comm, uint64_t bytes,
                 int asrc, int atag, uint64_t abytes);
void bl_rec_irecv(int fn, uint64_t t0, uint64_t t1, int src, int tag, MPI_Comm comm,
                  uint64_t bytes, MPI_Request req);
void bl_rec_sendrecv(uint64_t t0, uint64_t t1, int dest, int stag, uint64_t sbytes, int src,
                     int rtag, uint64_t rbytes, MPI_Comm comm, int asrc, int atag,
                     uint64_t abytes);
/* Completion of n requests: handles as they were before the call, statuses (may be
 * NULL), done[i] = completed. */
void bl_rec_complete(int fn, uint64_t t0, uint64_t t1, int n, const MPI_Request *before,
                     const MPI_Status *st, const int *done);
void bl_rec_barrier(uint64_t t0, uint64_t t1, MPI_Comm comm);
void bl_rec_coll(int fn, uint64_t t0, uint64_t t1, MPI_Comm comm, int root, uint64_t sbytes,
                 uint64_t rbytes, const int64_t *pay, uint32_t npay);
void bl_rec_a2av(uint64_t t0, uint64_t t1, MPI_Comm comm, const int *scounts, MPI_Datatype st,
                 const int *rcounts, MPI_Datatype rt, int in_place, double late_s, int late);
void bl_comm_created(int fn, uint64_t t0, uint64_t t1, MPI_Comm *newcomm);

/* alltoallv count files (bl_counts.c) */
void bl_a2a_record(MPI_Comm comm, bl_comm *c, const int *scounts, int sdt,
                   const int *rcounts, int rdt, double exec_s, double late_s, int late);
void bl_a2a_write(void);

/* controls */
void bl_ctl_start(void);
void bl_ctl_end(void);
void bl_ctl_caliper(int idx);
void bl_ctl_ignore(int idx);

/* finalize (bl_finalize.c) */
void bl_convert_and_merge(void);

#endif

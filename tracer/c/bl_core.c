/* benchlake tracer: state, clock, the binary log, communicator and request tables,
 * the recorders shared by the C and Fortran bindings, and the manual's controls
 * (window of observation, calipers, ignore_next_col, heartbeat). */
#define _GNU_SOURCE
#include "bl_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

bl_state bl;

const char *const bl_fn_names[BL_FN_COUNT] = {
    "none", "MPI_Init", "MPI_Finalize",
    "MPI_Send", "MPI_Ssend", "MPI_Recv", "MPI_Isend", "MPI_Irecv", "MPI_Sendrecv",
    "MPI_Wait", "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome",
    "MPI_Test", "MPI_Testall", "MPI_Testany", "MPI_Testsome",
    "MPI_Barrier", "MPI_Bcast", "MPI_Reduce", "MPI_Allreduce",
    "MPI_Gather", "MPI_Gatherv", "MPI_Scatter", "MPI_Scatterv",
    "MPI_Allgather", "MPI_Allgatherv", "MPI_Alltoall", "MPI_Alltoallv",
    "MPI_Comm_split", "MPI_Comm_dup", "MPI_Comm_create", "MPI_Comm_split_type",
    "MPI_Cart_create", "MPI_Cart_sub",
};

#define LOG_CAP (4u << 20) /* 4 MiB per write */

uint64_t bl_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* The hot path's clock. clock_gettime costs 20-100 ns (more in loaded VMs); the TSC
 * read is several times cheaper. */
uint64_t bl_now(void) {
#if defined(__x86_64__)
    if (bl.use_tsc) return __rdtsc();
#endif
    return bl_mono_ns();
}

void bl_calibrate(void) {
    if (!bl.use_tsc) {
        bl.ns_per_tick = 1.0;
        return;
    }
    uint64_t m = bl_mono_ns(), t = bl_now();
    if (t > bl.tsc0 && m > bl.mono0) bl.ns_per_tick = (double)(m - bl.mono0) / (double)(t - bl.tsc0);
}

static int invariant_tsc(void) {
#if defined(__x86_64__)
    const char *e = getenv("BENCHLAKE_TRACE_CLOCK");
    if (e && strcmp(e, "monotonic") == 0) return 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[4096];
    int ok = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            ok = strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
            break;
        }
    fclose(f);
    return ok;
#else
    return 0;
#endif
}

static void die(const char *what) {
    fprintf(stderr, "benchlake-tracer (rank %d): %s: %s\n", bl.world_rank, what, strerror(errno));
    PMPI_Abort(MPI_COMM_WORLD, 70);
}

void bl_log_write(const void *p, size_t n) {
    const unsigned char *c = p;
    while (n > 0) {
        ssize_t w = write(bl.log_fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("writing the trace log");
        }
        c += w;
        n -= (size_t)w;
    }
}

static void log_flush(void) {
    if (bl.len > 0) {
        bl_log_write(bl.buf, bl.len);
        bl.log_bytes += bl.len;
        bl.len = 0;
    }
}

/* Appends a record (and room for npay payload words) to the buffer. */
bl_rec *bl_push(int type, int fn, uint64_t comp, uint64_t dur, uint32_t npay) {
    size_t need = sizeof(bl_rec) + (size_t)npay * 8;
    if (bl.len + need > bl.cap) {
        log_flush();
        if (need > bl.cap) {
            unsigned char *nb = realloc(bl.buf, need);
            if (!nb) die("allocating the trace buffer");
            bl.buf = nb;
            bl.cap = need;
        }
    }
    bl_rec *r = (bl_rec *)(bl.buf + bl.len);
    memset(r, 0, sizeof *r);
    r->type = (uint8_t)type;
    r->fn = (uint8_t)fn;
    r->npay = npay;
    r->comp_ns = comp;
    r->dur_ns = dur;
    r->peer = r->peer2 = -2;
    bl.len += need;
    bl.log_records++;
    return r;
}

int64_t *bl_payload(bl_rec *r) { return (int64_t *)(void *)(r + 1); }

/* ---------------------------------------------------------------- windows */

static void set_active(void) {
    int api = bl.partial ? bl.api_on : bl.api_on;
    int on = api && bl.env_on;
    if (on && !bl.active) bl.t_last = bl_now();
    bl.active = on;
}

static int norm_fn(const char *s) {
    /* "MPIBCAST", "MPI_Bcast", "bcast" -> BL_FN_BCAST */
    char want[64];
    size_t k = 0;
    for (const char *p = s; *p && k + 1 < sizeof want; p++)
        if (*p != '_') want[k++] = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    want[k] = 0;
    const char *w = want;
    if (strncmp(w, "MPI", 3) == 0) w += 3;
    for (int f = 1; f < BL_FN_COUNT; f++) {
        char n[64];
        size_t j = 0;
        for (const char *p = bl_fn_names[f] + 4; *p && j + 1 < sizeof n; p++)
            if (*p != '_') n[j++] = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        n[j] = 0;
        if (strcmp(n, w) == 0) return f;
    }
    return 0;
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end) {
        if (bl.world_rank == 0)
            fprintf(stderr, "benchlake-tracer: %s=%s is not an integer, using %llu\n", name, v,
                    (unsigned long long)dflt);
        return dflt;
    }
    return x;
}

static void window_after_watched(void) {
    bl.watch_calls++;
    uint64_t c = bl.watch_calls;
    if (bl.show_every && c % bl.show_every == 0 && bl.world_rank == 0) {
        printf("benchlake-tracer: %s call %llu\n", bl_fn_names[bl.watch_fn], (unsigned long long)c);
        fflush(stdout);
    }
    if (bl.heart_every && c % bl.heart_every == 0 && bl.heart_fd >= 0) {
        char line[128];
        bl_calibrate();
        double comp = (double)bl_ticks_ns(bl.tot_comp - bl.heart_comp) * 1e-9;
        double comm = (double)bl_ticks_ns(bl.tot_comm - bl.heart_comm) * 1e-9;
        int n = snprintf(line, sizeof line, "%12llu %.9f %.9f\n", (unsigned long long)c, comp, comm);
        if (n > 0 && write(bl.heart_fd, line, (size_t)n) < 0) {
            /* a lost heartbeat line is not worth aborting the application */
        }
        bl.heart_comp = bl.tot_comp;
        bl.heart_comm = bl.tot_comm;
    }
    int was = bl.active;
    bl.env_on = c >= bl.barrier_start && c < bl.barrier_end;
    set_active();
    (void)was;
}

/* Called after every intercepted call (records already pushed). The next
 * computation starts at t1: re-reading the clock here would exclude the tracer's own
 * bookkeeping (tens of ns) from it, but costs a third clock read per call, which is
 * the larger error on machines where clock_gettime is slow. */
static void call_done(int fn, uint64_t t0, uint64_t t1, int64_t comm_id) {
    bl.tot_comp += t0 > bl.t_last ? t0 - bl.t_last : 0;
    bl.tot_comm += t1 - t0;
    bl.t_last = t1;
    if (bl.watch_fn && fn == bl.watch_fn && comm_id == bl.watch_comm) window_after_watched();
}

static inline uint64_t comp_of(uint64_t t0) { return t0 > bl.t_last ? t0 - bl.t_last : 0; }

/* ---------------------------------------------------------------- comms */

static bl_comm *comm_add(MPI_Comm h, int64_t id, int size, int rank, int *world) {
    for (int i = 0; i < bl.ncomms; i++)
        if (bl.comms[i].handle == h) {
            /* handle reused after MPI_Comm_free */
            free(bl.comms[i].world);
            bl.comms[i] = (bl_comm){h, id, size, rank, world, -1};
            bl.last_comm = i;
            return &bl.comms[i];
        }
    if (bl.ncomms == bl.capcomms) {
        int nc = bl.capcomms ? bl.capcomms * 2 : 16;
        bl_comm *n = realloc(bl.comms, (size_t)nc * sizeof *n);
        if (!n) die("allocating the communicator table");
        bl.comms = n;
        bl.capcomms = nc;
    }
    bl.comms[bl.ncomms] = (bl_comm){h, id, size, rank, world, -1};
    bl.last_comm = bl.ncomms;
    return &bl.comms[bl.ncomms++];
}

static int *world_ranks(MPI_Comm c, int size) {
    int *w = malloc((size_t)size * sizeof(int));
    int *idx = malloc((size_t)size * sizeof(int));
    if (!w || !idx) die("allocating a communicator");
    MPI_Group g, wg;
    PMPI_Comm_group(c, &g);
    PMPI_Comm_group(MPI_COMM_WORLD, &wg);
    for (int i = 0; i < size; i++) idx[i] = i;
    PMPI_Group_translate_ranks(g, size, idx, wg, w);
    PMPI_Group_free(&g);
    PMPI_Group_free(&wg);
    free(idx);
    return w;
}

static void push_comm_rec(const bl_comm *c) {
    bl_rec *r = bl_push(BL_R_COMM, BL_FN_NONE, 0, 0, (uint32_t)c->size);
    r->comm = c->id;
    int64_t *p = bl_payload(r);
    for (int i = 0; i < c->size; i++) p[i] = c->world[i];
}

int bl_comm_slot(MPI_Comm c) {
    if (bl.last_comm < bl.ncomms && bl.comms[bl.last_comm].handle == c) return bl.last_comm;
    for (int i = 0; i < bl.ncomms; i++)
        if (bl.comms[i].handle == c) {
            bl.last_comm = i;
            return i;
        }
    /* Created by a routine we do not intercept: an id every member derives alike
     * from the membership (no communication possible here). */
    int size, rank, inter = 0;
    PMPI_Comm_test_inter(c, &inter);
    PMPI_Comm_size(c, &size);
    PMPI_Comm_rank(c, &rank);
    int *w = world_ranks(c, size);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < size; i++) h = (h ^ (uint64_t)(uint32_t)w[i]) * 1099511628211ull;
    int64_t id = 1000000000 + (int64_t)(h % 1000000000ull);
    bl_comm *cc = comm_add(c, id, size, rank, w);
    push_comm_rec(cc);
    (void)inter;
    return (int)(cc - bl.comms);
}

bl_comm *bl_comm_find(MPI_Comm c) { return &bl.comms[bl_comm_slot(c)]; }

int bl_world_of(int slot, int r) {
    const bl_comm *c = &bl.comms[slot];
    if (r < 0 || r >= c->size) return r == MPI_ANY_SOURCE ? -1 : -2;
    return c->world[r];
}

/* Registers a communicator created by an intercepted routine: rank 0 of the new
 * communicator chooses the id ((its world rank + 1) * 1e6 + its creation count)
 * and broadcasts it, so every member uses the same id. */
void bl_comm_register(MPI_Comm nc, int fn) {
    (void)fn;
    if (nc == MPI_COMM_NULL) return;
    int inter = 0;
    PMPI_Comm_test_inter(nc, &inter);
    if (inter) return;
    int size, rank;
    PMPI_Comm_size(nc, &size);
    PMPI_Comm_rank(nc, &rank);
    int64_t id = 0;
    if (rank == 0) id = (int64_t)(bl.world_rank + 1) * 1000000 + (++bl.comm_counter % 1000000);
    PMPI_Bcast(&id, 1, MPI_INT64_T, 0, nc);
    bl_comm *c = comm_add(nc, id, size, rank, world_ranks(nc, size));
    push_comm_rec(c);
}

uint64_t bl_type_bytes(int count, MPI_Datatype dt) {
    if (count <= 0 || dt == MPI_DATATYPE_NULL) return 0;
    int sz = 0;
    PMPI_Type_size(dt, &sz);
    return (uint64_t)count * (uint64_t)(sz > 0 ? sz : 0);
}

/* ---------------------------------------------------------------- requests */

static size_t hslot(uintptr_t k, size_t cap) {
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & (cap - 1);
}

void bl_req_put(MPI_Request r, int kind, int32_t peer, int32_t tag, int64_t comm, uint64_t bytes,
                int slot, int64_t id) {
    uintptr_t k = (uintptr_t)r;
    if (k == 0 || r == MPI_REQUEST_NULL) return;
    if ((bl.reqlen + 1) * 2 > bl.reqcap) {
        size_t nc = bl.reqcap ? bl.reqcap * 2 : 1024;
        bl_req *n = calloc(nc, sizeof *n);
        if (!n) die("allocating the request table");
        for (size_t i = 0; i < bl.reqcap; i++)
            if (bl.reqs[i].key) {
                size_t s = hslot(bl.reqs[i].key, nc);
                while (n[s].key) s = (s + 1) & (nc - 1);
                n[s] = bl.reqs[i];
            }
        free(bl.reqs);
        bl.reqs = n;
        bl.reqcap = nc;
    }
    size_t s = hslot(k, bl.reqcap);
    while (bl.reqs[s].key && bl.reqs[s].key != k) s = (s + 1) & (bl.reqcap - 1);
    if (!bl.reqs[s].key) bl.reqlen++;
    bl.reqs[s] = (bl_req){k, id, kind, peer, tag, comm, bytes, slot};
}

int bl_req_take(MPI_Request r, bl_req *out) {
    uintptr_t k = (uintptr_t)r;
    if (!bl.reqcap || k == 0 || r == MPI_REQUEST_NULL) return 0;
    size_t m = bl.reqcap - 1, s = hslot(k, bl.reqcap);
    while (bl.reqs[s].key && bl.reqs[s].key != k) s = (s + 1) & m;
    if (!bl.reqs[s].key) return 0;
    *out = bl.reqs[s];
    /* backward-shift deletion keeps probe chains intact */
    size_t hole = s, j = s;
    for (;;) {
        j = (j + 1) & m;
        if (!bl.reqs[j].key) break;
        size_t h = hslot(bl.reqs[j].key, bl.reqcap);
        if (((j - h) & m) >= ((j - hole) & m)) {
            bl.reqs[hole] = bl.reqs[j];
            hole = j;
        }
    }
    bl.reqs[hole].key = 0;
    bl.reqlen--;
    return 1;
}

/* ---------------------------------------------------------------- recorders */

static inline int64_t take_carry(uint64_t t0, uint64_t *comp) {
    *comp = comp_of(t0);
    return 0;
}

void bl_rec_send(int fn, uint64_t t0, uint64_t t1, int sync, int dest, int tag, MPI_Comm comm,
                 uint64_t bytes) {
    int slot = bl_comm_slot(comm);
    int64_t cid = bl.comms[slot].id;
    if (bl.active && dest != MPI_PROC_NULL) {
        uint64_t comp;
        take_carry(t0, &comp);
        bl_rec *r = bl_push(BL_R_SEND, fn, comp, t1 - t0, 0);
        r->flag = (uint16_t)sync;
        r->peer = bl_world_of(slot, dest);
        r->tag = tag;
        r->comm = cid;
        r->bytes = bytes;
        bl.ord++;
    }
    call_done(fn, t0, t1, cid);
}

void bl_rec_isend(int fn, uint64_t t0, uint64_t t1, int dest, int tag, MPI_Comm comm,
                  uint64_t bytes, MPI_Request req) {
    int slot = bl_comm_slot(comm);
    int64_t cid = bl.comms[slot].id;
    if (bl.active && dest != MPI_PROC_NULL) {
        uint64_t comp;
        take_carry(t0, &comp);
        bl_rec *r = bl_push(BL_R_ISEND, fn, comp, t1 - t0, 0);
        r->peer = bl_world_of(slot, dest);
        r->tag = tag;
        r->comm = cid;
        r->bytes = bytes;
        r->req = ++bl.next_req;
        bl_req_put(req, BL_K_SEND, r->peer, tag, cid, bytes, slot, r->req);
        bl.ord++;
    }
    call_done(fn, t0, t1, cid);
}

void bl_rec_recv(int fn, uint64_t t0, uint64_t t1, int src, int tag, MPI_Comm comm, uint64_t bytes,
                 int asrc, int atag, uint64_t abytes) {
    int slot = bl_comm_slot(comm);
    int64_t cid = bl.comms[slot].id;
    if (bl.active && src != MPI_PROC_NULL) {
        uint64_t comp;
        take_carry(t0, &comp);
        bl_rec *r = bl_push(BL_R_RECV, fn, comp, t1 - t0, 0);
        r->peer = bl_world_of(slot, src);
        r->tag = tag;
        r->comm = cid;
        r->bytes = bytes;
        r->peer2 = bl_world_of(slot, asrc);
        r->tag2 = atag;
        r->bytes2 = abytes;
        bl.ord++;
    }
    call_done(fn, t0, t1, cid);
}

void bl_rec_irecv(int fn, uint64_t t0, uint64_t t1, int src, int tag, MPI_Comm comm,
                  uint64_t bytes, MPI_Request req) {
    int slot = bl_comm_slot(comm);
    int64_t cid = bl.comms[slot].id;
    if (bl.active && src != MPI_PROC_NULL) {
        uint64_t comp;
        take_carry(t0, &comp);
        bl_rec *r = bl_push(BL_R_IRECV, fn, comp, t1 - t0, 0);
        r->peer = bl_world_of(slot, src);
        r->tag = tag;
        r->comm = cid;
        r->bytes = bytes;
        r->req = ++bl.next_req;
        bl_req_put(req, BL_K_RECV, r->peer, tag, cid, bytes, slot, r->req);
        bl.ord++;
    }
    call_done(fn, t0, t1, cid);
}

void bl_rec_sendrecv(uint64_t t0, uint64_t t1, int dest, int stag, uint64_t sbytes, int src,
                     int rtag, uint64_t rbytes, MPI_Comm comm, int asrc, int atag,
                     uint64_t abytes) {
    int slot = bl_comm_slot(comm);
    int64_t cid = bl.comms[slot].id;
    if (bl.active) {
        uint64_t comp;
        take_carry(t0, &comp);
        bl_rec *r = bl_push(BL_R_SENDRECV, BL_FN_SENDRECV, comp, t1 - t0, 3);
        r->peer = dest == MPI_PROC_NULL ? -3 : bl_world_of(slot, dest);
        r->tag = stag;
        r->bytes = sbytes;
        r->peer2 = src == MPI_PROC_NULL ? -3 : bl_world_of(slot, src);
        r->tag2 = rtag;
        r->bytes2 = rbytes;
        r->comm = cid;
        r->req = bl.next_req + 1;
        bl.next_req += 2;
        int64_t *p = bl_payload(r);
        p[0] = src == MPI_PROC_NULL ? -3 : bl_world_of(slot, asrc);
        p[1] = atag;
        p[2] = (int64_t)abytes;
        bl.ord++;
    }
    call_done(BL_FN_SENDRECV, t0, t1, cid);
}

void bl_rec_complete(int fn, uint64_t t0, uint64_t t1, int n, const MPI_Request *before,
                     const MPI_Status *st, const int *done) {
    uint64_t comp = 0, dur = t1 - t0;
    int first = 1;
    if (bl.active) take_carry(t0, &comp);
    for (int i = 0; i < n; i++) {
        if (before[i] == MPI_REQUEST_NULL) continue;
        if (!done[i]) {
            if (!bl.active || !bl.reqcap) continue;
            /* look up without removing */
            uintptr_t k = (uintptr_t)before[i];
            size_t m = bl.reqcap - 1, s = hslot(k, bl.reqcap);
            while (bl.reqs[s].key && bl.reqs[s].key != k) s = (s + 1) & m;
            if (!bl.reqs[s].key) continue;
            bl_rec *r = bl_push(BL_R_TESTFAIL, fn, first ? comp : 0, first ? dur : 0, 0);
            r->flag = first ? 0 : BL_CONT;
            first = 0;
            r->req = bl.reqs[s].id;
            continue;
        }
        bl_req q;
        if (!bl_req_take(before[i], &q)) continue; /* started outside the window */
        if (!bl.active) continue;
        bl_rec *r = bl_push(BL_R_WAIT, fn, first ? comp : 0, first ? dur : 0, 0);
        r->req = q.id;
        r->flag = (uint16_t)(q.kind | (first ? 0 : BL_CONT));
        first = 0;
        r->peer = q.peer;
        r->tag = q.tag;
        r->comm = q.comm;
        r->bytes = q.bytes;
        if (q.kind == BL_K_RECV) {
            if (st) {
                int cnt = 0;
                PMPI_Get_count(&st[i], MPI_BYTE, &cnt);
                r->peer2 = q.comm_slot < bl.ncomms ? bl_world_of(q.comm_slot, st[i].MPI_SOURCE) : -2;
                r->tag2 = st[i].MPI_TAG;
                r->bytes2 = cnt > 0 ? (uint64_t)cnt : 0;
            } else {
                r->peer2 = q.peer;
                r->tag2 = q.tag;
                r->bytes2 = q.bytes;
            }
        }
    }
    if (!first) bl.ord++;
    call_done(fn, t0, t1, 0);
}

void bl_rec_barrier(uint64_t t0, uint64_t t1, MPI_Comm comm) {
    int slot = bl_comm_slot(comm);
    int64_t cid = bl.comms[slot].id;
    if (bl.active) {
        uint64_t comp;
        take_carry(t0, &comp);
        bl_rec *r = bl_push(BL_R_BARRIER, BL_FN_BARRIER, comp, t1 - t0, 0);
        r->comm = cid;
        r->flag = 0;
        bl.ord++;
    }
    call_done(BL_FN_BARRIER, t0, t1, cid);
}

static const uint16_t glop_of[BL_FN_COUNT] = {
    [BL_FN_BARRIER] = 0, [BL_FN_BCAST] = 1, [BL_FN_GATHER] = 2, [BL_FN_GATHERV] = 3,
    [BL_FN_SCATTER] = 4, [BL_FN_SCATTERV] = 5, [BL_FN_ALLGATHER] = 6, [BL_FN_ALLGATHERV] = 7,
    [BL_FN_ALLTOALL] = 8, [BL_FN_ALLTOALLV] = 9, [BL_FN_REDUCE] = 10, [BL_FN_ALLREDUCE] = 11,
};

void bl_rec_coll(int fn, uint64_t t0, uint64_t t1, MPI_Comm comm, int root, uint64_t sbytes,
                 uint64_t rbytes, const int64_t *pay, uint32_t npay) {
    int slot = bl_comm_slot(comm);
    int64_t cid = bl.comms[slot].id;
    if (bl.active) {
        uint64_t comp;
        take_carry(t0, &comp);
        bl_rec *r = bl_push(BL_R_COLL, fn, comp, t1 - t0, npay);
        r->flag = glop_of[fn];
        r->comm = cid;
        r->peer = root;
        r->bytes = sbytes;
        r->bytes2 = rbytes;
        if (npay) memcpy(bl_payload(r), pay, (size_t)npay * 8);
        bl.ord++;
    }
    call_done(fn, t0, t1, cid);
}

/* MPI_Alltoallv: the trace record plus the count files (bl_counts.c). The gathers
 * of the count files happen after t1 and are excluded from both the call's time and
 * the following computation (t_last is reset by call_done). */
void bl_rec_a2av(uint64_t t0, uint64_t t1, MPI_Comm comm, const int *scounts, MPI_Datatype st,
                 const int *rcounts, MPI_Datatype rt, int in_place, double late_s, int late) {
    int slot = bl_comm_slot(comm);
    bl_comm *c = &bl.comms[slot];
    int n = c->size;
    int ssz = 0, rsz = 0;
    PMPI_Type_size(rt, &rsz);
    if (in_place) {
        scounts = rcounts;
        ssz = rsz;
    } else {
        PMPI_Type_size(st, &ssz);
    }
    bl.a2a_calls++;
    if (bl.active) {
        uint64_t comp;
        take_carry(t0, &comp);
        bl_rec *r = bl_push(BL_R_COLL, BL_FN_ALLTOALLV, comp, t1 - t0, (uint32_t)(2 * n));
        r->flag = 9;
        r->comm = c->id;
        r->peer = -1;
        uint64_t ts = 0, tr = 0;
        int64_t *p = bl_payload(r);
        for (int i = 0; i < n; i++) {
            p[i] = (int64_t)scounts[i] * ssz;
            p[n + i] = (int64_t)rcounts[i] * rsz;
            ts += (uint64_t)p[i];
            tr += (uint64_t)p[n + i];
        }
        r->bytes = ts;
        r->bytes2 = tr;
        bl.ord++;
        bl_calibrate();
        bl_a2a_record(comm, c, scounts, ssz, rcounts, rsz, (double)bl_ticks_ns(t1 - t0) * 1e-9,
                      late_s, late);
        c = &bl.comms[slot];
    }
    call_done(BL_FN_ALLTOALLV, t0, t1, c->id);
    /* the count gathers are not the application's computation */
    bl.t_last = bl_now();
}

void bl_comm_created(int fn, uint64_t t0, uint64_t t1, MPI_Comm *nc) {
    bl_comm_register(*nc, fn);
    /* the creation call leaves no trace record: its preceding computation is kept by
     * not moving t_last past t0, and its duration is dropped */
    bl.tot_comm += t1 - t0;
    uint64_t gap = comp_of(t0);
    bl.t_last = bl_now() - gap;
}

/* ---------------------------------------------------------------- controls */

void bl_ctl_start(void) {
    if (!bl.initialized || bl.finalized) return;
    bl.api_on = 1;
    set_active();
}

void bl_ctl_end(void) {
    if (!bl.initialized || bl.finalized) return;
    if (bl.active) {
        uint64_t t = bl_now();
        bl_push(BL_R_END, BL_FN_NONE, comp_of(t), 0, 0);
        bl.t_last = t;
    }
    bl.api_on = 0;
    set_active();
}

static void ctl_mark(int type, int idx) {
    if (!bl.initialized || bl.finalized || !bl.active) return;
    uint64_t t = bl_now();
    bl_rec *r = bl_push(type, BL_FN_NONE, comp_of(t), 0, 0);
    r->flag = (uint16_t)(idx < 0 ? 0 : idx);
    bl.t_last = t;
}

void bl_ctl_caliper(int idx) { ctl_mark(BL_R_CALIPER, idx); }
void bl_ctl_ignore(int idx) { ctl_mark(BL_R_IGNORE, idx); }

/* ---------------------------------------------------------------- init */

static void mkdirs(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0777);
            *p = '/';
        }
    mkdir(tmp, 0777);
}

void bl_init_after(int fn) {
    (void)fn;
    if (bl.initialized) return;
    bl.initialized = 1;
    bl.use_tsc = invariant_tsc();
    bl.ns_per_tick = 1.0;
    bl.mono0 = bl_mono_ns();
    bl.tsc0 = bl_now();
    PMPI_Comm_rank(MPI_COMM_WORLD, &bl.world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &bl.world_size);
    const char *d = getenv("BENCHLAKE_TRACE_DIR");
    snprintf(bl.dir, sizeof bl.dir, "%s", d && *d ? d : "benchlake_trace");
    mkdirs(bl.dir);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        const char *b = strrchr(exe, '/');
        snprintf(bl.app, sizeof bl.app, "%.200s", b ? b + 1 : exe);
    } else {
        snprintf(bl.app, sizeof bl.app, "app");
    }
    for (char *p = bl.app; *p; p++)
        if (*p == '"' || *p == ':') *p = '_';
    char path[4200];
    snprintf(path, sizeof path, "%s/.bl_log.%d", bl.dir, bl.world_rank);
    bl.log_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (bl.log_fd < 0) die(path);
    bl.cap = LOG_CAP;
    bl.buf = malloc(bl.cap);
    if (!bl.buf) die("allocating the trace buffer");
    bl.mpi_buffer_max = env_u64("MPI_BUFFER_MAX", 1048575);

    /* window controls (manual: BANDELA_PARTIAL_EXPERIMENT, BANDELA_WATCH_ROUT, ...) */
    const char *pe = getenv("BANDELA_PARTIAL_EXPERIMENT");
    bl.partial = pe && (strcasecmp(pe, "YES") == 0 || strcasecmp(pe, "Y") == 0);
    bl.api_on = !bl.partial;
    const char *w = getenv("BANDELA_WATCH_ROUT");
    bl.watch_fn = w && *w ? norm_fn(w) : 0;
    if (w && *w && !bl.watch_fn && bl.world_rank == 0)
        fprintf(stderr, "benchlake-tracer: BANDELA_WATCH_ROUT=%s is not an intercepted routine\n", w);
    bl.watch_comm = 1;
    const char *cw = getenv("BANDELA_COMM_T_W");
    if (cw && *cw && strcasecmp(cw, "WORLD") != 0 && strcasecmp(cw, "MPI_COMM_WORLD") != 0)
        bl.watch_comm = (int64_t)strtoll(cw, NULL, 10);
    bl.barrier_start = env_u64("BANDELA_BARRIER_START", 0);
    const char *be = getenv("BANDELA_BARRIER_END") ? "BANDELA_BARRIER_END" : "BANDELA_BARRIER_ENDS";
    bl.barrier_end = env_u64(be, UINT64_MAX);
    if (!bl.watch_fn) bl.barrier_start = 0, bl.barrier_end = UINT64_MAX;
    bl.show_every = env_u64("BANDELA_SHOW_W", 0);
    bl.heart_every = env_u64("BANDELA_HEART_BEAT", 0);
    bl.heart_fd = -1;
    if (bl.heart_every && bl.watch_fn) {
        snprintf(path, sizeof path, "%s/bandela_heartbeat.%d", bl.dir, bl.world_rank);
        bl.heart_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (bl.heart_fd >= 0) {
            const char *h = "#         call computation_s communication_s\n";
            if (write(bl.heart_fd, h, strlen(h)) < 0) { /* best effort */ }
        }
    } else if (bl.heart_every && bl.world_rank == 0) {
        fprintf(stderr, "benchlake-tracer: BANDELA_HEART_BEAT needs BANDELA_WATCH_ROUT\n");
    }
    bl.a2a_late = (int)env_u64("BENCHLAKE_TRACE_A2A_LATE", 0);
    bl.env_on = bl.barrier_start == 0;

    /* MPI_COMM_WORLD = 1 (prv2dim numbers WORLD 1); MPI_COMM_SELF and communicators
     * from routines we do not intercept get a membership-derived id on first use */
    int *ww = malloc((size_t)bl.world_size * sizeof(int));
    if (!ww) die("allocating");
    for (int i = 0; i < bl.world_size; i++) ww[i] = i;
    push_comm_rec(comm_add(MPI_COMM_WORLD, 1, bl.world_size, bl.world_rank, ww));
    bl.active = 0;
    set_active();
    bl.t_last = bl_now();
}

/* benchlake tracer: what happens at MPI_Finalize. Each rank converts its binary log
 * into its Bandela rank file (bandela.<rank>.txt), its part of the Dimemas trace and
 * its statistics; collectives are expanded for the Bandela trace into the
 * point-to-point kernels of one documented algorithm each (docs/tracer.md):
 *   Bcast binomial tree, Reduce binomial tree, Allreduce recursive doubling (with the
 *   MPICH fold for non-powers of two), Gather(v)/Scatter(v) linear, Allgather(v) ring,
 *   Alltoall(v) pairwise exchange; Barrier stays a barrier kernel.
 * Rank 0 then merges the Dimemas parts into trace.dim (offsets block, contiguous
 * per-task records) and writes bandela_stats. */
#define _GNU_SOURCE
#include "bl_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ buffered output */

typedef struct {
    int fd;
    char *buf;
    size_t len, cap;
    uint64_t total;
} out_t;

static void out_flush(out_t *o) {
    size_t off = 0;
    while (off < o->len) {
        ssize_t w = write(o->fd, o->buf + off, o->len - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "benchlake-tracer (rank %d): write: %s\n", bl.world_rank, strerror(errno));
            PMPI_Abort(MPI_COMM_WORLD, 70);
        }
        off += (size_t)w;
    }
    o->total += o->len;
    o->len = 0;
}

static int out_open(out_t *o, const char *path) {
    o->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o->fd < 0) {
        fprintf(stderr, "benchlake-tracer: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    o->cap = 1 << 20;
    o->buf = malloc(o->cap);
    o->len = 0;
    o->total = 0;
    if (!o->buf) PMPI_Abort(MPI_COMM_WORLD, 70);
    return 0;
}

static void out_close(out_t *o) {
    if (o->fd < 0) return;
    out_flush(o);
    close(o->fd);
    free(o->buf);
    o->fd = -1;
}

static inline void out_room(out_t *o, size_t n) {
    if (o->len + n > o->cap) out_flush(o);
}

static inline void out_s(out_t *o, const char *s) {
    size_t n = strlen(s);
    out_room(o, n);
    if (n > o->cap) {
        out_flush(o);
        return;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

static inline void out_c(out_t *o, char c) {
    out_room(o, 1);
    o->buf[o->len++] = c;
}

static inline void out_u(out_t *o, uint64_t v) {
    char t[24];
    int k = 0;
    do {
        t[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    out_room(o, (size_t)k);
    while (k) o->buf[o->len++] = t[--k];
}

static inline void out_i(out_t *o, int64_t v) {
    if (v < 0) {
        out_c(o, '-');
        out_u(o, (uint64_t)(-(v + 1)) + 1);
    } else {
        out_u(o, (uint64_t)v);
    }
}

/* nanoseconds as seconds with 9 decimals (exact) */
static inline void out_sec(out_t *o, uint64_t ns) {
    out_u(o, ns / 1000000000ull);
    out_c(o, '.');
    uint64_t f = ns % 1000000000ull;
    char t[9];
    for (int i = 8; i >= 0; i--) {
        t[i] = (char)('0' + f % 10);
        f /= 10;
    }
    out_room(o, 9);
    memcpy(o->buf + o->len, t, 9);
    o->len += 9;
}

/* ------------------------------------------------------------ log reader */

typedef struct {
    int fd;
    unsigned char *buf;
    size_t len, pos, cap;
} in_t;

static int in_need(in_t *in, size_t n) {
    if (in->len - in->pos >= n) return 1;
    memmove(in->buf, in->buf + in->pos, in->len - in->pos);
    in->len -= in->pos;
    in->pos = 0;
    if (n > in->cap) {
        unsigned char *b = realloc(in->buf, n);
        if (!b) PMPI_Abort(MPI_COMM_WORLD, 70);
        in->buf = b;
        in->cap = n;
    }
    while (in->len < n) {
        ssize_t r = read(in->fd, in->buf + in->len, in->cap - in->len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        in->len += (size_t)r;
    }
    return 1;
}

/* next record (aligned copy) and its payload pointer, valid until the next call */
static int in_next(in_t *in, bl_rec *rec, const int64_t **pay, int64_t **paybuf, size_t *paycap) {
    if (!in_need(in, sizeof(bl_rec))) return 0;
    memcpy(rec, in->buf + in->pos, sizeof *rec);
    size_t pn = (size_t)rec->npay * 8;
    if (!in_need(in, sizeof(bl_rec) + pn)) return 0;
    if (pn > *paycap) {
        int64_t *p = realloc(*paybuf, pn);
        if (!p) PMPI_Abort(MPI_COMM_WORLD, 70);
        *paybuf = p;
        *paycap = pn;
    }
    if (pn) memcpy(*paybuf, in->buf + in->pos + sizeof(bl_rec), pn);
    *pay = *paybuf;
    in->pos += sizeof(bl_rec) + pn;
    rec->comp_ns = bl_ticks_ns(rec->comp_ns); /* the log holds clock ticks */
    rec->dur_ns = bl_ticks_ns(rec->dur_ns);
    return 1;
}

static void in_rewind(in_t *in) {
    lseek(in->fd, 0, SEEK_SET);
    in->len = in->pos = 0;
}

/* ------------------------------------------------------------ wildcard receives */

typedef struct {
    int64_t req;
    int32_t src, tag;
    int known;
} wild_t;
static wild_t *wild;
static size_t wildcap, wildlen;

static wild_t *wild_slot(int64_t req, int insert) {
    if (!wildcap) {
        if (!insert) return NULL;
        wildcap = 1024;
        wild = calloc(wildcap, sizeof *wild);
        if (!wild) PMPI_Abort(MPI_COMM_WORLD, 70);
    }
    if (insert && (wildlen + 1) * 2 > wildcap) {
        size_t nc = wildcap * 2;
        wild_t *n = calloc(nc, sizeof *n);
        if (!n) PMPI_Abort(MPI_COMM_WORLD, 70);
        for (size_t i = 0; i < wildcap; i++)
            if (wild[i].req) {
                size_t s = ((uint64_t)wild[i].req * 0x9E3779B97F4A7C15ull >> 20) & (nc - 1);
                while (n[s].req) s = (s + 1) & (nc - 1);
                n[s] = wild[i];
            }
        free(wild);
        wild = n;
        wildcap = nc;
    }
    size_t s = ((uint64_t)req * 0x9E3779B97F4A7C15ull >> 20) & (wildcap - 1);
    while (wild[s].req && wild[s].req != req) s = (s + 1) & (wildcap - 1);
    if (wild[s].req == req) return &wild[s];
    if (!insert) return NULL;
    wild[s].req = req;
    wildlen++;
    return &wild[s];
}

/* ------------------------------------------------------------ conversion state */

typedef struct {
    int64_t id;
    int n;
    int *w;
} ccomm;

static ccomm *cc;
static int ncc;
static out_t bo, dimo;
static int me;
static uint64_t ord;
static int64_t ireq; /* internal requests: -1, -2, ... */
static int col_idx;  /* pending ignore index for the current collective */
static uint64_t *recv_from;
static uint64_t st_buffered, st_internal, st_barriers, st_sent, st_recv;
static uint64_t fn_calls[BL_FN_COUNT], fn_comm[BL_FN_COUNT], fn_comp[BL_FN_COUNT];
static uint64_t st_comp_total, st_comm_total;

static ccomm *find_cc(int64_t id) {
    for (int i = 0; i < ncc; i++)
        if (cc[i].id == id) return &cc[i];
    return NULL;
}

static void b_kernel_head(const char *fn) {
    out_s(&bo, "K ");
    out_u(&bo, ord);
    out_c(&bo, ' ');
    out_s(&bo, fn);
    out_c(&bo, ' ');
}

static void b_isend(const char *fn, int peer, int64_t comm, int64_t tag, uint64_t bytes, int64_t req) {
    b_kernel_head(fn);
    out_s(&bo, "isend ");
    out_i(&bo, peer);
    out_c(&bo, ' ');
    out_i(&bo, comm);
    out_c(&bo, ' ');
    out_i(&bo, tag);
    out_c(&bo, ' ');
    out_u(&bo, bytes);
    out_c(&bo, ' ');
    out_i(&bo, req);
    out_s(&bo, " 1");
    if (col_idx) {
        out_s(&bo, " col=");
        out_u(&bo, (uint64_t)col_idx);
    }
    out_c(&bo, '\n');
    st_internal++;
    st_sent += bytes;
}

static void b_irecv(const char *fn, int peer, int64_t comm, int64_t tag, uint64_t bytes, int64_t req) {
    b_kernel_head(fn);
    out_s(&bo, "irecv ");
    out_i(&bo, peer);
    out_c(&bo, ' ');
    out_i(&bo, comm);
    out_c(&bo, ' ');
    out_i(&bo, tag);
    out_c(&bo, ' ');
    out_u(&bo, bytes);
    out_c(&bo, ' ');
    out_i(&bo, req);
    out_s(&bo, " 1");
    if (col_idx) {
        out_s(&bo, " col=");
        out_u(&bo, (uint64_t)col_idx);
    }
    out_c(&bo, '\n');
    st_internal++;
}

static void b_wait(const char *fn, int64_t req, int test) {
    b_kernel_head(fn);
    out_s(&bo, test ? "test " : "wait ");
    out_i(&bo, req);
    out_s(&bo, test ? " 1\n" : "\n");
}

static void recv_stat(int src, uint64_t bytes) {
    if (src >= 0 && src < bl.world_size) recv_from[src] += bytes;
    st_recv += bytes;
}

/* Dimemas lines; consecutive CPU bursts (e.g. around unsuccessful tests, which have
 * no Dimemas record) are merged into one */
static uint64_t d_pending;

static void d_flush_burst(void) {
    if (!d_pending) return;
    out_s(&dimo, "1:");
    out_u(&dimo, (uint64_t)me);
    out_s(&dimo, ":0:");
    out_sec(&dimo, d_pending);
    out_c(&dimo, '\n');
    d_pending = 0;
}

static void d_head(int op) {
    d_flush_burst();
    out_u(&dimo, (uint64_t)op);
    out_c(&dimo, ':');
    out_u(&dimo, (uint64_t)me);
    out_s(&dimo, ":0:");
}

static void d_burst(uint64_t ns) { d_pending += ns; }

static void d_send(int dst, uint64_t bytes, int64_t tag, int64_t comm, int sync) {
    d_head(2);
    out_i(&dimo, dst);
    out_s(&dimo, ":-1:");
    out_u(&dimo, bytes);
    out_c(&dimo, ':');
    out_i(&dimo, tag);
    out_c(&dimo, ':');
    out_i(&dimo, comm);
    out_c(&dimo, ':');
    out_u(&dimo, (uint64_t)sync);
    out_c(&dimo, '\n');
}

static void d_recv(int src, uint64_t bytes, int64_t tag, int64_t comm, int kind) {
    d_head(3);
    out_i(&dimo, src);
    out_s(&dimo, ":-1:");
    out_u(&dimo, bytes);
    out_c(&dimo, ':');
    out_i(&dimo, tag);
    out_c(&dimo, ':');
    out_i(&dimo, comm);
    out_c(&dimo, ':');
    out_u(&dimo, (uint64_t)kind);
    out_c(&dimo, '\n');
}

static void d_glop(int glop, int64_t comm, int64_t root, uint64_t s, uint64_t r) {
    d_head(10);
    out_u(&dimo, (uint64_t)glop);
    out_c(&dimo, ':');
    out_i(&dimo, comm);
    out_c(&dimo, ':');
    out_i(&dimo, root);
    out_s(&dimo, ":0:");
    out_u(&dimo, s);
    out_c(&dimo, ':');
    out_u(&dimo, r);
    out_s(&dimo, ":1\n");
}

static void d_event(int64_t type, int64_t value) {
    d_head(20);
    out_i(&dimo, type);
    out_c(&dimo, ':');
    out_i(&dimo, value);
    out_c(&dimo, '\n');
}

/* ------------------------------------------------------------ collective expansion */

typedef struct {
    const char *fn;
    int64_t comm, tag;
    const int *w;
    int64_t ids[2];
    int nids;
} cx;

/* One exchange step: receive from `from` (rb bytes), send to `to` (sb bytes); either
 * side absent when its peer is < 0 or its size is 0; then wait both. */
static void step(cx *x, int from, uint64_t rb, int to, uint64_t sb) {
    int64_t r = 0, s = 0;
    if (from >= 0 && rb > 0) {
        r = --ireq;
        b_irecv(x->fn, x->w[from], x->comm, x->tag, rb, r);
        recv_stat(x->w[from], rb);
    }
    if (to >= 0 && sb > 0) {
        s = --ireq;
        b_isend(x->fn, x->w[to], x->comm, x->tag, sb, s);
    }
    if (r) b_wait(x->fn, r, 0);
    if (s) b_wait(x->fn, s, 0);
}

static void expand(const bl_rec *rec, const int64_t *pay, const ccomm *c) {
    int P = c->n, r = -1;
    for (int i = 0; i < P; i++)
        if (c->w[i] == me) r = i;
    if (r < 0) return;
    cx x = {bl_fn_names[rec->fn], rec->comm, -1000 - (int64_t)rec->flag, c->w, {0, 0}, 0};
    int root = rec->peer;
    switch (rec->fn) {
    case BL_FN_BCAST: {
        uint64_t m = rec->bytes;
        int v = (r - root + P) % P, mask = 1;
        while (mask < P) {
            if (v & mask) {
                step(&x, (v - mask + root) % P, m, -1, 0);
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while (mask > 0) {
            if (v + mask < P) step(&x, -1, 0, (v + mask + root) % P, m);
            mask >>= 1;
        }
        break;
    }
    case BL_FN_REDUCE: {
        uint64_t m = rec->bytes;
        int v = (r - root + P) % P;
        for (int mask = 1; mask < P; mask <<= 1) {
            if ((v & mask) == 0) {
                int src = v | mask;
                if (src < P) step(&x, (src + root) % P, m, -1, 0);
            } else {
                step(&x, -1, 0, ((v & ~mask) + root) % P, m);
                break;
            }
        }
        break;
    }
    case BL_FN_ALLREDUCE: {
        uint64_t m = rec->bytes;
        int pof2 = 1;
        while (pof2 * 2 <= P) pof2 *= 2;
        int rem = P - pof2, nr;
        if (r < 2 * rem) {
            if (r % 2 == 0) {
                step(&x, -1, 0, r + 1, m);
                nr = -1;
            } else {
                step(&x, r - 1, m, -1, 0);
                nr = r / 2;
            }
        } else {
            nr = r - rem;
        }
        if (nr >= 0)
            for (int mask = 1; mask < pof2; mask <<= 1) {
                int nd = nr ^ mask;
                int d = nd < rem ? nd * 2 + 1 : nd + rem;
                step(&x, d, m, d, m);
            }
        if (r < 2 * rem) {
            if (r % 2) step(&x, -1, 0, r - 1, m);
            else step(&x, r + 1, m, -1, 0);
        }
        break;
    }
    case BL_FN_GATHER:
    case BL_FN_GATHERV:
        if (r == root) {
            for (int i = 0; i < P; i++)
                if (i != r) step(&x, i, rec->fn == BL_FN_GATHER ? rec->bytes2 : (uint64_t)pay[i], -1, 0);
        } else {
            step(&x, -1, 0, root, rec->bytes);
        }
        break;
    case BL_FN_SCATTER:
    case BL_FN_SCATTERV:
        if (r == root) {
            for (int i = 0; i < P; i++)
                if (i != r) step(&x, -1, 0, i, rec->fn == BL_FN_SCATTER ? rec->bytes : (uint64_t)pay[i]);
        } else {
            step(&x, root, rec->bytes2, -1, 0);
        }
        break;
    case BL_FN_ALLGATHER:
    case BL_FN_ALLGATHERV:
        /* ring: at step s send block (r - s) right, receive block (r - s - 1) from left */
        for (int s = 0; s < P - 1; s++) {
            int sblk = ((r - s) % P + P) % P, rblk = ((r - s - 1) % P + P) % P;
            uint64_t sb = rec->fn == BL_FN_ALLGATHER ? rec->bytes2 : (uint64_t)pay[sblk];
            uint64_t rb = rec->fn == BL_FN_ALLGATHER ? rec->bytes2 : (uint64_t)pay[rblk];
            step(&x, (r - 1 + P) % P, rb, (r + 1) % P, sb);
        }
        break;
    case BL_FN_ALLTOALL:
    case BL_FN_ALLTOALLV:
        for (int s = 1; s < P; s++) {
            int to = (r + s) % P, from = (r - s + P) % P;
            uint64_t sb = rec->fn == BL_FN_ALLTOALL ? rec->bytes : (uint64_t)pay[to];
            uint64_t rb = rec->fn == BL_FN_ALLTOALL ? rec->bytes2 : (uint64_t)pay[P + from];
            step(&x, from, rb, to, sb);
        }
        break;
    default:
        break;
    }
}

/* Dimemas bytes (sent, received) of a collective on this rank. */
static void coll_sizes(const bl_rec *rec, int r, int P, uint64_t *s, uint64_t *rv) {
    uint64_t b = rec->bytes, b2 = rec->bytes2;
    int root = rec->peer;
    switch (rec->fn) {
    case BL_FN_BCAST: *s = r == root ? b : 0; *rv = r == root ? 0 : b; break;
    case BL_FN_REDUCE: *s = b; *rv = r == root ? b : 0; break;
    case BL_FN_GATHER: *s = b; *rv = r == root ? b2 * (uint64_t)P : 0; break;
    case BL_FN_SCATTER: *s = r == root ? b * (uint64_t)P : 0; *rv = b2; break;
    case BL_FN_ALLGATHER: *s = b2; *rv = b2 * (uint64_t)P; break;
    case BL_FN_ALLTOALL: *s = b * (uint64_t)P; *rv = b2 * (uint64_t)P; break;
    default: *s = b; *rv = b2; break; /* allreduce and the v-variants store totals */
    }
}

static int is_test_fn(int fn) {
    return fn == BL_FN_TEST || fn == BL_FN_TESTALL || fn == BL_FN_TESTANY || fn == BL_FN_TESTSOME;
}

/* substitutes the completed source/tag of a wildcard receive */
static void subst(int64_t req, int32_t *src, int32_t *tag) {
    if (*src != -1 && *tag != MPI_ANY_TAG) return;
    wild_t *w = wild_slot(req, 0);
    if (w && w->known) {
        *src = w->src;
        *tag = w->tag;
    }
}

static void convert(const char *host_ids_line, int host) {
    char path[4300];
    snprintf(path, sizeof path, "%s/.bl_log.%d", bl.dir, bl.world_rank);
    in_t in = {open(path, O_RDONLY | O_CLOEXEC), malloc(4 << 20), 0, 0, 4 << 20};
    if (in.fd < 0 || !in.buf) PMPI_Abort(MPI_COMM_WORLD, 70);
    bl_rec rec;
    const int64_t *pay;
    int64_t *paybuf = NULL;
    size_t paycap = 0;

    /* pass 1: completed source and tag of wildcard receives */
    while (in_next(&in, &rec, &pay, &paybuf, &paycap)) {
        if (rec.type == BL_R_IRECV && (rec.peer == -1 || rec.tag == MPI_ANY_TAG))
            wild_slot(rec.req, 1)->known = 0;
        else if (rec.type == BL_R_WAIT && (rec.flag & 0xff) == BL_K_RECV) {
            wild_t *w = wild_slot(rec.req, 0);
            if (w && rec.peer2 >= 0) {
                w->src = rec.peer2;
                w->tag = rec.tag2;
                w->known = 1;
            }
        }
    }
    in_rewind(&in);

    snprintf(path, sizeof path, "%s/bandela.%d.txt", bl.dir, bl.world_rank);
    out_open(&bo, path);
    snprintf(path, sizeof path, "%s/.bl_dim.%d", bl.dir, bl.world_rank);
    out_open(&dimo, path);
    char head[512];
    snprintf(head, sizeof head, "# bandela-replay v1  rank=%d nranks=%d  (benchlake-tracer, app=%s%s)\nH %d %d %d\n",
             bl.world_rank, bl.world_size, bl.app, host_ids_line, bl.world_rank, bl.world_size, host);
    out_s(&bo, head);
    me = bl.world_rank;
    int pending_ignore = 0;
    while (in_next(&in, &rec, &pay, &paybuf, &paycap)) {
        const char *fn = bl_fn_names[rec.fn];
        int begins = rec.type != BL_R_COMM && rec.type != BL_R_CALIPER && rec.type != BL_R_IGNORE &&
                     rec.type != BL_R_END && !(rec.flag & BL_CONT &&
                                               (rec.type == BL_R_WAIT || rec.type == BL_R_TESTFAIL));
        if (rec.comp_ns) {
            out_s(&bo, "C ");
            out_sec(&bo, rec.comp_ns);
            out_c(&bo, '\n');
            d_burst(rec.comp_ns);
            st_comp_total += rec.comp_ns;
            fn_comp[begins ? rec.fn : BL_FN_NONE] += rec.comp_ns;
        }
        if (begins) {
            ord++;
            fn_calls[rec.fn]++;
            fn_comm[rec.fn] += rec.dur_ns;
            st_comm_total += rec.dur_ns;
            col_idx = 0;
            if (pending_ignore) {
                /* the meta record lets the model skip the whole routine (its waits
                 * too) or apply ignore_safely; col= also marks the collective's
                 * send/receive kernels, as the manual's "in" column does */
                if (rec.type == BL_R_COLL) col_idx = pending_ignore;
                out_s(&bo, "M ignore_next_col ");
                out_u(&bo, (uint64_t)pending_ignore);
                out_c(&bo, '\n');
                pending_ignore = 0;
            }
        }
        switch (rec.type) {
        case BL_R_COMM: {
            ccomm *c = find_cc(rec.comm);
            if (!c) {
                ccomm *n = realloc(cc, (size_t)(ncc + 1) * sizeof *n);
                if (!n) PMPI_Abort(MPI_COMM_WORLD, 70);
                cc = n;
                c = &cc[ncc++];
                c->id = rec.comm;
                c->w = NULL;
            }
            free(c->w);
            c->n = (int)rec.npay;
            c->w = malloc((size_t)c->n * sizeof(int) + 1);
            if (!c->w) PMPI_Abort(MPI_COMM_WORLD, 70);
            out_s(&bo, "M comm ");
            out_i(&bo, rec.comm);
            out_c(&bo, ' ');
            for (int i = 0; i < c->n; i++) {
                c->w[i] = (int)pay[i];
                if (i) out_c(&bo, ',');
                out_i(&bo, pay[i]);
            }
            out_c(&bo, '\n');
            break;
        }
        case BL_R_SEND: {
            int64_t q = --ireq;
            b_isend(fn, rec.peer, rec.comm, rec.tag, rec.bytes, q);
            b_wait(fn, q, 0);
            if (rec.bytes <= bl.mpi_buffer_max) st_buffered += rec.bytes;
            d_send(rec.peer, rec.bytes, rec.tag, rec.comm, rec.flag & 1);
            break;
        }
        case BL_R_ISEND:
            b_isend(fn, rec.peer, rec.comm, rec.tag, rec.bytes, rec.req);
            if (rec.bytes <= bl.mpi_buffer_max) st_buffered += rec.bytes;
            d_send(rec.peer, rec.bytes, rec.tag, rec.comm, 2);
            break;
        case BL_R_RECV: {
            int64_t q = --ireq;
            b_irecv(fn, rec.peer2, rec.comm, rec.tag2, rec.bytes2, q);
            b_wait(fn, q, 0);
            recv_stat(rec.peer2, rec.bytes2);
            d_recv(rec.peer2, rec.bytes2, rec.tag2, rec.comm, 0);
            break;
        }
        case BL_R_IRECV: {
            int32_t src = rec.peer, tag = rec.tag;
            subst(rec.req, &src, &tag);
            b_irecv(fn, src, rec.comm, tag, rec.bytes, rec.req);
            d_recv(src, rec.bytes, tag, rec.comm, 1);
            break;
        }
        case BL_R_SENDRECV: {
            int asrc = (int)pay[0];
            int64_t atag = pay[1];
            uint64_t abytes = (uint64_t)pay[2];
            if (rec.peer >= 0) {
                b_isend(fn, rec.peer, rec.comm, rec.tag, rec.bytes, rec.req);
                if (rec.bytes <= bl.mpi_buffer_max) st_buffered += rec.bytes;
                d_send(rec.peer, rec.bytes, rec.tag, rec.comm, 2);
            }
            if (rec.peer2 != -3) {
                b_irecv(fn, asrc, rec.comm, atag, abytes, rec.req + 1);
                recv_stat(asrc, abytes);
            }
            if (rec.peer >= 0) b_wait(fn, rec.req, 0);
            if (rec.peer2 != -3) {
                b_wait(fn, rec.req + 1, 0);
                d_recv(asrc, abytes, atag, rec.comm, 0);
            }
            break;
        }
        case BL_R_WAIT:
            b_wait(fn, rec.req, is_test_fn(rec.fn));
            if ((rec.flag & 0xff) == BL_K_RECV) {
                int32_t src = rec.peer, tag = rec.tag;
                subst(rec.req, &src, &tag);
                d_recv(src, rec.bytes, tag, rec.comm, 2);
                recv_stat(rec.peer2, rec.bytes2);
            }
            break;
        case BL_R_TESTFAIL:
            b_kernel_head(fn);
            out_s(&bo, "test ");
            out_i(&bo, rec.req);
            out_s(&bo, " 0\n");
            break;
        case BL_R_BARRIER:
            b_kernel_head(fn);
            out_s(&bo, "barrier ");
            out_i(&bo, rec.comm);
            out_c(&bo, '\n');
            st_barriers++;
            d_glop(0, rec.comm, 0, 0, 0);
            break;
        case BL_R_COLL: {
            ccomm *c = find_cc(rec.comm);
            if (!c) break;
            int r = 0;
            for (int i = 0; i < c->n; i++)
                if (c->w[i] == me) r = i;
            expand(&rec, pay, c);
            uint64_t s, rv;
            coll_sizes(&rec, r, c->n, &s, &rv);
            int64_t isroot = rec.peer >= 0 && r == rec.peer;
            if (rec.fn == BL_FN_REDUCE) isroot = rec.peer >= 0 && rec.peer < c->n ? c->w[rec.peer] : 0;
            if (col_idx) d_event(81001, col_idx);
            d_glop(rec.flag, rec.comm, isroot, s, rv);
            break;
        }
        case BL_R_CALIPER:
            if (rec.flag) {
                out_s(&bo, "M caliper push ");
                out_u(&bo, rec.flag);
                out_c(&bo, '\n');
            } else {
                out_s(&bo, "M caliper pop\n");
            }
            d_event(81000, rec.flag);
            break;
        case BL_R_IGNORE:
            pending_ignore = rec.flag;
            break;
        default:
            break;
        }
    }
    if (pending_ignore) {
        out_s(&bo, "M ignore_next_col ");
        out_u(&bo, (uint64_t)pending_ignore);
        out_c(&bo, '\n');
    }
    d_flush_burst();
    out_close(&bo);
    out_close(&dimo);
    close(in.fd);
    free(in.buf);
    free(paybuf);
}

/* ------------------------------------------------------------ merge and stats */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void merge_dimemas(void) {
    /* communicators: union of every rank's definitions */
    char path[4300];
    size_t cap = 0, n = 0;
    int64_t *ids = NULL;
    char **defs = NULL;
    for (int r = 0; r < bl.world_size; r++) {
        snprintf(path, sizeof path, "%s/.bl_comms.%d", bl.dir, r);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char *line = NULL;
        size_t lc = 0;
        while (getline(&line, &lc, f) > 0) {
            if (strncmp(line, "d:1:", 4) != 0) continue;
            int64_t id = strtoll(line + 4, NULL, 10);
            int seen = 0;
            for (size_t i = 0; i < n; i++)
                if (ids[i] == id) seen = 1;
            if (seen) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                ids = realloc(ids, cap * sizeof *ids);
                defs = realloc(defs, cap * sizeof *defs);
                if (!ids || !defs) PMPI_Abort(MPI_COMM_WORLD, 70);
            }
            ids[n] = id;
            defs[n] = strdup(line);
            n++;
        }
        free(line);
        fclose(f);
        unlink(path);
    }
    /* sort definitions by id */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && cmp_i64(&ids[j - 1], &ids[j]) > 0; j--) {
            int64_t t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
            char *d = defs[j];
            defs[j] = defs[j - 1];
            defs[j - 1] = d;
        }
    size_t defs_len = 0;
    for (size_t i = 0; i < n; i++) defs_len += strlen(defs[i]);
    uint64_t *sizes = calloc((size_t)bl.world_size, 8);
    if (!sizes) PMPI_Abort(MPI_COMM_WORLD, 70);
    for (int r = 0; r < bl.world_size; r++) {
        struct stat sb;
        snprintf(path, sizeof path, "%s/.bl_dim.%d", bl.dir, r);
        if (stat(path, &sb) == 0) sizes[r] = (uint64_t)sb.st_size;
    }
    /* header: the offsets position is padded to 15 characters, as prv2dim does */
    char head0[600], tail[64];
    snprintf(head0, sizeof head0, "#DIMEMAS:\"%s\":1,", bl.app);
    char *threads = malloc((size_t)bl.world_size * 2 + 1);
    if (!threads) PMPI_Abort(MPI_COMM_WORLD, 70);
    for (int r = 0; r < bl.world_size; r++) {
        threads[2 * r] = '1';
        threads[2 * r + 1] = ',';
    }
    threads[2 * bl.world_size - 1] = 0;
    snprintf(tail, sizeof tail, "),%zu,0,0", n);
    char ntask[32];
    snprintf(ntask, sizeof ntask, ":%d(", bl.world_size);
    size_t width = 15;
    size_t hdr_len = strlen(head0) + width + strlen(ntask) + strlen(threads) + strlen(tail) + 1;
    uint64_t pos = hdr_len + defs_len;
    uint64_t *offs = calloc((size_t)bl.world_size, 8);
    if (!offs) PMPI_Abort(MPI_COMM_WORLD, 70);
    for (int r = 0; r < bl.world_size; r++) {
        offs[r] = pos;
        pos += sizes[r];
    }
    out_t o;
    snprintf(path, sizeof path, "%s/trace.dim", bl.dir);
    if (out_open(&o, path) == 0) {
        char num[32];
        snprintf(num, sizeof num, "%llu", (unsigned long long)pos);
        out_s(&o, head0);
        out_s(&o, num);
        out_s(&o, ntask);
        out_s(&o, threads);
        out_s(&o, tail);
        for (size_t k = strlen(num); k < width; k++) out_c(&o, ' ');
        out_c(&o, '\n');
        for (size_t i = 0; i < n; i++) out_s(&o, defs[i]);
        for (int r = 0; r < bl.world_size; r++) {
            snprintf(path, sizeof path, "%s/.bl_dim.%d", bl.dir, r);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            out_flush(&o);
            for (;;) {
                ssize_t got = read(fd, o.buf, o.cap);
                if (got < 0 && errno == EINTR) continue;
                if (got <= 0) break;
                o.len = (size_t)got;
                out_flush(&o);
            }
            close(fd);
            unlink(path);
        }
        for (int r = 0; r < bl.world_size; r++) {
            out_s(&o, "s:");
            out_u(&o, (uint64_t)r);
            out_c(&o, ':');
            out_u(&o, offs[r]);
            out_c(&o, '\n');
        }
        out_close(&o);
    }
    for (size_t i = 0; i < n; i++) free(defs[i]);
    free(defs);
    free(ids);
    free(sizes);
    free(offs);
    free(threads);
}

static double env_f(const char *name, double d) {
    const char *v = getenv(name);
    if (!v || !*v) return d;
    char *end;
    double x = strtod(v, &end);
    return *end || x < 0 ? d : x;
}

/* per-rank vector gathered to rank 0 */
enum { S_BUF, S_INT, S_BAR, S_SENT, S_RECV, S_COMP, S_COMM, S_REC, S_NSCAL };

static void write_stats(const uint64_t *all, size_t w) {
    int N = bl.world_size, F = BL_FN_COUNT;
    double bw = env_f("BANDELA_BANDWIDTH", 700.0);
    double lat = env_f("BANDELA_LATENCY", 2.0);
    double blat = env_f("BANDELA_BARRIER_LATENCY", 10.0);
    char path[4300];
    snprintf(path, sizeof path, "%s/bandela_stats", bl.dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    const uint64_t *row;
    fprintf(f, "# benchlake-tracer statistics v1 (Bandelalight layout, docs/tracer.md)\n");
    fprintf(f, "Ranks: %d\n", N);
    fprintf(f, "Bandwidth (MB/s): %.6f\n", bw);
    fprintf(f, "Latency (us): %.6f\n", lat);
    fprintf(f, "Barrier latency (us): %.6f\n", blat);
    fprintf(f, "MPI_BUFFER_MAX: %llu\n\n", (unsigned long long)bl.mpi_buffer_max);
    fprintf(f, ">>>> Receive Matrix (bytes) <<<<\nLines are receivers, columns are senders\nCPU");
    for (int c = 0; c < N; c++) fprintf(f, " %d", c);
    fputc('\n', f);
    for (int r = 0; r < N; r++) {
        row = all + (size_t)r * w;
        fprintf(f, "%d", r);
        for (int c = 0; c < N; c++) fprintf(f, " %llu", (unsigned long long)row[c]);
        fputc('\n', f);
    }
    fputc('\n', f);
    for (int r = 0; r < N; r++) {
        const uint64_t *s = all + (size_t)r * w + N;
        fprintf(f, "rank %d bytes_buffered=%llu internal_requests=%llu barrier_requests=%llu bytes_sent=%llu bytes_received=%llu records=%llu\n",
                r, (unsigned long long)s[S_BUF], (unsigned long long)s[S_INT],
                (unsigned long long)s[S_BAR], (unsigned long long)s[S_SENT],
                (unsigned long long)s[S_RECV], (unsigned long long)s[S_REC]);
    }
    /* routines used by some rank */
    int used[BL_FN_COUNT] = {0};
    for (int r = 0; r < N; r++)
        for (int k = 1; k < F; k++)
            if (all[(size_t)r * w + N + S_NSCAL + k]) used[k] = 1;
    const char *titles[3] = {"Request times in seconds", "Computation before requests in seconds",
                             "Number of requests"};
    for (int t = 0; t < 3; t++) {
        fprintf(f, "\n>>>> %s <<<<\nCPU", titles[t]);
        if (t == 0) fprintf(f, " Comput Wait Latency Transfer");
        if (t == 1) fprintf(f, " Trailing");
        for (int k = 1; k < F; k++)
            if (used[k]) fprintf(f, " %s", bl_fn_names[k]);
        fputc('\n', f);
        for (int r = 0; r < N; r++) {
            const uint64_t *s = all + (size_t)r * w + N;
            const uint64_t *calls = s + S_NSCAL, *comm = calls + F, *comp = comm + F;
            fprintf(f, "%04d", r);
            if (t == 0) {
                double transfer = (double)s[S_RECV] / (bw * 1e6) + (double)s[S_BUF] / (2 * bw * 1e6);
                double latency = (double)s[S_INT] * lat * 1e-6 + (double)s[S_BAR] * blat * 1e-6;
                double measured = (double)s[S_COMM] * 1e-9;
                fprintf(f, " %.9f %.9f %.9f %.9f", (double)s[S_COMP] * 1e-9,
                        measured - transfer - latency, latency, transfer);
            }
            if (t == 1) fprintf(f, " %.9f", (double)comp[0] * 1e-9);
            for (int k = 1; k < F; k++) {
                if (!used[k]) continue;
                if (t == 0) fprintf(f, " %.9f", (double)comm[k] * 1e-9);
                else if (t == 1) fprintf(f, " %.9f", (double)comp[k] * 1e-9);
                else fprintf(f, " %llu", (unsigned long long)calls[k]);
            }
            fputc('\n', f);
        }
    }
    fclose(f);
}

/* A host or node name as the rank map writes it: printable ASCII without
 * spaces, anything else replaced by '_'; an empty name becomes "unknown". */
static void bl_clean_name(char *dst, const char *src, size_t cap) {
    size_t k = 0;
    for (; src && src[k] && k + 1 < cap; k++) {
        unsigned char c = (unsigned char)src[k];
        dst[k] = (c > 0x20 && c < 0x7f) ? (char)c : '_';
    }
    dst[k] = 0;
    if (k == 0) snprintf(dst, cap, "unknown");
}

/* bandela_ranks (format v1, docs/tracer.md): rank 0 writes every rank's host
 * name and node, gathered here. The node follows the one rule of
 * benchlake_core::node: SLURMD_NODENAME, else the agent's BENCHLAKE_NODE,
 * else the host name. */
static void write_ranks(const char *hosts) {
    char node[64];
    const char *env = getenv("SLURMD_NODENAME");
    if (!env || !*env) env = getenv("BENCHLAKE_NODE");
    bl_clean_name(node, env && *env ? env : hosts + (size_t)bl.world_rank * 64, sizeof node);
    char *nodes = bl.world_rank == 0 ? malloc((size_t)bl.world_size * 64) : NULL;
    if (bl.world_rank == 0 && !nodes) PMPI_Abort(MPI_COMM_WORLD, 70);
    PMPI_Gather(node, 64, MPI_CHAR, nodes, 64, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (bl.world_rank != 0) return;
    char path[4300];
    snprintf(path, sizeof path, "%s/bandela_ranks", bl.dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "benchlake-tracer: cannot write %s: %s\n", path, strerror(errno));
        free(nodes);
        return;
    }
    fprintf(f, "# benchlake-tracer ranks v1\nranks %d\n", bl.world_size);
    for (int r = 0; r < bl.world_size; r++) {
        char h[64], n[64];
        bl_clean_name(h, hosts + (size_t)r * 64, sizeof h);
        memcpy(n, nodes + (size_t)r * 64, 64);
        n[63] = 0;
        fprintf(f, "%d %s %s\n", r, h, n);
    }
    fclose(f);
    free(nodes);
}

void bl_finalize_before(void) {
    if (bl.active) {
        uint64_t t = bl_now();
        uint64_t comp = t > bl.t_last ? t - bl.t_last : 0;
        if (comp) bl_push(BL_R_END, BL_FN_NONE, comp, 0, 0);
    }
    bl.active = 0;
    bl_calibrate();
    /* flush the log */
    if (bl.len) {
        bl_log_write(bl.buf, bl.len);
        bl.log_bytes += bl.len;
        bl.len = 0;
    }
    if (bl.heart_fd >= 0) close(bl.heart_fd);
    bl.heart_fd = -1;

    /* host ids: distinct host names in world-rank order of first appearance */
    char host[64] = {0};
    gethostname(host, sizeof host - 1);
    char *hosts = malloc((size_t)bl.world_size * 64);
    if (!hosts) PMPI_Abort(MPI_COMM_WORLD, 70);
    PMPI_Allgather(host, 64, MPI_CHAR, hosts, 64, MPI_CHAR, MPI_COMM_WORLD);
    int myhost = 0, nhosts = 0;
    for (int r = 0; r < bl.world_size; r++) {
        int id = -1;
        for (int q = 0; q < r && id < 0; q++)
            if (strncmp(hosts + (size_t)q * 64, hosts + (size_t)r * 64, 64) == 0) id = -2;
        if (id == -1) nhosts++;
        if (r == bl.world_rank) {
            /* index among distinct hosts */
            int k = 0;
            for (int q = 0; q <= r; q++) {
                int first = 1;
                for (int p = 0; p < q; p++)
                    if (strncmp(hosts + (size_t)p * 64, hosts + (size_t)q * 64, 64) == 0) first = 0;
                if (first) {
                    if (strncmp(hosts + (size_t)q * 64, host, 64) == 0) myhost = k;
                    k++;
                }
            }
        }
    }
    write_ranks(hosts);
    free(hosts);
    char hl[64];
    snprintf(hl, sizeof hl, ", hosts=%d", nhosts);

    recv_from = calloc((size_t)bl.world_size, 8);
    if (!recv_from) PMPI_Abort(MPI_COMM_WORLD, 70);
    convert(hl, myhost);

    /* communicator definitions for the Dimemas header */
    char path[4300];
    snprintf(path, sizeof path, "%s/.bl_comms.%d", bl.dir, bl.world_rank);
    FILE *cf = fopen(path, "w");
    if (cf) {
        for (int i = 0; i < ncc; i++) {
            fprintf(cf, "d:1:%lld:%d", (long long)cc[i].id, cc[i].n);
            for (int k = 0; k < cc[i].n; k++) fprintf(cf, ":%d", cc[i].w[k]);
            fputc('\n', cf);
        }
        fclose(cf);
    }
    bl_a2a_write();

    int N = bl.world_size, F = BL_FN_COUNT;
    size_t w = (size_t)N + S_NSCAL + 3 * (size_t)F;
    uint64_t *mine = calloc(w, 8);
    uint64_t *all = bl.world_rank == 0 ? calloc(w * (size_t)N, 8) : NULL;
    if (!mine || (bl.world_rank == 0 && !all)) PMPI_Abort(MPI_COMM_WORLD, 70);
    memcpy(mine, recv_from, (size_t)N * 8);
    uint64_t *s = mine + N;
    s[S_BUF] = st_buffered;
    s[S_INT] = st_internal;
    s[S_BAR] = st_barriers;
    s[S_SENT] = st_sent;
    s[S_RECV] = st_recv;
    s[S_COMP] = st_comp_total;
    s[S_COMM] = st_comm_total;
    s[S_REC] = bl.log_records;
    memcpy(s + S_NSCAL, fn_calls, (size_t)F * 8);
    memcpy(s + S_NSCAL + F, fn_comm, (size_t)F * 8);
    memcpy(s + S_NSCAL + 2 * F, fn_comp, (size_t)F * 8);
    PMPI_Gather(mine, (int)w, MPI_UINT64_T, all, (int)w, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    PMPI_Barrier(MPI_COMM_WORLD); /* every part is on disk */
    if (bl.world_rank == 0) {
        merge_dimemas();
        write_stats(all, w);
    }
    free(all);
    free(mine);
    close(bl.log_fd);
    const char *keep = getenv("BENCHLAKE_TRACE_KEEP_LOG");
    if (!keep || strcmp(keep, "1") != 0) {
        snprintf(path, sizeof path, "%s/.bl_log.%d", bl.dir, bl.world_rank);
        unlink(path);
    }
    if (getenv("BENCHLAKE_TRACE_VERBOSE") && bl.world_rank == 0)
        fprintf(stderr, "benchlake-tracer: %llu records, %llu log bytes on rank 0, traces in %s\n",
                (unsigned long long)bl.log_records, (unsigned long long)bl.log_bytes, bl.dir);
    bl.finalized = 1;
}

/* benchlake tracer: alltoallv count and timing files in the collective profiler's
 * format version 9 (reference counts.md §1). As in the profiler, the lead rank (comm
 * rank 0) gathers every rank's counts at each call with PMPI_Gather and keeps one
 * block per distinct (comm size, send/recv datatype sizes, send matrix, recv matrix);
 * the timing files are streamed through a 1 MiB stdio buffer. Files are written by
 * each lead at MPI_Finalize (bl_a2a_write). */
#define _GNU_SOURCE
#include "bl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n, sdt, rdt;
    int *smat, *rmat; /* n*n, row i = comm rank i */
    uint64_t hash;
    uint64_t *calls;
    size_t ncalls, capcalls;
} a2a_block;

typedef struct {
    int64_t comm_id;
    int k;        /* per-lead communicator index */
    FILE *exec, *late;
} a2a_comm;

static a2a_block *blocks;
static size_t nblocks, capblocks;
static a2a_comm *acomms;
static int nacomms;
static uint64_t first_call = UINT64_MAX, logged_as_lead;
static int64_t *gbuf;
static size_t gcap;

static uint64_t job_id(void) {
    const char *j = getenv("SLURM_JOB_ID");
    if (!j || !*j) j = getenv("LSB_JOBID");
    return j && *j ? strtoull(j, NULL, 10) : 0;
}

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

static a2a_comm *lead_comm(bl_comm *c) {
    for (int i = 0; i < nacomms; i++)
        if (acomms[i].comm_id == c->id) return &acomms[i];
    a2a_comm *n = realloc(acomms, (size_t)(nacomms + 1) * sizeof *n);
    if (!n) PMPI_Abort(MPI_COMM_WORLD, 70);
    acomms = n;
    a2a_comm *a = &acomms[nacomms];
    a->comm_id = c->id;
    a->k = nacomms++;
    char path[4300];
    uint64_t j = job_id();
    snprintf(path, sizeof path, "%s/alltoallv_execution_times.rank%d_comm%d_job%llu.md", bl.dir,
             bl.world_rank, a->k, (unsigned long long)j);
    a->exec = fopen(path, "w");
    a->late = NULL;
    if (a->exec) {
        setvbuf(a->exec, NULL, _IOFBF, 1 << 20);
        fputs("FORMAT_VERSION: 9\n\n", a->exec);
    }
    if (bl.a2a_late) {
        snprintf(path, sizeof path, "%s/alltoallv_late_arrival_times.rank%d_comm%d_job%llu.md",
                 bl.dir, bl.world_rank, a->k, (unsigned long long)j);
        a->late = fopen(path, "w");
        if (a->late) {
            setvbuf(a->late, NULL, _IOFBF, 1 << 20);
            fputs("FORMAT_VERSION: 9\n\n", a->late);
        }
    }
    return a;
}

void bl_a2a_record(MPI_Comm comm, bl_comm *c, const int *scounts, int sdt, const int *rcounts,
                   int rdt, double exec_s, double late_s, int late) {
    int n = c->size, me = c->rank;
    uint64_t call = bl.a2a_calls - 1;
    if (first_call == UINT64_MAX) first_call = call;
    size_t w = (size_t)(2 * n + 4);
    size_t need = me == 0 ? w * (size_t)n + w : w;
    if (need > gcap) {
        int64_t *g = realloc(gbuf, need * 8);
        if (!g) PMPI_Abort(MPI_COMM_WORLD, 70);
        gbuf = g;
        gcap = need;
    }
    int64_t *mine = gbuf;
    int64_t *all = gbuf + w;
    for (int i = 0; i < n; i++) {
        mine[i] = scounts[i];
        mine[n + i] = rcounts[i];
    }
    mine[2 * n] = (int64_t)(exec_s * 1e9);
    mine[2 * n + 1] = (int64_t)(late_s * 1e9);
    mine[2 * n + 2] = sdt;
    mine[2 * n + 3] = rdt;
    PMPI_Gather(mine, (int)w, MPI_INT64_T, me == 0 ? all : NULL, (int)w, MPI_INT64_T, 0, comm);
    if (me != 0) return;
    logged_as_lead++;
    a2a_comm *a = lead_comm(c);
    if (a->exec) {
        fprintf(a->exec, "# Call %llu\n", (unsigned long long)call);
        for (int r = 0; r < n; r++) fprintf(a->exec, "%f\n", (double)all[(size_t)r * w + 2 * n] * 1e-9);
        fputc('\n', a->exec);
    }
    if (late && a->late) {
        fprintf(a->late, "# Call %llu\n", (unsigned long long)call);
        for (int r = 0; r < n; r++)
            fprintf(a->late, "%f\n", (double)all[(size_t)r * w + 2 * n + 1] * 1e-9);
        fputc('\n', a->late);
    }
    /* the datatype sizes of the file header are the lead's (as in the profiler) */
    uint64_t h = mix(mix(mix(1469598103934665603ull, (uint64_t)n), (uint64_t)sdt), (uint64_t)rdt);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 2 * n; i++) h = mix(h, (uint64_t)all[(size_t)r * w + i]);
    a2a_block *b = NULL;
    for (size_t i = 0; i < nblocks && !b; i++) {
        a2a_block *x = &blocks[i];
        if (x->hash != h || x->n != n || x->sdt != sdt || x->rdt != rdt) continue;
        int same = 1;
        for (int r = 0; r < n && same; r++)
            for (int j = 0; j < n; j++)
                if (x->smat[r * n + j] != all[(size_t)r * w + j] ||
                    x->rmat[r * n + j] != all[(size_t)r * w + n + j]) {
                    same = 0;
                    break;
                }
        if (same) b = x;
    }
    if (!b) {
        if (nblocks == capblocks) {
            size_t nc = capblocks ? capblocks * 2 : 8;
            a2a_block *nb = realloc(blocks, nc * sizeof *nb);
            if (!nb) PMPI_Abort(MPI_COMM_WORLD, 70);
            blocks = nb;
            capblocks = nc;
        }
        b = &blocks[nblocks++];
        memset(b, 0, sizeof *b);
        b->n = n;
        b->sdt = sdt;
        b->rdt = rdt;
        b->hash = h;
        b->smat = malloc((size_t)n * n * sizeof(int));
        b->rmat = malloc((size_t)n * n * sizeof(int));
        if (!b->smat || !b->rmat) PMPI_Abort(MPI_COMM_WORLD, 70);
        for (int r = 0; r < n; r++)
            for (int j = 0; j < n; j++) {
                b->smat[r * n + j] = (int)all[(size_t)r * w + j];
                b->rmat[r * n + j] = (int)all[(size_t)r * w + n + j];
            }
    }
    if (b->ncalls == b->capcalls) {
        size_t nc = b->capcalls ? b->capcalls * 2 : 8;
        uint64_t *cc = realloc(b->calls, nc * 8);
        if (!cc) PMPI_Abort(MPI_COMM_WORLD, 70);
        b->calls = cc;
        b->capcalls = nc;
    }
    b->calls[b->ncalls++] = call;
}

/* "0-3, 5" notation of an ascending list */
static void put_list(FILE *f, const uint64_t *v, size_t n) {
    size_t i = 0;
    int first = 1;
    while (i < n) {
        size_t j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1) j++;
        fprintf(f, first ? "" : ", ");
        first = 0;
        if (j > i) fprintf(f, "%llu-%llu", (unsigned long long)v[i], (unsigned long long)v[j]);
        else fprintf(f, "%llu", (unsigned long long)v[i]);
        i = j + 1;
    }
}

static void write_counts(const char *kind, int recv) {
    char path[4300];
    uint64_t j = job_id();
    snprintf(path, sizeof path, "%s/%s-counters.job%llu.rank%d.txt", bl.dir, kind,
             (unsigned long long)j, bl.world_rank);
    FILE *f = fopen(path, "w");
    if (!f) return;
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    uint64_t *ranks = NULL;
    int *used = NULL;
    for (size_t bi = 0; bi < nblocks; bi++) {
        a2a_block *b = &blocks[bi];
        int n = b->n;
        int *m = recv ? b->rmat : b->smat;
        fprintf(f, "# Raw counters\n\nNumber of ranks: %d\nDatatype size: %d\n", n,
                recv ? b->rdt : b->sdt);
        fprintf(f, "Alltoallv calls %llu-%llu\n", (unsigned long long)first_call,
                (unsigned long long)(first_call + logged_as_lead - 1));
        fprintf(f, "Count: %zu calls - ", b->ncalls);
        put_list(f, b->calls, b->ncalls);
        fputs("\n\n\nBEGINNING DATA\n", f);
        uint64_t *nr = realloc(ranks, (size_t)n * 8);
        int *nu = realloc(used, (size_t)n * sizeof(int));
        if (!nr || !nu) PMPI_Abort(MPI_COMM_WORLD, 70);
        ranks = nr;
        used = nu;
        memset(used, 0, (size_t)n * sizeof(int));
        for (int r = 0; r < n; r++) {
            if (used[r]) continue;
            size_t k = 0;
            for (int s = r; s < n; s++)
                if (!used[s] && memcmp(&m[r * n], &m[s * n], (size_t)n * sizeof(int)) == 0) {
                    used[s] = 1;
                    ranks[k++] = (uint64_t)s;
                }
            fputs("Rank(s) ", f);
            put_list(f, ranks, k);
            fputs(": ", f);
            for (int c = 0; c < n; c++) fprintf(f, "%d ", m[r * n + c]);
            fputc('\n', f);
        }
        fputs("END DATA\n", f);
    }
    free(ranks);
    free(used);
    fclose(f);
}

void bl_a2a_write(void) {
    for (int i = 0; i < nacomms; i++) {
        if (acomms[i].exec) fclose(acomms[i].exec);
        if (acomms[i].late) fclose(acomms[i].late);
    }
    if (nacomms == 0) return;
    write_counts("send", 0);
    write_counts("recv", 1);
    char path[4300];
    snprintf(path, sizeof path, "%s/alltoallv_comm_data_rank%d.md", bl.dir, bl.world_rank);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("FORMAT_VERSION: 9\n\n", f);
        for (int i = 0; i < nacomms; i++) fprintf(f, "ID: %d; world rank: %d\n", acomms[i].k, bl.world_rank);
        fclose(f);
    }
}

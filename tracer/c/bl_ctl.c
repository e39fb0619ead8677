/* benchlake tracer: exported control entry points (C and Fortran names). */
#include "bl_internal.h"

#define V __attribute__((visibility("default")))

V void bandela_start(void) { bl_ctl_start(); }
V void bandela_end(void) { bl_ctl_end(); }
V void bandela_caliper(int idx, int unused) { (void)unused; bl_ctl_caliper(idx); }
V void bandela_ignore_next_col(int idx, int unused) { (void)unused; bl_ctl_ignore(idx); }

/* Fortran: call bandela_start(), bandela_ends(), bandela_caliper(i,0), ... */
#define F0(name, body) \
    V void name##_(void) { body; } \
    V void name##__(void) { body; }
F0(bandela_start, bl_ctl_start())
F0(bandela_end, bl_ctl_end())
F0(bandela_ends, bl_ctl_end())
V void Bandela_start_(void) { bl_ctl_start(); }
V void Bandela_end_(void) { bl_ctl_end(); }
V void BANDELA_START(void) { bl_ctl_start(); }
V void BANDELA_END(void) { bl_ctl_end(); }
V void BANDELA_ENDS(void) { bl_ctl_end(); }

#define F2(name, fn) \
    V void name##_(const int *i, const int *j) { (void)j; fn(i ? *i : 0); } \
    V void name##__(const int *i, const int *j) { (void)j; fn(i ? *i : 0); }
F2(bandela_caliper, bl_ctl_caliper)
F2(bandela_ignore_next_col, bl_ctl_ignore)
V void BANDELA_CALIPER(const int *i, const int *j) { (void)j; bl_ctl_caliper(i ? *i : 0); }
V void BANDELA_IGNORE_NEXT_COL(const int *i, const int *j) { (void)j; bl_ctl_ignore(i ? *i : 0); }

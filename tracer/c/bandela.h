/* benchlake tracer: the Bandela manual's application controls, C names.
 *
 *   bandela_start() / bandela_end()      window of observation (with
 *                                         BANDELA_PARTIAL_EXPERIMENT=YES the trace
 *                                         starts at the first bandela_start())
 *   bandela_caliper(i, 0)                push caliper i; bandela_caliper(0, 0) pops
 *   bandela_ignore_next_col(i, 0)        mark the next collective with ignore index i
 *
 * Fortran programs call bandela_start(), bandela_end() (or bandela_ends()),
 * bandela_caliper(i, 0) and bandela_ignore_next_col(i, 0); the library exports the
 * usual Fortran manglings (trailing underscore(s), upper case). The declarations are
 * weak: a program built with them runs without the tracer too; call through
 * BANDELA_CALL(f, args) to skip the call when the tracer is not loaded. */
#ifndef BENCHLAKE_BANDELA_H
#define BENCHLAKE_BANDELA_H
#ifdef __cplusplus
extern "C" {
#endif
void bandela_start(void) __attribute__((weak));
void bandela_end(void) __attribute__((weak));
void bandela_caliper(int idx, int unused) __attribute__((weak));
void bandela_ignore_next_col(int idx, int unused) __attribute__((weak));
#define BANDELA_CALL(f, ...) do { if (f) f(__VA_ARGS__); } while (0)
#ifdef __cplusplus
}
#endif
#endif

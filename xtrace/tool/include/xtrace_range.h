/* xtrace's range API: link with -lxtrace_tool (libxtrace_tool.so, next to the xtrace binary).
 * Each call fires a USDT probe of provider `xtrace`; while no tracer is attached it costs a
 * semaphore check. `xtrace --ranges` (or --pid with no probe flags) records the ranges as nested
 * spans per thread and the marks as instants. Names are NUL-terminated UTF-8, copied by the
 * tracer (up to 63 bytes). */
#ifndef XTRACE_RANGE_H
#define XTRACE_RANGE_H
#ifdef __cplusplus
extern "C" {
#endif
void xtrace_range_push(const char *name);
void xtrace_range_pop(void);
void xtrace_mark(const char *name);
#ifdef __cplusplus
}
#endif
#endif

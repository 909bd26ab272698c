/* xtrace's range API: link with -lxtrace_tool (libxtrace_tool.so, next to the xtrace binary).
 *
 * Each call fires a USDT probe of provider `xtrace`. Untraced, the macros below cost a check of
 * the probes' semaphores (no call, and `name` is not evaluated); `xtrace --ranges` (or --pid with
 * no probe flags) records the ranges as nested spans per thread and the marks as instants. While
 * traced, the library keeps each open range's start, and the pop's probe carries it.
 * Names are NUL-terminated UTF-8, copied by the tracer (up to 63 bytes). Define
 * XTRACE_RANGE_NO_FAST_PATH to always call the functions. */
#ifndef XTRACE_RANGE_H
#define XTRACE_RANGE_H
#ifdef __cplusplus
extern "C" {
#endif
void xtrace_range_push(const char *name);
void xtrace_range_pop(void);
void xtrace_mark(const char *name);

/* Where the semaphores are; the kernel raises them while a tracer is attached. A push is wanted
 * while `push` or `pop` is raised: xtrace traces only the pop, which carries the range's start. */
struct xtrace_range_semaphores {
    const volatile unsigned short *push, *pop, *mark;
};
extern const struct xtrace_range_semaphores xtrace_range_semaphores;

#ifndef XTRACE_RANGE_NO_FAST_PATH
#define xtrace_range_push(name) \
    ((*xtrace_range_semaphores.push | *xtrace_range_semaphores.pop) ? xtrace_range_push(name) : (void)0)
#define xtrace_range_pop() (*xtrace_range_semaphores.pop ? xtrace_range_pop() : (void)0)
#define xtrace_mark(name) (*xtrace_range_semaphores.mark ? xtrace_mark(name) : (void)0)
#endif
#ifdef __cplusplus
}
#endif
#endif

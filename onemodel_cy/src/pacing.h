/* The Python-stage baton (pacing of worker threads that share the GIL).

   Under the GIL, two workers that both run Python hand the GIL back and forth at every
   numpy call, and each hand-over wakes a sleeping thread (tens of microseconds on a
   virtual machine). A worker about to run the Python part of a batch (get_sample, a
   Python augmentation) first takes the baton, waiting for it by spinning without the
   GIL; the worker that leaves its Python part for a copy passes it on. So one worker
   runs Python while the others copy, and the GIL changes hands about once per phase.
   The baton is a hint: a waiter that does not get it within max_ns goes ahead (a dataset
   blocked in I/O holds it; the others must still make progress), and it does nothing
   where the GIL is disabled. */
#ifndef ONEMODEL_CY_PACING_H
#define ONEMODEL_CY_PACING_H
#include <time.h>
#include <sched.h>

#if defined(__GNUC__) && !defined(Py_GIL_DISABLED)
static inline int om_baton_try(int* baton) {
    return __atomic_exchange_n(baton, 1, __ATOMIC_ACQUIRE) == 0;
}
static inline int om_baton_held(int* baton) { return __atomic_load_n(baton, __ATOMIC_RELAXED); }
static inline void om_baton_release(int* baton) { __atomic_store_n(baton, 0, __ATOMIC_RELEASE); }
#define OM_BATON 1
#else
static inline int om_baton_try(int* baton) { (void)baton; return 0; }
static inline int om_baton_held(int* baton) { (void)baton; return 0; }
static inline void om_baton_release(int* baton) { (void)baton; }
#define OM_BATON 0
#endif

static inline void om_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The monotonic clock in nanoseconds (spin limits here and in lane.h). */
static inline long long om_clock_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* 1 once the baton is taken, 0 when max_ns ran out first (or max_ns < 0: no waiting).
   Spins, yielding the CPU every few microseconds to any other runnable thread. */
static int om_baton_take(int* baton, long long max_ns) {
#if OM_BATON
    long long start;
    int k;
    if (om_baton_try(baton)) return 1;
    if (max_ns <= 0) return 0;
    start = om_clock_ns();
    for (;;) {
        for (k = 0; k < 256; k++) {
            if (!om_baton_held(baton) && om_baton_try(baton)) return 1;
            om_pause();
        }
        if (om_clock_ns() - start > max_ns) return 0;
        sched_yield();
    }
#else
    (void)baton; (void)max_ns;
    return 0;
#endif
}
#endif

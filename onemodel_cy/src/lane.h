/* The packed lane's waiting (onemodel_cy/workers/lane.pyx): atomics for the fields a thread reads
   while it spins, and conditions whose timed waits run on the monotonic clock (so they
   do not move with the wall clock). The clock and the pause are pacing.h's. */
#ifndef ONEMODEL_CY_LANE_H
#define ONEMODEL_CY_LANE_H
#include <errno.h>
#include <pthread.h>
#include "pacing.h"

static inline int om_load(const int* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void om_store(int* p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static int om_cond_init(pthread_cond_t* cond) {
#if defined(__APPLE__)      /* no pthread_condattr_setclock: waits are relative (below) */
    return pthread_cond_init(cond, NULL);
#else
    pthread_condattr_t attr;
    int err = pthread_condattr_init(&attr);
    if (err) return err;
    err = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!err) err = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return err;
#endif
}

/* Wait until `deadline_ns` (om_clock_ns; < 0: no deadline): 0, or ETIMEDOUT. */
static int om_cond_wait_until(pthread_cond_t* cond, pthread_mutex_t* mutex, long long deadline_ns) {
    struct timespec t;
    if (deadline_ns < 0) return pthread_cond_wait(cond, mutex);
#if defined(__APPLE__)
    {
        long long left = deadline_ns - om_clock_ns();
        if (left <= 0) return ETIMEDOUT;
        t.tv_sec = left / 1000000000LL;
        t.tv_nsec = left % 1000000000LL;
        return pthread_cond_timedwait_relative_np(cond, mutex, &t);
    }
#else
    t.tv_sec = deadline_ns / 1000000000LL;
    t.tv_nsec = deadline_ns % 1000000000LL;
    return pthread_cond_timedwait(cond, mutex, &t);
#endif
}
#endif

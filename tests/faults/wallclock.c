/* A wall-clock offset for one process (the fault suite's clock jump; tests/faults/rig.py
 * builds it with the system's C compiler and loads it with LD_PRELOAD).
 *
 * It moves what the process reads as the time of day, and nothing else: clock_gettime for
 * CLOCK_REALTIME (and its coarse variant and CLOCK_TAI), gettimeofday and time. Monotonic
 * and boottime clocks, sleeps and timeouts are untouched, exactly as when an operator or
 * NTP steps a machine's clock. The offset, in milliseconds, is read from the file named by
 * FAULT_WALLCLOCK_FILE, at most every 50 ms of monotonic time, so a test can jump the clock
 * of a running process by rewriting the file.
 *
 * (libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1 fails Python's time.sleep with
 * EINVAL: its clock_nanosleep moves an absolute monotonic deadline by the wall offset.)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static long long offset_ms;
static long long checked_ms = -1000000;

static void refresh(void) {
    struct timespec now;
    if (real_clock_gettime == NULL)
        real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    real_clock_gettime(CLOCK_MONOTONIC, &now);
    long long ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    if (ms - __atomic_load_n(&checked_ms, __ATOMIC_RELAXED) < 50)
        return;
    __atomic_store_n(&checked_ms, ms, __ATOMIC_RELAXED);
    const char *path = getenv("FAULT_WALLCLOCK_FILE");
    if (path == NULL)
        return;
    FILE *file = fopen(path, "r");
    if (file == NULL)
        return;
    long long value;
    if (fscanf(file, "%lld", &value) == 1)
        __atomic_store_n(&offset_ms, value, __ATOMIC_RELAXED);
    fclose(file);
}

static void shift(struct timespec *ts) {
    long long offset = __atomic_load_n(&offset_ms, __ATOMIC_RELAXED);
    long long ns = (long long)ts->tv_nsec + (offset % 1000) * 1000000;
    ts->tv_sec += offset / 1000;
    while (ns < 0) { ns += 1000000000; ts->tv_sec -= 1; }
    while (ns >= 1000000000) { ns -= 1000000000; ts->tv_sec += 1; }
    ts->tv_nsec = (long)ns;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    refresh();
    int rc = real_clock_gettime(clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE
                    || clock == CLOCK_TAI))
        shift(ts);
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0 && tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    (void)tz;
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}

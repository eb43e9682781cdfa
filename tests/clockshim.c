/*
 * A wall clock a test can step, for one process (LD_PRELOAD), as an NTP step does:
 * CLOCK_REALTIME (clock_gettime, gettimeofday, time) runs off by the seconds written in
 * the file named by SHARDCRON_CLOCK_OFFSET_FILE ("+0", "-3", "+4"), re-read at most every
 * 10 ms; the monotonic clocks, and every wait measured on them, are left alone.
 *
 * Debian's libfaketime 0.9.10 (libfaketime.so.1 and libfaketimeMT.so.1, with an offset
 * file and FAKETIME_NO_CACHE=1, FAKETIME_FORCE_MONOTONIC_FIX unset, 0 or 1) cannot run a
 * Python 3.11 worker so: with the monotonic clock left alone
 * (FAKETIME_DONT_FAKE_MONOTONIC=1), time.sleep raises EINVAL (its absolute monotonic
 * deadline, clock_nanosleep with TIMER_ABSTIME, is turned into a negative one); with it
 * faked, threading's timed waits (Event.wait, Condition.wait, Lock.acquire) never return.
 *
 * Built by tests/clocks.py with the machine's C compiler.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000LL
#define REREAD_NS 10000000LL

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static _Atomic(clock_gettime_fn) real_clock_gettime;
static _Atomic long long offset_ns;
static _Atomic long long read_at_ns = -NS; /* monotonic time of the last read */

static clock_gettime_fn real(void) {
    clock_gettime_fn fn = atomic_load(&real_clock_gettime);
    if (fn == NULL) {
        fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        atomic_store(&real_clock_gettime, fn);
    }
    return fn;
}

static long long offset(void) {
    struct timespec now;
    if (real()(CLOCK_MONOTONIC, &now) != 0) {
        return atomic_load(&offset_ns);
    }
    long long mono = now.tv_sec * NS + now.tv_nsec;
    if (mono - atomic_load(&read_at_ns) < REREAD_NS) {
        return atomic_load(&offset_ns);
    }
    atomic_store(&read_at_ns, mono);
    /* The test replaces the file (a rename): a read sees the old offset or the new one. */
    const char *path = getenv("SHARDCRON_CLOCK_OFFSET_FILE");
    int fd = path == NULL ? -1 : open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char text[64];
        ssize_t n = read(fd, text, sizeof text - 1);
        close(fd);
        if (n > 0) {
            text[n] = '\0';
            atomic_store(&offset_ns, (long long)(strtod(text, NULL) * NS));
        }
    }
    return atomic_load(&offset_ns);
}

static void shift(struct timespec *tp) {
    long long t = tp->tv_sec * NS + tp->tv_nsec + offset();
    tp->tv_sec = t / NS;
    tp->tv_nsec = t % NS;
}

int clock_gettime(clockid_t id, struct timespec *tp) {
    int result = real()(id, tp);
    if (result == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        shift(tp);
    }
    return result;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz; /* obsolete: Linux callers pass NULL */
    struct timespec now;
    int result = clock_gettime(CLOCK_REALTIME, &now);
    if (result == 0) { /* glibc declares tv non-null */
        tv->tv_sec = now.tv_sec;
        tv->tv_usec = now.tv_nsec / 1000;
    }
    return result;
}

time_t time(time_t *out) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = now.tv_sec;
    }
    return now.tv_sec;
}

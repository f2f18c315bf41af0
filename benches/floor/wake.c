/* The floor under a streaming client's CPU per token on this machine: what the kernel charges a
 * reader that is woken for each chunk and reads it, with nothing else in the way (no HTTP, no
 * parsing, no runtime).
 *
 * A sender thread writes CHUNK-byte chunks round robin to STREAMS loopback TCP connections,
 * RATE chunks a second each (token i of every stream due at i / RATE, as the synthetic server
 * paces them); the reader waits on epoll (edge-triggered, as tokio's reactor) and reads each ready
 * socket with recvmsg and its SO_TIMESTAMPNS stamp until a short read, as the native measure client
 * does. With PAUSE_US > 0 the reader sleeps that long before each wait, so that arrivals gather:
 * fewer wakes, at the price of reading up to PAUSE_US late (the kernel's stamps keep the times).
 *
 *     cc -O2 -pthread -o wake benches/floor/wake.c
 *     ./wake STREAMS RATE SECONDS PAUSE_US [CHUNK]
 *
 * Prints one JSON object: the chunks read a second (against the STREAMS x RATE asked for), the
 * reader thread's CPU (user, system, both) per chunk, its wakes and context switches per chunk,
 * and how many reads held more than one chunk; and the sender's side, the floor under a paced
 * server: its thread's CPU per chunk and how late its writes were against their schedule (p99 and
 * most, in 1 us bins; it sleeps with a timer slack of 1 ns to 200 us before a deadline, spins the
 * rest, and writes what is due at once). The reader and the sender are pinned to the first two
 * CPUs this process may use (one CPU: both on it).
 * benches/test_floor.py runs it at the serving benchmark's points. Linux only. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int streams, rate, seconds, chunk = 160;
static int *client_fds, *server_fds;
static int cpus[2] = {-1, -1};
/* the sender's lateness, in 1 us bins (the last also takes anything later), and its CPU */
#define LATE_BINS 1000000
/* how long before a write's deadline the sender stops sleeping and spins (the native server's
 * clock does the same, 2.5 ms ahead: a sleep per chunk costs more than the write) */
#define SPIN 200e-6
static long *late_counts;
static double late_most, sender_cpu;

static double monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void fail(const char *what) {
    fprintf(stderr, "wake: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void pin(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) fail("sched_setaffinity");
}

static double seconds_of(struct timeval t) { return t.tv_sec + t.tv_usec * 1e-6; }

static void *sender(void *unused) {
    (void)unused;
    pin(cpus[1]);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* sleep to the deadline, not up to 50 us past it */
    struct rusage before, after;
    getrusage(RUSAGE_THREAD, &before);
    char *data = malloc(chunk);
    memset(data, 'x', chunk);
    long total = (long)streams * rate * seconds;
    double start = monotonic();
    for (long i = 0; i < total; i++) {
        /* chunk i goes to stream i % streams; each stream's chunks RATE a second apart */
        double due = start + (double)i / ((double)streams * rate), wait = due - monotonic();
        if (wait > SPIN) { /* sleep to SPIN before the deadline, then spin to it */
            wait -= SPIN;
            struct timespec pause = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
            nanosleep(&pause, NULL);
        }
        while (monotonic() < due) {
        }
        double late = monotonic() - due;
        if (late < 0) late = 0;
        if (late > late_most) late_most = late;
        long bin = (long)(late * 1e6);
        late_counts[bin < LATE_BINS ? bin : LATE_BINS - 1]++;
        if (write(server_fds[i % streams], data, chunk) != chunk) fail("write");
    }
    for (int s = 0; s < streams; s++) shutdown(server_fds[s], SHUT_WR);
    getrusage(RUSAGE_THREAD, &after);
    sender_cpu = seconds_of(after.ru_utime) - seconds_of(before.ru_utime) + seconds_of(after.ru_stime) -
                 seconds_of(before.ru_stime);
    free(data);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: wake STREAMS RATE SECONDS PAUSE_US [CHUNK]\n");
        return 2;
    }
    streams = atoi(argv[1]);
    rate = atoi(argv[2]);
    seconds = atoi(argv[3]);
    long pause_us = atol(argv[4]);
    if (argc > 5) chunk = atoi(argv[5]);
    if (streams < 1 || rate < 1 || seconds < 1 || pause_us < 0 || chunk < 1) {
        fprintf(stderr, "wake: STREAMS, RATE, SECONDS and CHUNK must be positive, PAUSE_US not negative\n");
        return 2;
    }
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) fail("sched_getaffinity");
    for (int c = 0, found = 0; c < CPU_SETSIZE && found < 2; c++)
        if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
    if (cpus[1] < 0) cpus[1] = cpus[0];
    pin(cpus[0]);
    struct rlimit files; /* two descriptors a stream: raise the soft limit to the hard one */
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }

    int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0) fail("socket");
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0) fail("bind");
    if (getsockname(listener, (struct sockaddr *)&address, &length) != 0) fail("getsockname");
    if (listen(listener, 4096) != 0) fail("listen");
    client_fds = calloc(streams, sizeof(int));
    server_fds = calloc(streams, sizeof(int));
    int epoll = epoll_create1(0), one = 1;
    if (epoll < 0) fail("epoll_create1");
    for (int s = 0; s < streams; s++) {
        client_fds[s] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (client_fds[s] < 0) fail("socket");
        if (connect(client_fds[s], (struct sockaddr *)&address, sizeof address) != 0 && errno != EINPROGRESS)
            fail("connect");
        server_fds[s] = accept(listener, NULL, NULL);
        if (server_fds[s] < 0) fail("accept");
        setsockopt(server_fds[s], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (setsockopt(client_fds[s], SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) != 0)
            fail("SO_TIMESTAMPNS");
        struct epoll_event event = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.u32 = (uint32_t)s};
        if (epoll_ctl(epoll, EPOLL_CTL_ADD, client_fds[s], &event) != 0) fail("epoll_ctl");
    }

    late_counts = calloc(LATE_BINS, sizeof(long));
    if (late_counts == NULL) fail("calloc");
    pthread_t thread;
    struct rusage before, after;
    getrusage(RUSAGE_THREAD, &before);
    double start = monotonic();
    if (pthread_create(&thread, NULL, sender, NULL) != 0) fail("pthread_create");
    long bytes = 0, reads = 0, multi = 0, wakes = 0;
    int open = streams;
    size_t size = 256 * 1024; /* as the native client's read */
    char *buffer = malloc(size);
    char control[256];
    struct epoll_event events[1024];
    while (open > 0) {
        if (pause_us > 0) {
            struct timespec pause = {pause_us / 1000000, (pause_us % 1000000) * 1000};
            nanosleep(&pause, NULL);
        }
        int ready = epoll_wait(epoll, events, 1024, -1);
        if (ready < 0) {
            if (errno == EINTR) continue;
            fail("epoll_wait");
        }
        wakes++;
        for (int k = 0; k < ready; k++) {
            int fd = client_fds[events[k].data.u32];
            int closing = (events[k].events & (EPOLLRDHUP | EPOLLHUP)) != 0;
            for (;;) {
                struct iovec vector = {buffer, size};
                struct msghdr message = {.msg_iov = &vector, .msg_iovlen = 1, .msg_control = control,
                                         .msg_controllen = sizeof control};
                ssize_t got = recvmsg(fd, &message, MSG_DONTWAIT);
                if (got > 0) {
                    bytes += got;
                    reads++;
                    multi += got > chunk;
                    /* a short read emptied the queue; with the end already seen, read on to it */
                    if ((size_t)got < size && !closing) break;
                    continue;
                }
                if (got == 0) {
                    open--;
                    epoll_ctl(epoll, EPOLL_CTL_DEL, fd, NULL);
                } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                    fail("recvmsg");
                }
                break;
            }
        }
    }
    getrusage(RUSAGE_THREAD, &after);
    double elapsed = monotonic() - start;
    pthread_join(thread, NULL);
    double user = seconds_of(after.ru_utime) - seconds_of(before.ru_utime);
    double system = seconds_of(after.ru_stime) - seconds_of(before.ru_stime);
    double chunks = (double)bytes / chunk;
    long written = (long)streams * rate * seconds, rank = written - written / 100, seen = 0, p99 = 0;
    for (; p99 < LATE_BINS; p99++) /* the 99th percentile's bin: its lower edge */
        if ((seen += late_counts[p99]) >= rank) break;
    printf("{\"streams\": %d, \"rate\": %d, \"seconds\": %d, \"pause_us\": %ld, \"chunk\": %d, "
           "\"chunks\": %.0f, \"chunks_per_s\": %.0f, \"reads\": %ld, \"multi_chunk_reads\": %ld, \"wakes\": %ld, "
           "\"wakes_per_chunk\": %.3f, \"user_us_per_chunk\": %.2f, \"sys_us_per_chunk\": %.2f, "
           "\"cpu_us_per_chunk\": %.2f, \"context_switches_per_chunk\": %.3f, "
           "\"sender_cpu_us_per_chunk\": %.2f, \"sender_late_p99_ms\": %.3f, \"sender_late_max_ms\": %.3f}\n",
           streams, rate, seconds, pause_us, chunk, chunks, chunks / elapsed, reads, multi, wakes, wakes / chunks,
           user / chunks * 1e6, system / chunks * 1e6, (user + system) / chunks * 1e6,
           (double)((after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)) / chunks,
           sender_cpu / written * 1e6, p99 / 1000.0, late_most * 1e3);
    return 0;
}

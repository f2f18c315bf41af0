/* The floor under a gateway's CPU per chunk on this machine: a TCP relay with nothing in the way
 * (no HTTP, no parsing, no buffering beyond one read), the least any proxy of a stream must do.
 *
 * One thread, edge-triggered epoll: each connection accepted on 127.0.0.1:PORT gets its own
 * connection to UPSTREAM (HOST:PORT, an IPv4 address), and whatever either side sends is read and
 * written to the other at once (TCP_NODELAY both ways), so an HTTP/1.1 client sees the upstream's
 * replies byte for byte, keep-alive included. An end from one side is passed on (shutdown); a
 * pair closes when both ends have come, or on an error. A write that would block waits for the
 * peer (poll): the relay keeps no buffer, so a slow reader slows its stream, as
 * `proxy_buffering off` does. benches/test_gateway.py runs it as the contender "relay (C)",
 * pinned to the gateway's core beside nginx and `rapidsse gateway`.
 *
 *     cc -O2 -o relay benches/floor/relay.c
 *     ./relay PORT UPSTREAM_HOST:UPSTREAM_PORT
 *
 * Runs until SIGTERM or SIGINT. Linux only. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct side {
    int fd;
    struct side *peer;
    int ended;  /* its end has come (read 0) and was passed on */
};

static char buffer[64 * 1024];

static void fail(const char *what) {
    fprintf(stderr, "relay: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Pairs closed during one batch of events, freed after it (a later event of the batch may be
 * the other side's): the two sides are one allocation, and their first side links them. */
static struct side *closed;

static void close_pair(int epoll, struct side *side) {
    struct side *first = side < side->peer ? side : side->peer;
    for (int s = 0; s < 2; s++) {
        epoll_ctl(epoll, EPOLL_CTL_DEL, first[s].fd, NULL);
        close(first[s].fd);
        first[s].fd = -1;
    }
    first->peer = closed; /* (the link; a closed side is never read again) */
    closed = first;
}

/* All of data written to fd, waiting for room when the peer reads slowly; 0 on success. */
static int write_all(int fd, const char *data, size_t size) {
    while (size > 0) {
        ssize_t done = write(fd, data, size);
        if (done > 0) {
            data += done;
            size -= done;
        } else if (done < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd room = {.fd = fd, .events = POLLOUT};
            if (poll(&room, 1, -1) < 0 && errno != EINTR) return -1;
        } else if (done < 0 && errno == EINTR) {
            continue;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Reads what side has and writes it to its peer (with closing, to its end: the end came with
 * the last bytes, and no other event will tell of it); 1 when the pair is to be closed. */
static int relay(struct side *side, int closing) {
    for (;;) {
        ssize_t got = read(side->fd, buffer, sizeof buffer);
        if (got > 0) {
            if (write_all(side->peer->fd, buffer, (size_t)got) != 0) return 1;
            if ((size_t)got < sizeof buffer && !closing) return 0; /* (a short read emptied the queue) */
        } else if (got == 0) {
            if (!side->ended) {
                side->ended = 1;
                shutdown(side->peer->fd, SHUT_WR);
            }
            return side->peer->ended;
        } else if (errno == EINTR) {
            continue;
        } else {
            return errno != EAGAIN && errno != EWOULDBLOCK;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: relay PORT UPSTREAM_HOST:UPSTREAM_PORT\n");
        return 2;
    }
    int port = atoi(argv[1]);
    char host[64];
    int upstream_port = 0;
    const char *colon = strrchr(argv[2], ':');
    struct sockaddr_in upstream = {.sin_family = AF_INET};
    if (port <= 0 || port > 65535 || colon == NULL || (size_t)(colon - argv[2]) >= sizeof host ||
        (upstream_port = atoi(colon + 1)) <= 0 || upstream_port > 65535) {
        fprintf(stderr, "relay: PORT and UPSTREAM_HOST:UPSTREAM_PORT, as 8001 127.0.0.1:8000\n");
        return 2;
    }
    memcpy(host, argv[2], colon - argv[2]);
    host[colon - argv[2]] = '\0';
    if (inet_pton(AF_INET, host, &upstream.sin_addr) != 1) {
        fprintf(stderr, "relay: the upstream host must be an IPv4 address: %s\n", host);
        return 2;
    }
    upstream.sin_port = htons((uint16_t)upstream_port);
    signal(SIGPIPE, SIG_IGN);

    int one = 1;
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (listener < 0) fail("socket");
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                  .sin_port = htons((uint16_t)port)};
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0) fail("bind");
    if (listen(listener, 4096) != 0) fail("listen");
    int epoll = epoll_create1(0);
    if (epoll < 0) fail("epoll_create1");
    struct epoll_event accepting = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &accepting) != 0) fail("epoll_ctl");

    struct epoll_event events[1024];
    for (;;) {
        int ready = epoll_wait(epoll, events, 1024, -1);
        if (ready < 0) {
            if (errno == EINTR) continue;
            fail("epoll_wait");
        }
        for (int k = 0; k < ready; k++) {
            struct side *side = events[k].data.ptr;
            if (side != NULL && side->fd < 0) continue; /* its pair closed earlier in this batch */
            if (side != NULL) {
                if (relay(side, (events[k].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0))
                    close_pair(epoll, side);
                continue;
            }
            for (;;) { /* every connection waiting */
                int client = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
                if (client < 0) break;
                /* (a blocking connect: on loopback it is done at once, and it is not per chunk) */
                int server = socket(AF_INET, SOCK_STREAM, 0);
                if (server < 0 || connect(server, (struct sockaddr *)&upstream, sizeof upstream) != 0) {
                    if (server >= 0) close(server);
                    close(client);
                    continue;
                }
                if (fcntl(server, F_SETFL, fcntl(server, F_GETFL) | O_NONBLOCK) != 0) fail("fcntl");
                struct side *pair = calloc(2, sizeof *pair);
                if (pair == NULL) fail("calloc");
                pair[0] = (struct side){.fd = client, .peer = &pair[1]};
                pair[1] = (struct side){.fd = server, .peer = &pair[0]};
                for (int s = 0; s < 2; s++) {
                    setsockopt(pair[s].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event event = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = &pair[s]};
                    if (epoll_ctl(epoll, EPOLL_CTL_ADD, pair[s].fd, &event) != 0) fail("epoll_ctl");
                }
            }
        }
        while (closed != NULL) {
            struct side *next = closed->peer;
            free(closed);
            closed = next;
        }
    }
}

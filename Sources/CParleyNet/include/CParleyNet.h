#ifndef PARLEY_CPARLEYNET_H
#define PARLEY_CPARLEYNET_H
// Linux socket, polling and thread calls that Swift's Glibc module leaves out or imports
// awkwardly (behind _GNU_SOURCE, or a packed struct): batched datagram I/O for the relay's
// loops and the benchmarks, the relay loop's epoll set and wake-up eventfd, naming and
// pinning threads.
#include <stdint.h>
#include <sys/socket.h>

// Mirrors struct mmsghdr, which the Glibc module does not expose; CParleyNet.c checks
// that the layouts agree.
typedef struct {
    struct msghdr msg_hdr;
    unsigned int msg_len;
} parley_mmsghdr;

int parley_recvmmsg(int fd, parley_mmsghdr *messages, unsigned int count, int flags);
int parley_sendmmsg(int fd, parley_mmsghdr *messages, unsigned int count, int flags);

// Pins the calling thread to one CPU; returns 0 or an errno value.
int parley_pin_current_thread(int cpu);

// Names the calling thread (at most 15 characters are kept), for top, perf and /proc.
void parley_name_current_thread(const char *name);

// A close-on-exec epoll set; -1 and errno on failure.
int parley_epoll_create(void);
// Watches `fd` for input (level-triggered); `token` comes back from parley_epoll_wait.
int parley_epoll_watch_input(int epoll_fd, int fd, uint64_t token);
// Waits up to `timeout_ms` (-1: forever); fills `tokens` with up to `capacity` ready tokens
// and returns how many, or -1 and errno.
int parley_epoll_wait(int epoll_fd, uint64_t *tokens, int capacity, int timeout_ms);

// A non-blocking, close-on-exec eventfd; -1 and errno on failure.
int parley_eventfd(void);
// Adds 1 to the eventfd's counter (wakes a poller); drains it to 0.
void parley_eventfd_signal(int fd);
void parley_eventfd_drain(int fd);

#endif

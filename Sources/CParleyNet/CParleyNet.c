#define _GNU_SOURCE
#include "CParleyNet.h"
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

_Static_assert(sizeof(parley_mmsghdr) == sizeof(struct mmsghdr), "parley_mmsghdr must mirror struct mmsghdr");
_Static_assert(offsetof(parley_mmsghdr, msg_len) == offsetof(struct mmsghdr, msg_len), "msg_len offset differs");

int parley_recvmmsg(int fd, parley_mmsghdr *messages, unsigned int count, int flags) {
    return recvmmsg(fd, (struct mmsghdr *)messages, count, flags, NULL);
}

int parley_sendmmsg(int fd, parley_mmsghdr *messages, unsigned int count, int flags) {
    return sendmmsg(fd, (struct mmsghdr *)messages, count, flags);
}

int parley_pin_current_thread(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void parley_name_current_thread(const char *name) {
    char shortened[16];
    size_t index = 0;
    for (; name[index] != 0 && index < 15; index++) shortened[index] = name[index];
    shortened[index] = 0;
    pthread_setname_np(pthread_self(), shortened);
}

int parley_epoll_create(void) {
    return epoll_create1(EPOLL_CLOEXEC);
}

int parley_epoll_watch_input(int epoll_fd, int fd, uint64_t token) {
    struct epoll_event event = {0};
    event.events = EPOLLIN;
    event.data.u64 = token;
    return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event);
}

int parley_epoll_wait(int epoll_fd, uint64_t *tokens, int capacity, int timeout_ms) {
    struct epoll_event events[16];
    if (capacity > 16) capacity = 16;
    int count = epoll_wait(epoll_fd, events, capacity, timeout_ms);
    for (int index = 0; index < count; index++) tokens[index] = events[index].data.u64;
    return count;
}

int parley_eventfd(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

void parley_eventfd_signal(int fd) {
    uint64_t one = 1;
    ssize_t written = write(fd, &one, sizeof one);
    (void)written;  // EAGAIN: the counter is already non-zero, the poller wakes anyway.
}

void parley_eventfd_drain(int fd) {
    uint64_t value;
    ssize_t got = read(fd, &value, sizeof value);
    (void)got;
}

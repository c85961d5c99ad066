#define _GNU_SOURCE
#include "CParleyNet.h"
#include <pthread.h>
#include <sched.h>
#include <stddef.h>

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

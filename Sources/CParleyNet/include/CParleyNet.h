#ifndef PARLEY_CPARLEYNET_H
#define PARLEY_CPARLEYNET_H
// Linux socket and scheduling calls that Swift's Glibc module leaves out (they sit behind
// _GNU_SOURCE): batched datagram I/O, which the relay's send path and the benchmarks use,
// and pinning a thread to a CPU, for the benchmarks.
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

#endif

#ifndef CPARLEY_ALLOCATION_COUNTER_H
#define CPARLEY_ALLOCATION_COUNTER_H

#include <stdint.h>

/// Counting of heap allocations per thread, for benchmarks: linked into an executable, this
/// library's malloc, calloc, realloc and the aligned allocators stand in for libc's (the
/// executable's definitions come first in the dynamic linker's search) and count each call on
/// the calling thread before handing it to glibc's own. Counting starts with
/// parley_allocations_start(); until then each call costs one predictable branch.

/// Starts counting (for the whole process, from now on).
void parley_allocations_start(void);

/// Allocations made so far by the thread whose kernel thread ID is `tid`; 0 for a thread
/// that allocated nothing since counting started, or that the table has no room for.
uint64_t parley_allocations_of_thread(int32_t tid);

/// Allocations made so far by the calling thread.
uint64_t parley_allocations_of_current_thread(void);

/// The kernel thread IDs of threads that allocated since counting started, up to `capacity`;
/// returns how many were written.
int parley_allocations_threads(int32_t *tids, int capacity);

#endif

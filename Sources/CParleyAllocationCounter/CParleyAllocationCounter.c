#define _GNU_SOURCE
#include "CParleyAllocationCounter.h"

#include <stdatomic.h>
#include <stddef.h>
#include <unistd.h>
#include <sys/syscall.h>

// glibc's own allocator, under the names it exports for exactly this use.
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *pointer);

// One slot per thread that allocates while counting: claimed on its first allocation, without
// allocating (a fixed table), and found again through a thread-local pointer.
#define SLOTS 1024
struct slot {
    _Atomic int32_t tid;
    _Atomic uint64_t count;
};
static struct slot slots[SLOTS];
static _Atomic int used;
static _Atomic int counting;
static __thread struct slot *mine;
static __thread int overflowed;

static inline void count_one(void) {
    if (__builtin_expect(!atomic_load_explicit(&counting, memory_order_relaxed), 1)) return;
    if (__builtin_expect(mine == NULL, 0)) {
        if (overflowed) return;
        int index = atomic_fetch_add(&used, 1);
        if (index >= SLOTS) { overflowed = 1; return; }
        mine = &slots[index];
        atomic_store(&mine->tid, (int32_t)syscall(SYS_gettid));
    }
    atomic_fetch_add_explicit(&mine->count, 1, memory_order_relaxed);
}

void *malloc(size_t size) { count_one(); return __libc_malloc(size); }
void *calloc(size_t count, size_t size) { count_one(); return __libc_calloc(count, size); }
void *realloc(void *pointer, size_t size) { count_one(); return __libc_realloc(pointer, size); }
void free(void *pointer) { __libc_free(pointer); }

void *memalign(size_t alignment, size_t size) { count_one(); return __libc_memalign(alignment, size); }
void *aligned_alloc(size_t alignment, size_t size) { count_one(); return __libc_memalign(alignment, size); }
int posix_memalign(void **result, size_t alignment, size_t size) {
    count_one();
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0) return 22;  // EINVAL
    void *pointer = __libc_memalign(alignment, size);
    if (pointer == NULL && size != 0) return 12;  // ENOMEM
    *result = pointer;
    return 0;
}

void parley_allocations_start(void) { atomic_store(&counting, 1); }

uint64_t parley_allocations_of_thread(int32_t tid) {
    int count = atomic_load(&used);
    if (count > SLOTS) count = SLOTS;
    for (int index = 0; index < count; index++) {
        if (atomic_load(&slots[index].tid) == tid) return atomic_load(&slots[index].count);
    }
    return 0;
}

uint64_t parley_allocations_of_current_thread(void) {
    return mine == NULL ? 0 : atomic_load(&mine->count);
}

int parley_allocations_threads(int32_t *tids, int capacity) {
    int count = atomic_load(&used);
    if (count > SLOTS) count = SLOTS;
    int written = 0;
    for (int index = 0; index < count && written < capacity; index++) {
        int32_t tid = atomic_load(&slots[index].tid);
        if (tid != 0) tids[written++] = tid;
    }
    return written;
}

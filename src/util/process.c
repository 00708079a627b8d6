/*
 * process.c -- what the library knows about the process it runs in: thread
 * ids, fork detection (the sockets a fork child must not share are
 * tracked here and replaced in the child), and starting background
 * threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

/* ---- thread ids and fork detection -------------------------------------- */

static atomic_uint_fast64_t g_next_tid = 1;
static _Thread_local uint64_t t_tid;

uint64_t dlock__tid(void) {
  if (t_tid == 0)
    t_tid = atomic_fetch_add(&g_next_tid, 1);
  return t_tid;
}

static atomic_uint g_fork_gen;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* Every socket the library has open, one bit per descriptor (lock-free, so
 * the fork handler can read it whatever the parent's threads were doing).
 * Descriptors past DLOCK__FD_BITS are not tracked. */
#define DLOCK__FD_BITS 65536
static atomic_uint_fast64_t g_fds[DLOCK__FD_BITS / 64];

void dlock__fd_track(int fd) {
  if (fd >= 0 && fd < DLOCK__FD_BITS)
    atomic_fetch_or(&g_fds[fd / 64], (uint_fast64_t)1 << (fd % 64));
}

void dlock__fd_untrack(int fd) {
  if (fd >= 0 && fd < DLOCK__FD_BITS)
    atomic_fetch_and(&g_fds[fd / 64], ~((uint_fast64_t)1 << (fd % 64)));
}

/* In a fork child: the library's sockets are the parent's, and a child
 * that keeps them keeps the parent "connected" (a dead waiter still
 * subscribed, handed locks) after the parent died. Each is replaced by
 * /dev/null under the same number (dup3: the number stays taken, so the
 * child's later dlock_client_free closes /dev/null, never a file the child
 * opened meanwhile). Async-signal-safe calls only. */
static void release_parent_sockets(void) {
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0)
    return;
  for (int w = 0; w < DLOCK__FD_BITS / 64; w++) {
    uint_fast64_t bits = atomic_load(&g_fds[w]);
    for (int b = 0; bits && b < 64; b++, bits >>= 1)
      if ((bits & 1) && w * 64 + b != null_fd)
        (void)dup3(null_fd, w * 64 + b, O_CLOEXEC);
  }
  close(null_fd);
}

static void on_fork_child(void) {
  atomic_fetch_add(&g_fork_gen, 1);
  release_parent_sockets();
  /* The child's only thread is the forking one; its generator state is a copy
   * of the parent's, so sibling children would draw the same unlock request
   * ids (and one sibling's unlock latch would swallow the other's unlock).
   * Reseed it from the kernel on next use. */
  dlock__rand_reset_thread();
}
static void install_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

unsigned dlock__fork_gen(void) {
  pthread_once(&g_atfork_once, install_atfork);
  return atomic_load_explicit(&g_fork_gen, memory_order_relaxed);
}

/* ---- background threads ------------------------------------------------- */

typedef struct thread_start {
  void *(*fn)(void *);
  void *arg;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int running;
} thread_start;

static void *thread_trampoline(void *p) {
  thread_start *ts = p;
  void *(*fn)(void *) = ts->fn;
  void *arg = ts->arg;
  dlock__mu_lock(&ts->mu);
  ts->running = 1;
  pthread_cond_signal(&ts->cv);
  dlock__mu_unlock(&ts->mu);
  return fn(arg);
}

int dlock__thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
  thread_start ts = {fn, arg, PTHREAD_MUTEX_INITIALIZER,
                     PTHREAD_COND_INITIALIZER, 0};
  int rc = pthread_create(t, NULL, thread_trampoline, &ts);
  if (rc == 0) {
    dlock__mu_lock(&ts.mu);
    while (!ts.running)
      pthread_cond_wait(&ts.cv, &ts.mu);
    dlock__mu_unlock(&ts.mu);
  }
  pthread_cond_destroy(&ts.cv);
  pthread_mutex_destroy(&ts.mu);
  return rc;
}

/* strategy.c -- the strategies of the lab: names (exactly the steps of the
 * background articles), what each does, and the lesson printed when it
 * fails. The code of each scheme is in engine.c. */
#include <string.h>

#include "seckill.h"

const sk_strategy sk_strategies[] = {
    {"none", SK_NONE, "no lock: GET stock, business work, SET stock-1",
     "no lock: concurrent requests read the same stock and each writes "
     "stock-1, so one item is sold many times",
     "requests were still running when the run was stopped",
     "no lock: two requests of one user both saw \"no order yet\" and "
     "both bought",
     NULL, SK_KP_READ, 0, 0},
    {"local", SK_LOCAL,
     "a pthread mutex inside each worker process (Java's synchronized)",
     "a mutex inside one process orders only that process's threads; the "
     "other processes still race it",
     "requests were still waiting when the run was stopped",
     "a process-local mutex does not stop the same user buying twice "
     "through another process",
     "correct only with --procs 1: run several processes", SK_KP_LOCKED, 0, 0},
    {"setnx", SK_SETNX, "SETNX lock + DEL, no expiry",
     "two holders overlapped (unexpected for SETNX: was the lock deleted by "
     "hand?)",
     "the holder died before its DEL and the key has no expiry: the lock is "
     "held forever",
     "two requests of one user overlapped (unexpected for SETNX)",
     "passed because nobody died holding the lock: try --kill-holder",
     SK_KP_LOCKED, 0, 0},
    {"setnx-expire", SK_SETNX_EXPIRE,
     "SETNX, then PEXPIRE as a second command; DEL",
     "the lease ran out during the work and a second holder entered; the "
     "first one's DEL then freed the second one's lock",
     "the holder died between SETNX and PEXPIRE (two commands, not atomic): "
     "the key never expires",
     "the lease ran out during the work, so one user's two requests "
     "overlapped",
     "passed because nobody died between SETNX and PEXPIRE: try "
     "--kill-holder",
     SK_KP_BETWEEN, 1, 0},
    {"getset", SK_GETSET,
     "SETNX with an expiry time as value; take an expired lock over with "
     "GETSET; DEL",
     "the lease ran out during the work, another client took the lock over "
     "with GETSET, and the first one's DEL then freed the new holder's lock",
     "requests were still waiting when the run was stopped (the expiry in "
     "the value lets the next client take over after --lease-ms)",
     "the lease ran out during the work, so one user's two requests "
     "overlapped",
     "passed because the lease outlived the work (and clocks agree): try "
     "--lease-ms 1",
     SK_KP_LOCKED, 1, 0},
    {"set-nx-px", SK_SET_NX_PX, "SET lock id NX PX lease (one command) + DEL",
     "the lease ran out during the work: a second holder entered, and the "
     "first one's plain DEL then deleted the second one's lock",
     "requests were still waiting when the run was stopped (a dead holder's "
     "lock expires after --lease-ms)",
     "the lease ran out during the work, so one user's two requests "
     "overlapped",
     "passed because the lease outlived the work: try --lease-ms 1",
     SK_KP_LOCKED, 1, 0},
    {"owner-lua", SK_OWNER_LUA,
     "SET lock <unique id> NX PX lease + Lua compare-and-delete; fixed "
     "lease, no renewal",
     "the fixed lease ran out during the work and two holders overlapped: "
     "owner-checked release is not enough, the lease must be renewed "
     "(watchdog)",
     "requests were still waiting when the run was stopped (a dead holder's "
     "lock expires after --lease-ms)",
     "the fixed lease ran out during the work, so one user's two requests "
     "overlapped",
     "passed because the lease outlived the work: try --lease-ms 1",
     SK_KP_LOCKED, 1, 0},
    {"dlock", SK_DLOCK,
     "dlock_mutex: Redisson RLock layout, watchdog renewal, pub/sub "
     "hand-over",
     "two holders overlapped: this must not happen with dlock, please "
     "report it",
     "requests were still waiting when the run was stopped (a dead holder's "
     "lock expires after --watchdog-ms; is --stall-ms long enough?)",
     "one user got two orders: this must not happen with dlock, please "
     "report it",
     NULL, SK_KP_LOCKED, 0, 0},
    {"segmented", SK_SEGMENTED,
     "stock split into --segments parts, one dlock_mutex each; an empty "
     "segment sends the request on to the next",
     "two holders of one segment overlapped: this must not happen, please "
     "report it",
     "requests were still waiting when the run was stopped (a dead holder's "
     "segment lock expires after --watchdog-ms)",
     "one user got two orders: this must not happen, please report it", NULL,
     SK_KP_LOCKED, 0, 0},
    {"atomic", SK_ATOMIC,
     "no lock: one Lua script decrements only if stock > 0 and records the "
     "order; the work runs after",
     "the script oversold: this must not happen, please report it",
     "requests were still running when the run was stopped",
     "one user got two orders: this must not happen, please report it", NULL,
     SK_KP_READ, 0, 0},
    {"fair", SK_FAIR,
     "dlock_mutex_new_fair: Redisson RFairLock, waiters served in FIFO order",
     "two holders overlapped: this must not happen with dlock, please "
     "report it",
     "requests were still waiting when the run was stopped (a dead holder's "
     "lock expires after --watchdog-ms)",
     "one user got two orders: this must not happen with dlock, please "
     "report it",
     NULL, SK_KP_LOCKED, 0, 1},
    {"redlock", SK_REDLOCK,
     "dlock_redlock on 3 independent private servers: held when a majority "
     "granted it; watchdog renewal (--watchdog-ms)",
     "two holders overlapped: this must not happen with a Redlock on "
     "healthy servers, please report it",
     "requests were still waiting when the run was stopped (a dead holder's "
     "lock expires after --watchdog-ms)",
     "one user got two orders: this must not happen, please report it", NULL,
     SK_KP_LOCKED, 0, 2},
    {"spin", SK_SPIN,
     "dlock_mutex_new_spin: Redisson RSpinLock, the RLock layout without "
     "pub/sub (waiters poll with exponential back-off, at most 128 ms)",
     "two holders overlapped: this must not happen with dlock, please "
     "report it",
     "requests were still waiting when the run was stopped (a dead holder's "
     "lock expires after --watchdog-ms)",
     "one user got two orders: this must not happen with dlock, please "
     "report it",
     NULL, SK_KP_LOCKED, 0, 0},
    {"permits", SK_PERMITS,
     "dlock_permits: each unit an expirable permit; reserve one, pay within "
     "--lease-ms or it goes back",
     "the stock was oversold: this must not happen with expirable permits, "
     "please report it",
     "requests were still waiting when the run was stopped (a dead buyer's "
     "reservation comes back after --lease-ms)",
     "one user got two orders: this must not happen, please report it",
     "passed without a dead buyer: try --kill-holder (its reserved unit "
     "comes back after --lease-ms and is sold)",
     SK_KP_LOCKED, 1, 0},
    {"etcd", SK_ETCD,
     "dlock_mutex on etcd (etcd://, the CP store): a key per waiter, the "
     "lowest create revision holds; session lease kept alive",
     "two holders overlapped: this must not happen with dlock on etcd, "
     "please report it",
     "requests were still waiting when the run was stopped (a dead holder's "
     "lock goes when its session lease ends, --watchdog-ms rounded up to "
     "whole seconds)",
     "one user got two orders: this must not happen, please report it",
     "slower than dlock on Redis (every lock write is a quorum write), and "
     "safe through a failover: see the failover scenario",
     SK_KP_LOCKED, 0, 0},
};

const int sk_n_strategies =
    (int)(sizeof sk_strategies / sizeof sk_strategies[0]);

const sk_strategy *sk_strategy_find(const char *name) {
  for (int i = 0; i < sk_n_strategies; i++)
    if (strcmp(sk_strategies[i].name, name) == 0)
      return &sk_strategies[i];
  return NULL;
}

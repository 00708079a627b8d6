/*
 * th_drive.h -- one driver interface over both clients, so that a test
 * case body runs against the blocking client (dlock.h) and the event-loop
 * client (dlock/async.h) alike: parity shown by tests (issue 26). A fix
 * that lands in one client only fails the other's run of the same body.
 *
 * Every call is synchronous from the test's point of view:
 *   - blocking: the dlock_mutex call itself, on the calling thread (the
 *     owner is the calling thread: only owner 1 is accepted);
 *   - async: the call is queued on a dlock_async attached to a private
 *     poll(2) loop of the driver, and the loop runs on the calling thread
 *     until its callback ran (bounded).
 * Between calls the async client runs only inside th_drive_* calls: a case
 * that waits for something (a loss report, renewals) uses th_drive_pump
 * (which, for the blocking driver, just sleeps: its threads run anyway).
 *
 * Loss reports (cfg.on_lock_lost) are counted by the driver, with the
 * monotonic time (th_now_ms) of the first report of each name asked for.
 * Thread-safety: a driver belongs to one thread; th_drive_lost_* may be
 * read from any.
 */
#ifndef TH_DRIVE_H
#define TH_DRIVE_H

#include <stdint.h>

#include "dlock.h"

typedef struct th_drive th_drive;

enum { TH_DRIVE_BLOCKING = 0, TH_DRIVE_ASYNC = 1 };

/* A driver of kind over a client made from cfg (cfg->url set; the driver
 * replaces on_lock_lost with its own). Fails the case on error. */
th_drive *th_drive_new(int kind, const dlock_config *cfg);
/* th_drive_new with the default configuration at url. */
th_drive *th_drive_at(int kind, const char *url);
/* "blocking" or "async", for messages. */
const char *th_drive_kind(const th_drive *d);
/* dlock_mutex_timedlock / dlock_async_lock of (name, owner). */
int th_drive_lock(th_drive *d, const char *name, long long owner,
                  long long wait_ms, long long lease_ms);
/* dlock_mutex_unlock / dlock_async_unlock of (name, owner). */
int th_drive_unlock(th_drive *d, const char *name, long long owner);
/* The detail message (dlock_last_error) of the last answer th_drive_lock,
 * th_drive_unlock or th_drive_call_wait returned (async: as its callback
 * saw it); "" after a success. */
const char *th_drive_error(const th_drive *d);
/* dlock_mutex_force_unlock. The event-loop client has none: its driver
 * uses a blocking client made from the same cfg. */
int th_drive_force_unlock(th_drive *d, const char *name);
/* The hash field (name, owner) holds in ("<client id>:<owner or tid>"). */
const char *th_drive_field(th_drive *d, const char *name, long long owner,
                           char *buf, size_t len);
/* The blocking driver's mutex object of name (its client's local view:
 * dlock_mutex_is_held, validity, hold count); NULL for the async driver,
 * which has no such calls. */
dlock_mutex *th_drive_mutex(th_drive *d, const char *name);
/* A lock call left running while the case goes on (two waits of one
 * client at once): async -- queued on the driver's loop, which runs during
 * later th_drive_* calls; blocking -- dlock_mutex_timedlock on a thread of
 * its own (the owner is that thread; `owner` only names the async one). */
typedef struct th_call th_call;
th_call *th_drive_lock_bg(th_drive *d, const char *name, long long owner,
                          long long wait_ms, long long lease_ms);
/* 1 once the call has answered (async: the loop runs one turn first). */
int th_drive_call_done(th_drive *d, th_call *c);
/* Runs the client until the call answered, at most ms: its code, or the
 * case fails. */
int th_drive_call_wait(th_drive *d, th_call *c, int64_t ms);
/* Ends a call that answered: unlocks what it holds (blocking: on its
 * thread, which then ends) and frees it. The unlock's code (0 when it held
 * nothing). */
int th_drive_call_end(th_drive *d, th_call *c);
/* Lets ms pass with the client running (async: its loop turns). */
void th_drive_pump(th_drive *d, int64_t ms);
/* Runs the client until *flag (written by another thread) is non-zero or
 * ms pass. Returns the flag. */
int th_drive_pump_until(th_drive *d, const volatile int *flag, int64_t ms);
/* Loss reports so far (any name); when the first report of `name` came
 * (th_now_ms), 0 if none yet. */
int th_drive_lost_count(const th_drive *d);
int64_t th_drive_lost_at(const th_drive *d, const char *name);
/* Async: how late the loop ran the timer whose turn reported the first
 * loss of `name` (ms after it was due: the test thread did not run
 * meanwhile -- the environment, not the library); 0 otherwise. */
int64_t th_drive_lost_late(const th_drive *d, const char *name);
/* dlock_client_stats / dlock_async_stats of the driver's client: callable
 * from a log hook (issue 38.8: no callback runs under an internal lock).
 * 0 or the call's code. */
int th_drive_stats(th_drive *d, dlock_client_stats *st);
/* Frees the driver and its client (locks held expire with their lease). */
void th_drive_free(th_drive *d);

#endif

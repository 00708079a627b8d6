/*
 * wire.h -- the soak's wire adversary (issues 38, 43): a RESP-aware TCP
 * proxy in front of one redis-server (standalone: one per worker; Sentinel
 * and Cluster: one per data node, announced to the clients by
 * replica-announce-port / cluster-announce-port). It forwards everything,
 * and, at random under one global rate limit shared by every proxy, faults
 * ONE request of a soak worker that names a soak lock (its connection
 * tagged by the worker's CLIENT SETNAME "soak-w<idx>-<pid>"):
 *
 *   late    the request is held on the wire: not forwarded now (the client
 *           times out and re-sends), delivered 0.7-3 s later on a
 *           connection of its own (AUTH/HELLO/SELECT replayed) -- a LATE
 *           COPY, also after the client closed its connection. Sub-modes:
 *           "one" (that copy only: the re-send runs first), "all" (also the
 *           byte-identical re-sends of the next 2.5 s: the call fails with
 *           DLOCK_ECONN and every copy lands late), "tomb" (that copy, and
 *           the same worker's next write naming redisson_unlock_latch and
 *           the lock: the tombstone of a re-sent final unlock, held longer
 *           than the copy or dropped).
 *   reply   the request runs; its reply is held 0.7-3 s (past the command
 *           timeout) before it is passed on.
 *   cut     the connection is cut mid-request (half of the request's bytes
 *           reach the server, which never runs it) or mid-reply (the
 *           request ran; half of its reply is passed on).
 *
 * Pub/sub connections, replication links (SYNC/PSYNC: passed on raw) and
 * untagged connections are never faulted. Every fault applied is reported
 * to the log callback as a faults.log line "wire-<class> t0 t1 detail",
 * detail = "w<idx> <pid> <lock> <sub-mode>": t1 is when a late copy was
 * delivered (a held reply passed on), so the checker's windows cover it.
 * Blackhole: connections stay open and nothing passes either way; a
 * connection accepted meanwhile gets nothing, ever (connects "hang").
 */
#ifndef DLOCK_SOAK_WIRE_H
#define DLOCK_SOAK_WIRE_H

#include <stdint.h>

typedef struct wire wire;

/* Fault classes (a mask for wire_enable). */
enum { WIRE_LATE = 1, WIRE_REPLY = 2, WIRE_CUT = 4, WIRE_ALL = 7 };

typedef void wire_log_fn(const char *kind, int64_t t0, int64_t t1,
                         const char *detail);

/* Once, before the first wire_new: the log callback (called from proxy
 * threads, one call at a time), the random seed, and the mean gap between
 * two faults of all proxies together (ms). */
void wire_setup(wire_log_fn *log, unsigned seed, int mean_gap_ms);
/* The locks the faults are spread over evenly: each fault draws one and
 * hits a request naming it (the busiest locks would take most faults
 * otherwise). None: any request naming a soak lock. */
void wire_locks(const char *const *locks, int n);
/* Which classes may fire (0: none -- the proxies only forward). */
void wire_enable(int mask);
/* A bias: for the next ms milliseconds, requests naming `lock` are faulted
 * at a 4x rate (a replica stall's undo requests, say). NULL ends it. */
void wire_focus(const char *lock, int ms);

/* A proxy to 127.0.0.1:target_port on a free loopback port (NULL on
 * error). Its threads run until the process ends. */
wire *wire_new(int target_port);
int wire_port(const wire *w);
/* Points the proxy at another port (a server started after its proxy, so
 * that the server's announce settings can name the proxy's port). */
void wire_set_target(wire *w, int target_port);
/* "redis://127.0.0.1:<port>". */
const char *wire_url(const wire *w);
void wire_blackhole(wire *w, int on);

/* Late copies held now and not yet delivered: of worker process pid, or
 * of every worker (pid 0). */
int wire_pending(int pid);
/* Faults applied so far, per class (WIRE_LATE, WIRE_REPLY, WIRE_CUT). */
long wire_count(int cls);

#endif

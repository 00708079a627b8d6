/*
 * faultproxy.h -- a RESP-aware TCP proxy between a test's client and its
 * redis-server that injects the faults of an unreliable network into ONE
 * chosen command: the first command, from the moment it is armed, whose
 * name or arguments contain a given string. It parses both directions
 * (requests and replies, in order, per connection), so the fault lands on
 * exactly that command's reply:
 *
 *   FP_LOSE   the command reaches the server and runs; its reply is
 *             dropped and the connection closed (both sides). The caller
 *             cannot know whether it ran: the ambiguous outcome.
 *   FP_DELAY  the reply (and what follows on that connection) is held for
 *             delay_ms before it is passed on: past the command timeout.
 *   FP_CUT    the first half of the reply's bytes is passed on, then the
 *             connection is closed: a reply cut mid-way.
 *   FP_HOLD   the REQUEST is held on the wire: it does not reach the
 *             server now (the client sees no reply and times out); after
 *             delay_ms it is delivered on a connection of its own (the
 *             client's AUTH/SELECT/HELLO replayed first) and runs -- even
 *             if the client closed its connection meanwhile and its retry
 *             has run since: a LATE COPY. Its reply is dropped.
 *             fp_arm_hold holds the next n matching requests.
 *
 * A NOSCRIPT error reply is passed on and the fault stays armed (the
 * router's EVAL that follows is the command that runs). Connections that
 * carry no matching command are forwarded untouched (pub/sub included).
 * Two threads per connection, blocking I/O; the process's end stops them.
 */
#ifndef FAULTPROXY_H
#define FAULTPROXY_H

#include <stdint.h>

typedef struct fp_proxy fp_proxy;

enum { FP_LOSE = 1, FP_DELAY, FP_CUT, FP_HOLD };

/* Listens on a free 127.0.0.1 port, forwarding to host:target_port
 * (host NULL: 127.0.0.1). Fails the test on error. */
fp_proxy *fp_new(const char *host, int target_port);
/* "redis://127.0.0.1:<port>" of the proxy. */
const char *fp_url(const fp_proxy *p);
int fp_port(const fp_proxy *p);
/* Arms one fault (replacing an armed one that has not fired): mode on the
 * reply of the next command containing match. delay_ms for FP_DELAY. */
void fp_arm(fp_proxy *p, const char *match, int mode, int delay_ms);
/* Holds the next n requests containing match (FP_HOLD), each delivered
 * delay_ms after it arrived. A held request counts as fired once its late
 * copy has run on the server (its reply read). */
void fp_arm_hold(fp_proxy *p, const char *match, int delay_ms, int n);
/* The same, only for requests whose first argument is verb ("EVALSHA",
 * "SET"; NULL: any). Up to 4 such rules are armed at once, each on its
 * own (fp_arm's single fault aside); a request takes the first rule it
 * matches. */
void fp_hold(fp_proxy *p, const char *verb, const char *match, int delay_ms,
             int n);
/* Faults applied so far (a reply dropped, delayed or cut; a held request
 * delivered and run). */
int fp_fired(fp_proxy *p);
/* Held copies (FP_HOLD) the server answered NOSCRIPT: they did not run
 * (their script was never loaded) -- a test of a late copy must load its
 * scripts first, or it shows nothing. */
int fp_late_noscript(fp_proxy *p);
/* Waits (bounded) until fp_fired reaches n; 0, or -1 when time ran out. */
int fp_wait_fired(fp_proxy *p, int n, int64_t timeout_ms);
/* Commands seen so far whose text contains match (counted from when
 * fp_count_reset was last called with this match; one match at a time). */
void fp_count_reset(fp_proxy *p, const char *match);
int fp_count(fp_proxy *p);

#endif

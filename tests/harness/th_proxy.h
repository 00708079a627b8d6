/*
 * th_proxy.h -- a TCP proxy between a client and a test's redis-server that
 * can cut the path without closing it: the network fault "a partition where
 * connections stay open and nothing comes back" (a blackhole), on loopback,
 * with no privileges needed.
 */
#ifndef TH_PROXY_H
#define TH_PROXY_H

typedef struct th_proxy th_proxy;

/* Listens on a free 127.0.0.1 port and forwards every connection to
 * 127.0.0.1:target_port. The harness stops it when the process ends. */
th_proxy *th_proxy_new(int target_port);
/* "redis://127.0.0.1:<port>" of the proxy (valid while the process runs). */
const char *th_proxy_url(th_proxy *p);
/* on = 1: from now on bytes in both directions are read and dropped (the
 * connections stay open, new ones are accepted and swallowed too);
 * on = 0: forwarding resumes (what was dropped stays lost). */
void th_proxy_blackhole(th_proxy *p, int on);
/* on = 1: the server behind becomes unreachable as a dropped route makes
 * it -- a new connect hangs (the proxy stops accepting and its listen
 * queue is full: the kernel drops the SYN, so connect(2) waits for its
 * timeout) and the connections open go silent both ways (as
 * th_proxy_blackhole); on = 0: it accepts and forwards again. Returns once
 * applied (a connect to the proxy is seen to hang). */
void th_proxy_unreachable(th_proxy *p, int on);
/* Holds every chunk coming back from the server ms milliseconds before
 * passing it on (0: none): slow replies, e.g. to widen the window between
 * a command running on the server and its caller hearing of it. One thread
 * serves all connections, so the delay adds up across them. */
void th_proxy_reply_delay(th_proxy *p, int ms);
/* The connections open now go silent: their requests still reach the
 * server and run, the replies are read and dropped (the connections stay
 * open). Connections made later work normally. So a command sent on a
 * pooled connection runs but its caller never hears of it, times out, and
 * (retry policy) re-sends it on a new connection that answers. Returns
 * once applied. */
void th_proxy_silence(th_proxy *p);

#endif

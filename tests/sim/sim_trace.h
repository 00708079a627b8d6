/*
 * sim_trace.h -- a trace of the commands a redis-server ran, in its order,
 * for the Redis model's differential test (test_sim.c): read from MONITOR
 * lines (the server's own order and clock; a script's inner commands, the
 * "lua" lines, are left out: the script is replayed, not its effects),
 * saved to and loaded from a file so a failing run can be replayed exactly
 * (DLOCK_SIM_TRACE).
 *
 * Thread-safety: a trace belongs to one thread. Memory: owned by the trace
 * (sim_trace_free); allocation failures fail the test case (th_fail).
 */
#ifndef DLOCK_SIM_TRACE_H
#define DLOCK_SIM_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct sim_cmd {
  int64_t t_us; /* the server's wall clock when it ran, us since the epoch */
  int conn;     /* index into the trace's conns: which client sent it */
  int argc;
  char **argv; /* each NUL-terminated after its lens[i] bytes */
  size_t *lens;
} sim_cmd;

typedef struct sim_trace {
  sim_cmd *cmd;
  size_t n, cap;
  char **conns; /* client addresses ("127.0.0.1:40122", "unix:/...") */
  size_t nconns;
} sim_trace;

void sim_trace_init(sim_trace *t);
void sim_trace_free(sim_trace *t);
/* Appends a command (copied) sent by the client `conn` (an address). */
void sim_trace_add(sim_trace *t, int64_t t_us, const char *conn, int argc,
                   const char *const *argv, const size_t *lens);
/* One MONITOR line (without the leading '+'): 1 appended, 0 a script's
 * inner command (left out), -1 not a MONITOR line. */
int sim_trace_add_monitor_line(sim_trace *t, const char *line, size_t len);
/* Writes / reads the whole trace (binary-safe text: arguments in hex).
 * 0, or -1 (errno says why). */
int sim_trace_save(const sim_trace *t, const char *path);
int sim_trace_load(sim_trace *t, const char *path);
/* 1 when the command's name is `lower_name` (any case). */
int sim_cmd_is(const sim_cmd *c, const char *lower_name);

#endif

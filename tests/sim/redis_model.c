/*
 * redis_model.c -- the Redis model object (redis_model.h): its parts (the
 * keyspace, the Lua state, the caller's pub/sub), the simulated clock,
 * model errors, and rm_command -- one command as a client sends it, with
 * the client-level checks Redis makes before running it (unknown
 * subcommand, arity) and the answer RM_EMODEL whenever anything the
 * command touched is not modelled.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_int.h"

rm_model *rm_new(const rm_pubsub *ps) {
  rm_model *m = rm_xmalloc(sizeof *m);
  memset(m, 0, sizeof *m);
  rm_ks_init(&m->ks);
  if (ps)
    m->ps = *ps;
  m->lua = rm_lua_new(m);
  return m;
}

void rm_free(rm_model *m) {
  if (!m)
    return;
  rm_lua_free(m->lua);
  rm_ks_free(&m->ks);
  free(m);
}

void rm_set_time(rm_model *m, int64_t ms) {
  m->now = ms;
  if (ms > m->latest)
    m->latest = ms;
}
int64_t rm_time(const rm_model *m) { return m->now; }

const char *rm_model_error(const rm_model *m) {
  return m->model_err ? m->model_err_text : "";
}

void rm_clear_model_error(rm_model *m) {
  m->model_err = 0;
  m->model_err_text[0] = '\0';
}

void rm_flushall(rm_model *m) {
  rm_ks_free(&m->ks);
  rm_ks_init(&m->ks);
}

/* Redis's answer to a name that is no command. */
static void unknown_command(rm_ctx *c) {
  char args[400];
  size_t at = 0;
  args[0] = '\0';
  for (int i = 1; i < c->argc && at < 128; i++) {
    int room = 128 - (int)at;
    at += (size_t)snprintf(
        args + at, sizeof args - at, "'%.*s' ",
        (int)(c->argv[i].len < (size_t)room ? c->argv[i].len : (size_t)room),
        c->argv[i].p);
  }
  rm_out_error(c, "ERR unknown command '%.*s', with args beginning with: %s",
               (int)(c->argv[0].len > 128 ? 128 : c->argv[0].len), c->argv[0].p,
               args);
}

static void dispatch(rm_ctx *c) {
  const rm_cmd *cmd = NULL;
  int lk = rm_cmd_lookup(c->argc, c->argv, &cmd);
  if (lk == RM_LK_UNMODELLED) {
    rm_model_fail(c, "command '%.*s' is not modelled",
                  (int)(c->argv[0].len > 60 ? 60 : c->argv[0].len),
                  c->argv[0].p);
  } else if (lk == RM_LK_UNKNOWN) {
    unknown_command(c);
  } else if (lk == RM_LK_UNKNOWN_SUB && c->argc >= 2) {
    char up[32];
    size_t n = strlen(cmd->name);
    for (size_t i = 0; i < n && i < sizeof up - 1; i++)
      up[i] = (char)(cmd->name[i] - 'a' + 'A');
    up[n < sizeof up - 1 ? n : sizeof up - 1] = '\0';
    rm_out_error(c, "ERR unknown subcommand '%.*s'. Try %s HELP.",
                 (int)(c->argv[1].len > 128 ? 128 : c->argv[1].len),
                 c->argv[1].p, up);
  } else if (!rm_cmd_arity_ok(cmd, c->argc)) {
    rm_out_arity(c, cmd->name);
  } else if (!cmd->fn) {
    rm_model_fail(c, "command '%s' is not modelled", cmd->name);
  } else {
    rm_cmd_run(c, cmd);
  }
}

int rm_command(rm_model *m, int argc, const char *const *argv,
               const size_t *lens, rm_reply *out) {
  rm_arg stack[32];
  rm_arg *av = argc <= 32 ? stack : rm_xmalloc(sizeof *av * (size_t)argc);
  for (int i = 0; i < argc; i++)
    av[i] = (rm_arg){argv[i], lens ? lens[i] : strlen(argv[i])};
  rm_tree t;
  rm_tree_begin(&t, out);
  rm_ctx c = {m, argc, av, &rm_tree_sink, &t, 0};
  m->running = 0;
  if (argc < 1)
    rm_model_fail(&c, "an empty command");
  else
    dispatch(&c);
  int rc = RM_OK;
  if (m->running) { /* whatever was written: the model error instead */
    rm_tree_begin(&t, out);
    rm_out_error(&c, "MODELERR %s", m->model_err_text);
    rc = RM_EMODEL;
  }
  m->running = 0;
  if (av != stack)
    free(av);
  return rc;
}

int rm_commandv(rm_model *m, rm_reply *out, const char *const *argv) {
  int argc = 0;
  while (argv[argc])
    argc++;
  return rm_command(m, argc, argv, NULL, out);
}

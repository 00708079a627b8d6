/*
 * rm_script.c -- the Redis model's scripts (rm_int.h): the script cache
 * (compiled functions by SHA1 in the Lua registry, as Redis keeps them:
 * EVAL caches too, SCRIPT FLUSH starts a fresh Lua state), EVAL / EVALSHA
 * with Redis 7.0's checks in its order (NOSCRIPT for a digest that is not
 * 40 characters, the number of keys, then NOSCRIPT for an unknown digest),
 * KEYS / ARGV, the error reply of a script that failed, and SCRIPT LOAD /
 * EXISTS / FLUSH. A body is loaded as a chunk named "@user_script" (what
 * Redis 7 does), so error lines are the body's own lines.
 */
#include <lauxlib.h>
#include <lua.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rm_lua_int.h"

rm_lua *rm_lua_new(rm_model *m) {
  rm_lua *l = rm_xmalloc(sizeof *l);
  memset(l, 0, sizeof *l);
  l->m = m;
  l->L = rm_lua_state_new(l);
  return l;
}

void rm_lua_free(rm_lua *l) {
  if (!l)
    return;
  lua_close(l->L);
  free(l->av);
  free(l->num);
  free(l->covs);
  free(l);
}

void rm_script_flush(rm_model *m) {
  lua_close(m->lua->L);
  m->lua->L = rm_lua_state_new(m->lua);
  rm_lua_cov_hook(m->lua);
}

/* ---- line coverage ---- */

static rm_cov *cov_of(rm_lua *l, const char *sha) {
  for (size_t i = 0; i < l->ncovs; i++)
    if (memcmp(l->covs[i].sha, sha, 40) == 0)
      return &l->covs[i];
  l->covs = rm_xrealloc(l->covs, (l->ncovs + 1) * sizeof *l->covs);
  rm_cov *c = &l->covs[l->ncovs++];
  memset(c, 0, sizeof *c);
  memcpy(c->sha, sha, 40);
  return c;
}

static void line_hook(lua_State *L, lua_Debug *ar) {
  lua_pushlightuserdata(L, (void *)&line_hook);
  lua_rawget(L, LUA_REGISTRYINDEX);
  rm_lua *l = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!l || !l->cur_sha || ar->currentline <= 0 ||
      ar->currentline >= RM_COV_LINES || !lua_getinfo(L, "S", ar) ||
      strcmp(ar->source, "@user_script") != 0)
    return;
  cov_of(l, l->cur_sha)->hit[ar->currentline] = 1;
}

void rm_lua_cov_hook(rm_lua *l) {
  if (!l->cov)
    return;
  lua_pushlightuserdata(l->L, (void *)&line_hook);
  lua_pushlightuserdata(l->L, l);
  lua_rawset(l->L, LUA_REGISTRYINDEX);
  lua_sethook(l->L, line_hook, LUA_MASKLINE, 0);
}

void rm_line_coverage_on(rm_model *m) {
  m->lua->cov = 1;
  rm_lua_cov_hook(m->lua);
}

int rm_line_coverage(rm_model *m, const char *sha, unsigned char *hit,
                     int max_lines) {
  rm_lua *l = m->lua;
  for (size_t i = 0; i < l->ncovs; i++)
    if (strncasecmp(l->covs[i].sha, sha, 40) == 0) {
      int n = max_lines < RM_COV_LINES ? max_lines : RM_COV_LINES;
      memcpy(hit, l->covs[i].hit, (size_t)n);
      return n;
    }
  memset(hit, 0, (size_t)max_lines);
  return 0;
}

static void sha1_hex(const char *p, size_t n, char out[41]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int ml = 0;
  if (!EVP_Digest(p, n, md, &ml, EVP_sha1(), NULL) || ml != 20) {
    fprintf(stderr, "redis model: SHA1 failed\n");
    abort();
  }
  static const char hx[] = "0123456789abcdef";
  for (size_t i = 0; i < 20; i++) {
    out[2 * i] = hx[md[i] >> 4];
    out[2 * i + 1] = hx[md[i] & 15];
  }
  out[40] = '\0';
}

/* "f_<sha>" of a 40-character digest, lower-cased (Redis lowers A-Z). */
static void fname_of(const char *sha, char out[43]) {
  out[0] = 'f';
  out[1] = '_';
  for (int i = 0; i < 40; i++) {
    char ch = sha[i];
    out[2 + i] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  }
  out[42] = '\0';
}

/* Pushes the cached function of fname, compiling body when it is not
 * cached (body NULL: not compiled). 0 = pushed; 1 = not cached; -1 = an
 * error reply was written (nothing pushed). */
static int function_of(rm_ctx *c, const char *fname, const rm_arg *body) {
  lua_State *L = c->m->lua->L;
  lua_getfield(L, LUA_REGISTRYINDEX, fname);
  if (!lua_isnil(L, -1))
    return 0;
  lua_pop(L, 1);
  if (!body)
    return 1;
  if (body->len >= 2 && body->p[0] == '#' && body->p[1] == '!') {
    rm_model_fail(c, "script flags (a #! line) are not modelled");
    return -1;
  }
  if (luaL_loadbuffer(L, body->p, body->len, "@user_script")) {
    rm_out_error(c, "ERR Error compiling script (new function): %s",
                 lua_tostring(L, -1));
    lua_pop(L, 1);
    return -1;
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, fname);
  return 0;
}

static void set_array(lua_State *L, const char *name, const rm_arg *a, int n) {
  lua_pushstring(L, name);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushlstring(L, a[i].p, a[i].len);
    lua_rawseti(L, -2, i + 1);
  }
  lua_rawset(L, LUA_GLOBALSINDEX);
}

/* The reply of a script that raised (error object on top). */
static void failed_reply(rm_ctx *c, const char *sha) {
  lua_State *L = c->m->lua->L;
  if (!lua_istable(L, -1)) {
    rm_out_error(c, "ERR Error running script %s, %.100s", sha,
                 lua_isstring(L, -1) ? lua_tostring(L, -1)
                                     : "execution failure");
    return;
  }
  lua_getfield(L, -1, "err");
  const char *msg = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
  lua_getfield(L, -2, "source");
  const char *src = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
  lua_getfield(L, -3, "line");
  const char *line = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
  if (!msg)
    rm_model_fail(c, "a script raised an error without an err field "
                     "(Redis 7.0.15 crashes on it)");
  else if (src && line)
    rm_out_error(c, "%s script: %s, on %s:%s.", msg, sha, src, line);
  else
    rm_out_error(c, "%s", msg);
  lua_pop(L, 3);
}

static void run(rm_ctx *c, const char *sha, int nkeys) {
  rm_model *m = c->m;
  lua_State *L = m->lua->L;
  set_array(L, "KEYS", c->argv + 3, nkeys);
  set_array(L, "ARGV", c->argv + 3 + nkeys, c->argc - 3 - nkeys);
  int before = m->running;
  m->running = 0;
  m->lua->cur_sha = sha;
  /* stack: handler, function */
  int rc = lua_pcall(L, 0, 1, -2);
  m->lua->cur_sha = NULL;
  int model = m->running;
  m->running |= before;
  if (model)
    rm_model_fail(c, "%s", m->model_err_text);
  else if (rc)
    failed_reply(c, sha);
  else
    rm_lua_to_reply(L, c);
}

void rm_lua_eval(rm_ctx *c, int evalsha) {
  static const char noscript[] = "NOSCRIPT No matching script. Please use "
                                 "EVAL.";
  if (evalsha && c->argv[1].len != 40) {
    rm_out_error(c, "%s", noscript);
    return;
  }
  long long nk;
  if (rm_get_ll(c, c->argv[2], &nk))
    return;
  if (nk > c->argc - 3) {
    rm_out_error(c, "ERR Number of keys can't be greater than number of "
                    "args");
    return;
  } else if (nk < 0) {
    rm_out_error(c, "ERR Number of keys can't be negative");
    return;
  }
  char sha[41], fname[43];
  if (evalsha)
    memcpy(sha, c->argv[1].p, 40);
  else
    sha1_hex(c->argv[1].p, c->argv[1].len, sha);
  fname_of(sha, fname);
  memcpy(sha, fname + 2, 41);
  lua_State *L = c->m->lua->L;
  int base = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->m->lua->handler_ref);
  int r = function_of(c, fname, evalsha ? NULL : &c->argv[1]);
  if (r == 1)
    rm_out_error(c, "%s", noscript);
  else if (r == 0)
    run(c, sha, (int)nk);
  lua_settop(L, base);
}

void rm_lua_script_load(rm_ctx *c, rm_arg body) {
  char sha[41], fname[43];
  sha1_hex(body.p, body.len, sha);
  fname_of(sha, fname);
  lua_State *L = c->m->lua->L;
  int base = lua_gettop(L);
  if (function_of(c, fname, &body) == 0)
    rm_out_bulk(c, sha, 40);
  lua_settop(L, base);
}

int rm_lua_script_exists(rm_lua *l, const char *sha, size_t n) {
  if (n != 40)
    return 0;
  char fname[43];
  fname_of(sha, fname);
  lua_getfield(l->L, LUA_REGISTRYINDEX, fname);
  int yes = !lua_isnil(l->L, -1);
  lua_pop(l->L, 1);
  return yes;
}

/* ---- the commands ---- */

static void c_eval(rm_ctx *c) { rm_lua_eval(c, 0); }
static void c_evalsha(rm_ctx *c) { rm_lua_eval(c, 1); }
static void c_load(rm_ctx *c) { rm_lua_script_load(c, c->argv[2]); }

static void c_exists(rm_ctx *c) {
  rm_out_array(c, (size_t)(c->argc - 2));
  for (int i = 2; i < c->argc; i++)
    rm_out_int(c,
               rm_lua_script_exists(c->m->lua, c->argv[i].p, c->argv[i].len));
}

static void c_flush(rm_ctx *c) {
  if (c->argc == 3 &&
      !(rm_arg_is(c->argv[2], "sync") || rm_arg_is(c->argv[2], "async"))) {
    rm_out_error(c, "ERR SCRIPT FLUSH only support SYNC|ASYNC option");
    return;
  }
  if (c->argc > 3) {
    rm_out_error(c, "ERR SCRIPT FLUSH only support SYNC|ASYNC option");
    return;
  }
  rm_script_flush(c->m);
  rm_out_status(c, "OK");
}

static const rm_cmd g_script_sub[] = {
    {"script|load", 3, c_load, RM_CMD_NOSCRIPT, NULL},
    {"script|exists", -3, c_exists, RM_CMD_NOSCRIPT, NULL},
    {"script|flush", -2, c_flush, RM_CMD_NOSCRIPT, NULL},
    {"script|kill", 2, NULL, RM_CMD_NOSCRIPT, NULL},
    {"script|debug", 3, NULL, RM_CMD_NOSCRIPT, NULL},
    {"script|help", 2, NULL, RM_CMD_NOSCRIPT, NULL},
    {NULL, 0, NULL, 0, NULL}};

const rm_cmd rm_cmds_script[] = {
    {"eval", -3, c_eval, RM_CMD_NOSCRIPT, NULL},
    {"evalsha", -3, c_evalsha, RM_CMD_NOSCRIPT, NULL},
    {"script", -2, NULL, RM_CMD_NOSCRIPT | RM_CMD_CONTAINER, g_script_sub},
    {NULL, 0, NULL, 0, NULL}};

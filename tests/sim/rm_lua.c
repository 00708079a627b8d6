/*
 * rm_lua.c -- the Redis model's embedded Lua 5.1 (rm_int.h): the state a
 * script runs in (Redis's libraries: base without dofile/loadfile, table,
 * string, math; read-only globals with Redis's error texts), the redis.*
 * functions (call, pcall, error_reply, status_reply), the conversions
 * between Redis replies and Lua values in both directions as Redis 7.0
 * makes them, and the error handler that gives a failed script's error
 * reply its "script: <sha>, on @user_script:<line>." suffix.
 *
 * CONVERSIONS (Redis's documented rules, RESP2):
 *   Redis -> Lua: integer -> number; bulk -> string; nil bulk or nil array
 *   -> false; array -> table; status -> {ok = s}; error -> {err = s}.
 *   Lua -> Redis: number -> integer (truncated toward zero; NaN and out of
 *   range -> LLONG_MIN, what Redis's cast gives on x86-64); string -> bulk;
 *   true -> 1; false and nil -> nil; a table with a string field err ->
 *   that error, ok -> that status, double -> a double reply; else an array
 *   of t[1], t[2], ... up to the first nil.
 * redis.call raises a command's error reply (the script fails with it,
 * suffixed by where); redis.pcall returns it as {err = ...}.
 *
 * A script's own pcall is Redis's: an error table with a string err field
 * is caught as that string.
 *
 * NOT MODELLED, each a model error when a script touches it: cjson, bit,
 * struct, cmsgpack, math.random / randomseed (no randomness), redis.*
 * other than the four above. A script that raises a table without an err
 * field is a model error too (Redis 7.0.15 crashes on it).
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rm_lua_int.h"

/* ---- the Lua sink: a command's reply straight onto the Lua stack ---- */

static void lplaced(rm_lsink *s) {
  while (s->depth > 0) {
    int d = s->depth - 1;
    lua_rawseti(s->L, -2, (int)++s->idx[d]);
    if (--s->left[d] > 0)
      return;
    s->depth--; /* that table is complete: it goes into its parent */
  }
}

static void l_integer(void *st, long long v) {
  rm_lsink *s = st;
  lua_pushnumber(s->L, (lua_Number)v);
  lplaced(s);
}

static void l_bulk(void *st, const char *p, size_t n) {
  rm_lsink *s = st;
  lua_pushlstring(s->L, p, n);
  lplaced(s);
}

static void l_nil(void *st) {
  rm_lsink *s = st;
  lua_pushboolean(s->L, 0);
  lplaced(s);
}

static void l_field_table(rm_lsink *s, const char *field, const char *p,
                          size_t n) {
  lua_createtable(s->L, 0, 1);
  lua_pushlstring(s->L, p, n);
  lua_setfield(s->L, -2, field);
}

static void l_status(void *st, const char *p, size_t n) {
  rm_lsink *s = st;
  l_field_table(s, "ok", p, n);
  lplaced(s);
}

static void l_error(void *st, const char *p, size_t n) {
  rm_lsink *s = st;
  l_field_table(s, "err", p, n);
  if (s->depth == 0)
    s->top_error = 1;
  lplaced(s);
}

static void l_array(void *st, size_t n) {
  rm_lsink *s = st;
  lua_createtable(s->L, (int)n, 0);
  if (n == 0) {
    lplaced(s);
    return;
  }
  if (s->depth == (int)(sizeof s->left / sizeof s->left[0]))
    luaL_error(s->L, "redis model: reply nested too deep");
  s->left[s->depth] = n;
  s->idx[s->depth] = 0;
  s->depth++;
}

const rm_sink rm_lua_sink = {l_integer, l_bulk,  l_nil,  l_nil,
                             l_status,  l_error, l_array};

/* ---- redis.* ---- */

static rm_lua *self(lua_State *L) {
  return lua_touserdata(L, lua_upvalueindex(1));
}

/* An error table {err = text} on the stack. */
static void push_err(lua_State *L, const char *text) {
  lua_createtable(L, 0, 1);
  lua_pushstring(L, text);
  lua_setfield(L, -2, "err");
}

/* Converts the arguments 1..argc into l->av; 0, or -1 (not a string or a
 * number). */
static int lua_args(lua_State *L, rm_lua *l, int argc) {
  if ((size_t)argc > l->av_cap) {
    l->av_cap = (size_t)argc * 2;
    l->av = rm_xrealloc(l->av, l->av_cap * sizeof *l->av);
    l->num = rm_xrealloc(l->num, l->av_cap * sizeof *l->num);
  }
  for (int i = 0; i < argc; i++) {
    int t = lua_type(L, i + 1);
    if (t == LUA_TNUMBER) { /* not lua_tolstring: "%.14g" loses digits */
      size_t n = rm_fmt_lua_number(l->num[i], lua_tonumber(L, i + 1));
      l->av[i] = (rm_arg){l->num[i], n};
    } else if (t == LUA_TSTRING) {
      size_t n;
      const char *p = lua_tolstring(L, i + 1, &n);
      l->av[i] = (rm_arg){p, n};
    } else {
      return -1;
    }
  }
  return 0;
}

/* A model error raised in the script: never caught for good, since the
 * model remembers it (rm_command answers RM_EMODEL whatever the script
 * does with the error). */
static int model_raise(lua_State *L, rm_lua *l, const char *what_in) {
  char what[512]; /* what_in may be the model's own error text */
  snprintf(what, sizeof what, "%s", what_in);
  rm_model_note(l->m, "%s", what);
  lua_settop(L, 0);
  lua_pushfstring(L, "MODELERR %s", what);
  push_err(L, lua_tostring(L, -1));
  return lua_error(L);
}

/* The command check of Redis's scriptCall: 0 = run cmd; else an error
 * table is pushed (raise it or return it). */
static int check_cmd(lua_State *L, rm_lua *l, int argc, const rm_cmd **cmd) {
  int lk = rm_cmd_lookup(argc, l->av, cmd);
  if (lk == RM_LK_UNMODELLED) {
    char what[160];
    snprintf(what, sizeof what, "command '%.*s' is not modelled",
             (int)(l->av[0].len > 60 ? 60 : l->av[0].len), l->av[0].p);
    return model_raise(L, l, what);
  }
  if (lk == RM_LK_UNKNOWN || lk == RM_LK_UNKNOWN_SUB) {
    push_err(L, "ERR Unknown Redis command called from script");
    return -1;
  }
  if (!rm_cmd_arity_ok(*cmd, argc)) {
    push_err(L, "ERR Wrong number of args calling Redis command from script");
    return -1;
  }
  if ((*cmd)->flags & RM_CMD_NOSCRIPT) {
    push_err(L, "ERR This Redis command is not allowed from script");
    return -1;
  }
  if (!(*cmd)->fn) {
    char what[160];
    snprintf(what, sizeof what, "command '%s' is not modelled", (*cmd)->name);
    return model_raise(L, l, what);
  }
  return 0;
}

static int redis_call(lua_State *L, int raise) {
  rm_lua *l = self(L);
  int argc = lua_gettop(L);
  const rm_cmd *cmd = NULL;
  if (argc == 0) {
    push_err(L, "ERR Please specify at least one argument for this redis "
                "lib call");
  } else if (lua_args(L, l, argc)) {
    push_err(L, "ERR Lua redis lib command arguments must be strings or "
                "integers");
  } else if (check_cmd(L, l, argc, &cmd) == 0) {
    rm_lsink st = {L, 0, {0}, {0}, 0};
    rm_ctx c = {l->m, argc, l->av, &rm_lua_sink, &st, 1};
    int before = l->m->running;
    l->m->running = 0;
    rm_cmd_run(&c, cmd);
    int failed = l->m->running;
    l->m->running |= before;
    if (failed) /* the command met something not modelled */
      return model_raise(L, l, l->m->model_err_text);
    if (!st.top_error || !raise)
      return 1;
    return lua_error(L);
  }
  return raise ? lua_error(L) : 1;
}

static int l_call(lua_State *L) { return redis_call(L, 1); }
static int l_pcall(lua_State *L) { return redis_call(L, 0); }

/* redis.error_reply(s) / redis.status_reply(s). */
static int l_error_reply(lua_State *L) {
  if (lua_gettop(L) != 1 || lua_type(L, -1) != LUA_TSTRING) {
    push_err(L, "ERR wrong number or type of arguments");
    return 1;
  }
  size_t n;
  const char *p = lua_tolstring(L, 1, &n);
  if (n && p[0] == '-')
    p++, n--;
  /* "CODE message": the code is the first word, or ERR when there is no
   * space; the message loses its leading and trailing CR/LF (Redis's
   * luaPushErrorBuff) */
  const char *sp = memchr(p, ' ', n);
  const char *code = sp ? p : "ERR";
  size_t cl = sp ? (size_t)(sp - p) : 3;
  const char *msg = sp ? sp + 1 : p;
  size_t ml = sp ? n - cl - 1 : n;
  while (ml && (msg[0] == '\r' || msg[0] == '\n'))
    msg++, ml--;
  while (ml && (msg[ml - 1] == '\r' || msg[ml - 1] == '\n'))
    ml--;
  lua_createtable(L, 0, 1);
  lua_pushlstring(L, code, cl);
  lua_pushstring(L, " ");
  lua_pushlstring(L, msg, ml);
  lua_concat(L, 3);
  lua_setfield(L, -2, "err");
  return 1;
}

static int l_status_reply(lua_State *L) {
  if (lua_gettop(L) != 1 || lua_type(L, -1) != LUA_TSTRING) {
    push_err(L, "ERR wrong number or type of arguments");
    return 1;
  }
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, 1);
  lua_setfield(L, -2, "ok");
  return 1;
}

/* __index of the redis table: any other field is not modelled. */
static int l_redis_index(lua_State *L) {
  rm_lua *l = self(L);
  char what[120];
  snprintf(what, sizeof what, "redis.%.60s is not modelled",
           lua_isstring(L, 2) ? lua_tostring(L, 2) : "?");
  return model_raise(L, l, what);
}

/* Redis's pcall: Lua's, except that an error table with a string err
 * field comes back as that string (what redis.call raises, caught by a
 * script's pcall, is the error text). */
static int l_pcall_global(lua_State *L) {
  int argc = lua_gettop(L);
  luaL_checkany(L, 1);
  lua_pushboolean(L, 1);
  lua_insert(L, 1);
  if (lua_pcall(L, argc - 1, LUA_MULTRET, 0)) {
    lua_remove(L, 1);
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "err");
      if (lua_isstring(L, -1))
        lua_replace(L, -2);
      else
        lua_pop(L, 1);
    }
    lua_pushboolean(L, 0);
    lua_insert(L, 1);
  }
  return lua_gettop(L);
}

/* ---- read-only globals ---- */

static int l_g_index(lua_State *L) {
  rm_lua *l = self(L);
  const char *n = lua_isstring(L, 2) ? lua_tostring(L, 2) : "?";
  static const char *const libs[] = {"cjson", "bit", "struct", "cmsgpack",
                                     NULL};
  for (int i = 0; libs[i]; i++)
    if (strcmp(n, libs[i]) == 0) {
      char what[80];
      snprintf(what, sizeof what, "the Lua library %s is not modelled", n);
      return model_raise(L, l, what);
    }
  luaL_where(L, 1);
  lua_pushfstring(L,
                  "Script attempted to access nonexistent global variable "
                  "'%s'",
                  n);
  lua_concat(L, 2);
  return lua_error(L);
}

static int l_g_newindex(lua_State *L) {
  luaL_where(L, 1);
  lua_pushstring(L, "Attempt to modify a readonly table");
  lua_concat(L, 2);
  return lua_error(L);
}

static int l_no_random(lua_State *L) {
  return model_raise(L, self(L), "math.random is not modelled (no randomness)");
}

/* ---- the error handler ---------------------------------------------------
 * As Redis's: the error becomes a table {err = ..., source = ..., line =
 * ...}; a string error gets the code ERR; where = the Lua function that
 * raised it (past a C function such as redis.call or error). */
static int l_handler(lua_State *L) {
  lua_Debug ar;
  int have = lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar);
  if (have && strcmp(ar.what, "C") == 0)
    have = lua_getstack(L, 2, &ar) && lua_getinfo(L, "Sl", &ar);
  if (!lua_istable(L, 1)) {
    const char *s = lua_isstring(L, 1) ? lua_tostring(L, 1)
                    : lua_isnil(L, 1)  ? "nil"
                    : lua_isboolean(L, 1)
                        ? (lua_toboolean(L, 1) ? "true" : "false")
                        : luaL_typename(L, 1);
    lua_createtable(L, 0, 3);
    lua_pushfstring(L, "ERR %s", s);
    lua_setfield(L, -2, "err");
    lua_replace(L, 1);
  }
  if (have) {
    lua_pushstring(L, ar.source);
    lua_setfield(L, 1, "source");
    lua_pushinteger(L, ar.currentline);
    lua_setfield(L, 1, "line");
  }
  lua_settop(L, 1);
  return 1;
}

/* ---- the state ---- */

static void open_lib(lua_State *L, lua_CFunction f, const char *name) {
  lua_pushcfunction(L, f);
  lua_pushstring(L, name);
  lua_call(L, 1, 0);
}

static void set_closure(lua_State *L, rm_lua *l, int idx, const char *name,
                        lua_CFunction f) {
  lua_pushlightuserdata(L, l);
  lua_pushcclosure(L, f, 1);
  lua_setfield(L, idx, name);
}

static void make_redis_table(lua_State *L, rm_lua *l) {
  lua_newtable(L);
  int t = lua_gettop(L);
  set_closure(L, l, t, "call", l_call);
  set_closure(L, l, t, "pcall", l_pcall);
  set_closure(L, l, t, "error_reply", l_error_reply);
  set_closure(L, l, t, "status_reply", l_status_reply);
  lua_newtable(L); /* its metatable */
  set_closure(L, l, lua_gettop(L), "__index", l_redis_index);
  lua_setmetatable(L, t);
  lua_setfield(L, LUA_GLOBALSINDEX, "redis");
}

lua_State *rm_lua_state_new(rm_lua *l) {
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "redis model: cannot create a Lua state\n");
    abort();
  }
  open_lib(L, luaopen_base, "");
  open_lib(L, luaopen_table, LUA_TABLIBNAME);
  open_lib(L, luaopen_string, LUA_STRLIBNAME);
  open_lib(L, luaopen_math, LUA_MATHLIBNAME);
  lua_pushnil(L);
  lua_setfield(L, LUA_GLOBALSINDEX, "dofile");
  lua_pushnil(L);
  lua_setfield(L, LUA_GLOBALSINDEX, "loadfile");
  lua_pushcfunction(L, l_pcall_global);
  lua_setfield(L, LUA_GLOBALSINDEX, "pcall");
  lua_getfield(L, LUA_GLOBALSINDEX, "math");
  set_closure(L, l, lua_gettop(L), "random", l_no_random);
  set_closure(L, l, lua_gettop(L), "randomseed", l_no_random);
  lua_pop(L, 1);
  make_redis_table(L, l);
  lua_pushcfunction(L, l_handler);
  l->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_newtable(L); /* the globals' metatable: read-only */
  set_closure(L, l, lua_gettop(L), "__index", l_g_index);
  lua_pushcfunction(L, l_g_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_setmetatable(L, LUA_GLOBALSINDEX);
  return L;
}

/* ---- Lua -> Redis ---- */

long long rm_lua_to_ll(double d) {
  if (isnan(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
    return (long long)(-9223372036854775807LL - 1);
  return (long long)d;
}

/* A string field of the table on top (rawget), or NULL. */
static const char *str_field(lua_State *L, const char *f, size_t *n) {
  lua_pushstring(L, f);
  lua_rawget(L, -2);
  const char *p =
      lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, n) : NULL;
  lua_pop(L, 1); /* the string stays alive: the table holds it */
  return p;
}

static void table_to_reply(lua_State *L, rm_ctx *c) {
  size_t n;
  const char *p;
  if ((p = str_field(L, "err", &n)) != NULL) {
    rm_out_error(c, "%.*s", (int)n, p);
    return;
  }
  if ((p = str_field(L, "ok", &n)) != NULL) {
    char *s = rm_xmemdup(p, n);
    for (size_t i = 0; i < n; i++)
      if (s[i] == '\r' || s[i] == '\n')
        s[i] = ' ';
    c->sink->status(c->st, s, n);
    free(s);
    return;
  }
  lua_pushstring(L, "double");
  lua_rawget(L, -2);
  if (lua_type(L, -1) == LUA_TNUMBER) {
    rm_out_double(c, lua_tonumber(L, -1));
    lua_pop(L, 1);
    return;
  }
  lua_pop(L, 1);
  static const char *const resp3[] = {"big_number", "map", "set",
                                      "verbatim_string", NULL};
  for (int i = 0; resp3[i]; i++) {
    lua_pushstring(L, resp3[i]);
    lua_rawget(L, -2);
    int has = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (has) {
      rm_model_fail(c, "a script's RESP3 reply table (%s) is not modelled",
                    resp3[i]);
      return;
    }
  }
  size_t len = 0;
  for (;; len++) {
    lua_rawgeti(L, -1, (int)len + 1);
    int end = lua_isnil(L, -1);
    lua_pop(L, 1);
    if (end)
      break;
  }
  rm_out_array(c, len);
  for (size_t i = 0; i < len; i++) {
    lua_rawgeti(L, -1, (int)i + 1);
    rm_lua_to_reply(L, c);
    lua_pop(L, 1);
  }
}

void rm_lua_to_reply(lua_State *L, rm_ctx *c) {
  if (!lua_checkstack(L, 4)) {
    rm_out_error(c, "ERR reached lua stack limit");
    return;
  }
  switch (lua_type(L, -1)) {
  case LUA_TSTRING: {
    size_t n;
    const char *p = lua_tolstring(L, -1, &n);
    rm_out_bulk(c, p, n);
    break;
  }
  case LUA_TBOOLEAN:
    if (lua_toboolean(L, -1))
      rm_out_int(c, 1);
    else
      rm_out_nil(c);
    break;
  case LUA_TNUMBER:
    rm_out_int(c, rm_lua_to_ll(lua_tonumber(L, -1)));
    break;
  case LUA_TTABLE:
    table_to_reply(L, c);
    break;
  default:
    rm_out_nil(c);
    break;
  }
}

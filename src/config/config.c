/*
 * config.c -- dlock_config_load and dlock_config_dispose: a YAML file in
 * Redisson's vocabulary (docs/config.md), read with libyaml's document API.
 *
 * It owns: the table of keys (which key sets which dlock_config field, which
 * Redisson keys are accepted and ignored, which are refused), ${VAR}
 * substitution, composing cfg->url from a server section's address(es),
 * credentials and database, and the memory a load allocates (the strings the
 * config points to, recorded in the private cfg->loaded). Every error names
 * FILE:LINE:COLUMN, 1-based. A load works on a copy of the config and
 * commits it only when the whole file was good; it writes no field past the
 * caller's recorded size (docs/abi.md).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "config/config.h"

/* A config file larger than this is not one. */
#define FILE_MAX (1u << 20)

/* Nor is one nested deeper than DEPTH_MAX (mappings and lists; Redisson's
 * files need 3), or with more than ANCHORS_MAX anchors or ALIASES_MAX
 * aliases. libyaml takes time quadratic in each: its scanner walks every
 * open flow level for each token, its loader compares each anchor and each
 * alias with every anchor before it. Seen: 40k '[' 1.4 s, 160k 24.9 s, 50k
 * anchors 34 s. With these bounds a load is linear in the file's size. */
#define DEPTH_MAX 32
#define ANCHORS_MAX 64
#define ALIASES_MAX 64

/* Where a key may appear. */
enum where {
  IN_ROOT = 1,
  IN_SINGLE = 2,
  IN_CLUSTER = 4,
  IN_SENTINEL = 8,
  IN_ETCD = 16 /* dlock's own etcdConfig: the etcd store (docs/etcd.md) */
};
#define IN_MULTI (IN_CLUSTER | IN_SENTINEL)
#define IN_SERVERS (IN_SINGLE | IN_MULTI | IN_ETCD)

enum kind {
  K_INT,       /* an int field; the lower bound is dlock_client_new's */
  K_VERIFY,    /* tls_verify from Redisson's sslVerificationMode */
  K_NAMES,     /* tls_verify from sslEnableEndpointIdentification: FULL or
                  CA_ONLY (the host-name check only; never the CA check) */
  K_SSLVERIFY, /* tls_verify from sslVerify: true is FULL; false refused */
  K_SYNC,      /* sync_replicas from checkLockSyncedSlaves: true -1, false 0 */
  K_FLAG,      /* an int field from true / false: 1 / 0 */
  K_STR,       /* a string field, copied */
  K_STORE,     /* a key store's URL or path (file: stripped), checked */
  K_INTERVAL,  /* retryInterval: retry_interval_ms, and the constant delay */
  K_DELAY,     /* retryDelay: a tagged delay strategy (retry_delay...) */
  K_ZERO,      /* a cluster's database: 0 only (dlock's cluster has db 0) */
  K_PART,      /* a string that goes into the URL (enum part) */
  K_DB,        /* the database, into the URL */
  K_LIST,      /* the list of addresses, into the URL */
  K_SECTION,   /* a server section (part = its IN_ bit) */
  K_IGNORED,   /* Redisson's, no use to dlock: any value is accepted */
  K_REFUSED    /* Redisson's, cannot be honoured: an error unless null */
};

/* The URL's pieces a server section gives. */
enum part {
  P_ADDRESS,
  P_USER,
  P_PASSWORD,
  P_MASTER,
  P_SUSER,
  P_SPASS,
  P_PREFIX,
  NPART
};

typedef struct key_def {
  const char *name;
  unsigned char where;
  unsigned char kind;
  unsigned char part; /* K_PART: enum part; K_SECTION: its IN_ bit */
  size_t off;         /* K_INT, K_VERIFY... K_SYNC, K_STR: the field */
  const char *field;  /* the field's name; K_REFUSED: why */
} key_def;

#define FIELD(f) offsetof(dlock_config, f), #f
#define IGNORED(name, where)                                                   \
  { name, where, K_IGNORED, 0, 0, NULL }

/* Every property of Redisson's Config, BaseConfig,
 * BaseMasterSlaveServersConfig, SingleServerConfig, SentinelServersConfig
 * and ClusterServersConfig, current and removed ones (read from Redisson's
 * sources, 3.0 to 4.x), and dlock's own keys. Redisson's Config also
 * carries the connection settings (username, password, ssl*, tcp*...) at
 * the top level since 4.0; a server section's value wins over them. */
#define IN_ANY (IN_ROOT | IN_SERVERS)
static const key_def g_keys[] = {
    {"lockWatchdogTimeout", IN_ROOT, K_INT, 0, FIELD(watchdog_timeout_ms)},
    {"singleServerConfig", IN_ROOT, K_SECTION, IN_SINGLE, 0, NULL},
    {"clusterServersConfig", IN_ROOT, K_SECTION, IN_CLUSTER, 0, NULL},
    {"sentinelServersConfig", IN_ROOT, K_SECTION, IN_SENTINEL, 0, NULL},
    /* dlock's own: the etcd store, endpoints etcd://h:p (or http://h:p),
     * the key prefix */
    {"etcdConfig", IN_ROOT, K_SECTION, IN_ETCD, 0, NULL},
    {"endpoints", IN_ETCD, K_LIST, 0, 0, NULL},
    {"prefix", IN_ETCD, K_PART, P_PREFIX, 0, NULL},
    {"address", IN_SINGLE, K_PART, P_ADDRESS, 0, NULL},
    {"nodeAddresses", IN_CLUSTER, K_LIST, 0, 0, NULL},
    {"sentinelAddresses", IN_SENTINEL, K_LIST, 0, 0, NULL},
    {"masterName", IN_SENTINEL, K_PART, P_MASTER, 0, NULL},
    {"username", IN_ANY, K_PART, P_USER, 0, NULL},
    {"password", IN_ANY, K_PART, P_PASSWORD, 0, NULL},
    {"sentinelUsername", IN_SENTINEL, K_PART, P_SUSER, 0, NULL},
    {"sentinelPassword", IN_SENTINEL, K_PART, P_SPASS, 0, NULL},
    {"database", IN_SINGLE | IN_SENTINEL, K_DB, 0, 0, NULL},
    {"database", IN_CLUSTER, K_ZERO, 0, 0, NULL},
    {"connectTimeout", IN_SERVERS, K_INT, 0, FIELD(connect_timeout_ms)},
    {"timeout", IN_SERVERS, K_INT, 0, FIELD(command_timeout_ms)},
    {"retryAttempts", IN_SERVERS, K_INT, 0, FIELD(retry_attempts)},
    {"retryInterval", IN_SERVERS, K_INTERVAL, 0, FIELD(retry_interval_ms)},
    {"retryDelay", IN_SERVERS, K_DELAY, 0, FIELD(retry_delay)},
    {"connectionPoolSize", IN_SINGLE, K_INT, 0, FIELD(pool_size)},
    {"masterConnectionPoolSize", IN_MULTI, K_INT, 0, FIELD(pool_size)},
    /* dlock's own (PEM files; Redisson has no such keys): also at the top
     * level, for a dlock-only second file (docs/config.md) */
    {"sslCaFile", IN_ANY, K_STR, 0, FIELD(tls_ca_file)},
    {"sslCaDir", IN_ANY, K_STR, 0, FIELD(tls_ca_dir)},
    {"sslCertFile", IN_ANY, K_STR, 0, FIELD(tls_cert_file)},
    {"sslKeyFile", IN_ANY, K_STR, 0, FIELD(tls_key_file)},
    {"sslServerName", IN_ANY, K_STR, 0, FIELD(tls_server_name)},
    {"sslVerify", IN_ANY, K_SSLVERIFY, 0, FIELD(tls_verify)},
    {"clientName", IN_SERVERS, K_STR, 0, FIELD(client_name)},
    {"sslEnableEndpointIdentification", IN_ANY, K_NAMES, 0, FIELD(tls_verify)},
    {"sslVerificationMode", IN_ANY, K_VERIFY, 0, FIELD(tls_verify)},
    {"sslTruststore", IN_ANY, K_STORE, 0, FIELD(tls_truststore)},
    {"sslTruststorePassword", IN_ANY, K_STR, 0, FIELD(tls_truststore_password)},
    {"sslKeystore", IN_ANY, K_STORE, 0, FIELD(tls_keystore)},
    {"sslKeystorePassword", IN_ANY, K_STR, 0, FIELD(tls_keystore_password)},
    {"masterSlaveServersConfig", IN_ROOT, K_REFUSED, 0, 0,
     "not supported: use singleServerConfig, clusterServersConfig or "
     "sentinelServersConfig"},
    {"replicatedServersConfig", IN_ROOT, K_REFUSED, 0, 0,
     "not supported: use singleServerConfig, clusterServersConfig or "
     "sentinelServersConfig"},
    {"checkLockSyncedSlaves", IN_ROOT, K_SYNC, 0, FIELD(sync_replicas)},
    {"slavesSyncTimeout", IN_ROOT, K_INT, 0, FIELD(sync_timeout_ms)},
    /* dlock's own: "at least n replicas" has no Redisson key */
    {"syncReplicas", IN_ROOT, K_INT, 0, FIELD(sync_replicas)},
    /* Config */
    IGNORED("threads", IN_ROOT),
    IGNORED("nettyThreads", IN_ROOT),
    IGNORED("nettyExecutor", IN_ROOT),
    IGNORED("executor", IN_ROOT),
    IGNORED("eventLoopGroup", IN_ROOT),
    IGNORED("codec", IN_ROOT),
    IGNORED("codecProvider", IN_ROOT),
    IGNORED("referenceCodecProvider", IN_ROOT),
    IGNORED("resolverProvider", IN_ROOT),
    IGNORED("transportMode", IN_ROOT),
    IGNORED("useLinuxNativeEpoll", IN_ROOT),
    IGNORED("referenceEnabled", IN_ROOT),
    IGNORED("redissonReferenceEnabled", IN_ROOT),
    IGNORED("decodeInExecutor", IN_ROOT),
    IGNORED("keepPubSubOrder", IN_ROOT),
    IGNORED("useScriptCache", IN_ROOT),
    IGNORED("minCleanUpDelay", IN_ROOT),
    IGNORED("maxCleanUpDelay", IN_ROOT),
    IGNORED("cleanUpKeysAmount", IN_ROOT),
    IGNORED("lazyInitialization", IN_ROOT),
    IGNORED("protocol", IN_ROOT),
    IGNORED("valkeyCapabilities", IN_ROOT),
    IGNORED("lockWatchdogBatchSize", IN_ROOT),
    IGNORED("fairLockWaitTimeout", IN_ROOT),
    /* dlock's own: a waiting mutex spins when SUBSCRIBE is refused */
    {"spinFallback", IN_ROOT, K_FLAG, 0, FIELD(spin_fallback)},
    /* dlock's own: the bound of a command's retries (issue 39) */
    {"callTimeout", IN_ROOT, K_INT, 0, FIELD(call_timeout_ms)},
    IGNORED("reliableTopicWatchdogTimeout", IN_ROOT),
    IGNORED("useThreadClassLoader", IN_ROOT),
    IGNORED("nettyHook", IN_ROOT),
    IGNORED("addressResolverGroupFactory", IN_ROOT),
    IGNORED("connectionListener", IN_ROOT),
    IGNORED("tcpKeepAlive", IN_ROOT),
    /* Config and BaseConfig */
    IGNORED("credentialsResolver", IN_ANY),
    IGNORED("nameMapper", IN_ANY),
    IGNORED("commandMapper", IN_ANY),
    IGNORED("sslProvider", IN_ANY),
    IGNORED("sslProtocols", IN_ANY),
    IGNORED("sslCiphers", IN_ANY),
    IGNORED("sslKeystoreType", IN_ANY),
    IGNORED("sslTrustManagerFactory", IN_ANY),
    IGNORED("sslKeyManagerFactory", IN_ANY),
    IGNORED("tcpNoDelay", IN_ANY),
    IGNORED("tcpKeepAliveCount", IN_ANY),
    IGNORED("tcpKeepAliveIdle", IN_ANY),
    IGNORED("tcpKeepAliveInterval", IN_ANY),
    IGNORED("tcpUserTimeout", IN_ANY),
    /* BaseConfig */
    IGNORED("idleConnectionTimeout", IN_SERVERS),
    IGNORED("subscriptionsPerConnection", IN_SERVERS),
    IGNORED("subscriptionTimeout", IN_SERVERS),
    IGNORED("pingConnectionInterval", IN_SERVERS),
    IGNORED("pingConnection", IN_SERVERS),
    IGNORED("pingTimeout", IN_SERVERS),
    IGNORED("keepAlive", IN_SERVERS),
    IGNORED("reconnectionDelay", IN_SERVERS),
    IGNORED("reconnectionTimeout", IN_SERVERS),
    IGNORED("failedAttempts", IN_SERVERS),
    IGNORED("credentialsReapplyInterval", IN_SERVERS),
    /* BaseMasterSlaveServersConfig and SingleServerConfig */
    IGNORED("subscriptionConnectionMinimumIdleSize", IN_SERVERS),
    IGNORED("subscriptionConnectionPoolSize", IN_SERVERS),
    IGNORED("dnsMonitoringInterval", IN_SERVERS),
    IGNORED("dnsMonitoringTimes", IN_SERVERS),
    IGNORED("dnsMonitoring", IN_SINGLE),
    IGNORED("connectionMinimumIdleSize", IN_SINGLE),
    IGNORED("masterConnectionMinimumIdleSize", IN_MULTI),
    IGNORED("slaveConnectionMinimumIdleSize", IN_MULTI),
    IGNORED("slaveConnectionPoolSize", IN_MULTI),
    IGNORED("slaveSubscriptionConnectionMinimumIdleSize", IN_MULTI),
    IGNORED("slaveSubscriptionConnectionPoolSize", IN_MULTI),
    IGNORED("failedSlaveReconnectionInterval", IN_MULTI),
    IGNORED("failedSlaveCheckInterval", IN_MULTI),
    IGNORED("failedSlaveNodeDetector", IN_MULTI),
    IGNORED("fallbackLoadingToMaster", IN_MULTI),
    IGNORED("readMode", IN_MULTI),
    IGNORED("subscriptionMode", IN_MULTI),
    IGNORED("loadBalancer", IN_MULTI),
    /* SentinelServersConfig and ClusterServersConfig */
    IGNORED("scanInterval", IN_MULTI),
    IGNORED("natMapper", IN_MULTI),
    IGNORED("natMap", IN_MULTI),
    IGNORED("checkSlotsCoverage", IN_CLUSTER),
    IGNORED("checkMasterLinkStatus", IN_CLUSTER),
    IGNORED("shardedSubscriptionMode", IN_CLUSTER),
    IGNORED("checkSentinelsList", IN_SENTINEL),
    IGNORED("checkSlaveStatusWithSyncing", IN_SENTINEL),
    IGNORED("sentinelsDiscovery", IN_SENTINEL),
};
#define NKEYS (sizeof g_keys / sizeof g_keys[0])

/* The string fields a load may set; loaded_mem.str[i] is what the field at
 * g_str_off[i] points to. */
static const size_t g_str_off[] = {
    offsetof(dlock_config, url),
    offsetof(dlock_config, tls_ca_file),
    offsetof(dlock_config, tls_ca_dir),
    offsetof(dlock_config, tls_cert_file),
    offsetof(dlock_config, tls_key_file),
    offsetof(dlock_config, tls_server_name),
    offsetof(dlock_config, client_name),
    offsetof(dlock_config, tls_truststore),
    offsetof(dlock_config, tls_truststore_password),
    offsetof(dlock_config, tls_keystore),
    offsetof(dlock_config, tls_keystore_password)};
#define NSTR (sizeof g_str_off / sizeof g_str_off[0])

/* What cfg->loaded points to. */
typedef struct loaded_mem {
  char *str[NSTR];
  const char *key[NSTR]; /* the YAML key that set str[i] (for messages) */
  char *ignored; /* "FILE:L:C: 'key' ...\n" per Redisson setting ignored */
} loaded_mem;

typedef struct loader {
  const char *path;
  dlock__sb text; /* the file */
  yaml_parser_t parser;
  yaml_document_t doc;
  dlock_config cfg; /* the working copy, this library's layout */
  size_t size;      /* the caller's struct: bytes that may be written */
  loaded_mem *mem;  /* what this load allocated (and carried over) */
  unsigned section; /* IN_SINGLE...; 0: none yet */
  const char *section_name;
  yaml_mark_t section_mark;
  char *part[NPART];
  yaml_mark_t part_mark[NPART];
  yaml_node_t *list; /* nodeAddresses / sentinelAddresses */
  long db;           /* -1: not set */
  int had_url;       /* cfg->url was set before this load */
  int pass;          /* the top level: 0 its own keys, 1 the section */
  dlock__sb ignored; /* this load's Redisson settings that do nothing */
  const yaml_node_t *cert_key, *key_key; /* sslCertFile / sslKeyFile */
} loader;

/* Whether the caller's struct holds the field of `width` bytes at off. */
static int fits(const loader *ld, size_t off, size_t width) {
  return off + width <= ld->size;
}
#define FIELD_OFF(f) offsetof(dlock_config, f)
#define FITS(ld, f) fits(ld, FIELD_OFF(f), sizeof(((dlock_config *)0)->f))

static void *field_at(dlock_config *cfg, size_t off) {
  return (char *)cfg + off;
}

/* DLOCK_EINVAL with "FILE:LINE:COLUMN: what" (libyaml counts from 0). */
static int at(const loader *ld, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int at(const loader *ld, yaml_mark_t m, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  (void)dlock__fail(DLOCK_EINVAL, "%s:%lu:%lu: %s", ld->path,
                    (unsigned long)m.line + 1, (unsigned long)m.column + 1,
                    what);
  return DLOCK_EINVAL; /* not dlock__fail's value: the analyzer sees this */
}

static yaml_mark_t mark_start(void) {
  yaml_mark_t m = {0, 0, 0};
  return m;
}

static int oom(void) {
  (void)dlock__fail(DLOCK_ENOMEM, "out of memory loading the config file");
  return DLOCK_ENOMEM;
}

static const char *text_of(const yaml_node_t *n) {
  return (const char *)n->data.scalar.value;
}

static const char *type_name(const yaml_node_t *n) {
  return n->type == YAML_MAPPING_NODE    ? "mapping"
         : n->type == YAML_SEQUENCE_NODE ? "list"
                                         : "scalar";
}

/* "at the top level", "in singleServerConfig"... (the lowest bit set). */
static const char *where_name(unsigned where) {
  return where & IN_ROOT       ? "at the top level"
         : where & IN_SINGLE   ? "in singleServerConfig"
         : where & IN_CLUSTER  ? "in clusterServersConfig"
         : where & IN_SENTINEL ? "in sentinelServersConfig"
                               : "in etcdConfig";
}

/* null, ~ or nothing, unquoted: the key is as good as absent. */
static int is_null(const yaml_node_t *n) {
  if (n->type != YAML_SCALAR_NODE ||
      n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return 0;
  const char *s = text_of(n);
  return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
         strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* ---- memory ----------------------------------------------------------- */

static void mem_free(loaded_mem *m) {
  if (!m)
    return;
  for (size_t i = 0; i < NSTR; i++)
    free(m->str[i]);
  free(m->ignored);
  free(m);
}

static size_t str_slot(size_t off) {
  size_t i = 0;
  while (i < NSTR - 1 && g_str_off[i] != off)
    i++;
  return i;
}

/* The string field at off now points to s, which the load owns; key: the
 * YAML key that set it. */
static void set_str(loader *ld, size_t off, char *s, const char *key) {
  size_t i = str_slot(off);
  free(ld->mem->str[i]);
  ld->mem->str[i] = s;
  ld->mem->key[i] = key;
  memcpy(field_at(&ld->cfg, off), &s, sizeof s);
}

/* The previous load's memory, if the caller's struct records one. */
static loaded_mem *previous(const dlock_config *cfg, size_t size) {
  if (FIELD_OFF(loaded) + sizeof cfg->loaded > size)
    return NULL;
  return cfg->loaded;
}

/* The working copy of cfg, with the strings a previous load set copied into
 * this load's memory: keys this file does not set keep their values when
 * the previous load's memory is freed at commit. */
static int loader_init(loader *ld, const char *path, const dlock_config *cfg) {
  memset(ld, 0, sizeof *ld);
  ld->path = path;
  ld->db = -1;
  dlock__sb_init(&ld->text);
  dlock__sb_init(&ld->ignored);
  ld->size = cfg->abi_size < sizeof ld->cfg ? cfg->abi_size : sizeof ld->cfg;
  dlock_config_init_sized(&ld->cfg, sizeof ld->cfg);
  memcpy(&ld->cfg, cfg, ld->size);
  if (!(ld->mem = dlock__calloc(1, sizeof *ld->mem)))
    return oom();
  const loaded_mem *old = previous(cfg, ld->size);
  for (size_t i = 0; old && i < NSTR; i++) {
    const char *cur;
    if (!old->str[i] || !fits(ld, g_str_off[i], sizeof cur))
      continue;
    memcpy(&cur, field_at(&ld->cfg, g_str_off[i]), sizeof cur);
    if (cur != old->str[i])
      continue;
    char *copy = dlock__strdup(cur);
    if (!copy)
      return oom();
    set_str(ld, g_str_off[i], copy, old->key[i]);
  }
  if (old && old->ignored) /* the earlier file's, reported with these */
    dlock__sb_adds(&ld->ignored, old->ignored);
  ld->had_url = ld->cfg.url != NULL;
  return 0;
}

static void loader_free(loader *ld) {
  mem_free(ld->mem);
  for (int i = 0; i < NPART; i++)
    free(ld->part[i]);
  yaml_document_delete(&ld->doc);
  yaml_parser_delete(&ld->parser);
  dlock__sb_free(&ld->text);
  dlock__sb_free(&ld->ignored);
}

/* ---- reading and parsing ------------------------------------------------ */

static int read_file(loader *ld) {
  FILE *f = fopen(ld->path, "rb");
  if (!f)
    return at(ld, mark_start(), "cannot open the file: %s", strerror(errno));
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0 && ld->text.len + n <= FILE_MAX)
    dlock__sb_add(&ld->text, buf, n);
  int err = ferror(f) ? errno : 0;
  fclose(f);
  if (err)
    return at(ld, mark_start(), "cannot read the file: %s", strerror(err));
  if (n > 0)
    return at(ld, mark_start(), "larger than %u bytes: not a config file",
              FILE_MAX);
  return ld->text.oom ? oom() : 0;
}

/* The mark of byte offset off of the file (reader errors give only that). */
static yaml_mark_t mark_of_offset(const loader *ld, size_t off) {
  yaml_mark_t m = {off, 0, 0};
  for (size_t i = 0; i < off && i < ld->text.len; i++) {
    if (ld->text.p[i] == '\n') {
      m.line++;
      m.column = 0;
    } else {
      m.column++;
    }
  }
  return m;
}

static int syntax_error(const loader *ld) {
  const yaml_parser_t *p = &ld->parser;
  if (p->error == YAML_MEMORY_ERROR)
    return oom();
  yaml_mark_t m = p->error == YAML_READER_ERROR
                      ? mark_of_offset(ld, p->problem_offset)
                      : p->problem_mark;
  const char *problem = p->problem ? p->problem : "malformed";
  if (!p->context)
    return at(ld, m, "YAML syntax error: %s", problem);
  return at(ld, m, "YAML syntax error: %s (%s at line %lu, column %lu)",
            problem, p->context, (unsigned long)p->context_mark.line + 1,
            (unsigned long)p->context_mark.column + 1);
}

/* The anchor or alias of event e, if it has one. */
static int has_anchor(const yaml_event_t *e) {
  return (e->type == YAML_SCALAR_EVENT && e->data.scalar.anchor) ||
         (e->type == YAML_SEQUENCE_START_EVENT &&
          e->data.sequence_start.anchor) ||
         (e->type == YAML_MAPPING_START_EVENT && e->data.mapping_start.anchor);
}

/* The bounds above, checked over libyaml's events before the document is
 * built: the event parser stops at the first level past DEPTH_MAX, so the
 * scanner never holds more open levels than that (plus its lookahead of a
 * simple key, at most 1024 characters). 0, or the error at the event that
 * crosses a bound. A syntax error is left to the load, which meets the
 * same error (in linear time: what precedes it is within the bounds). */
static int check_bounds(loader *ld) {
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p))
    return oom();
  yaml_parser_set_input_string(&p, (const unsigned char *)ld->text.p,
                               ld->text.len);
  int depth = 0, anchors = 0, aliases = 0, rc = 0;
  for (int done = 0; !done && !rc;) {
    yaml_event_t e;
    if (!yaml_parser_parse(&p, &e)) {
      rc = p.error == YAML_MEMORY_ERROR ? oom() : 0;
      break;
    }
    done = e.type == YAML_STREAM_END_EVENT;
    if (e.type == YAML_SEQUENCE_START_EVENT ||
        e.type == YAML_MAPPING_START_EVENT) {
      if (++depth > DEPTH_MAX)
        rc = at(ld, e.start_mark,
                "nested deeper than %d levels of lists and mappings: not a "
                "config file",
                DEPTH_MAX);
    } else if (e.type == YAML_SEQUENCE_END_EVENT ||
               e.type == YAML_MAPPING_END_EVENT) {
      depth--;
    }
    if (!rc && has_anchor(&e) && ++anchors > ANCHORS_MAX)
      rc = at(ld, e.start_mark,
              "more than %d anchors (&name): not a config file", ANCHORS_MAX);
    if (!rc && e.type == YAML_ALIAS_EVENT && ++aliases > ALIASES_MAX)
      rc = at(ld, e.start_mark,
              "more than %d aliases (*name): not a config file", ALIASES_MAX);
    yaml_event_delete(&e);
  }
  yaml_parser_delete(&p);
  return rc;
}

/* The root of the file's one document (a mapping), or NULL with *rc set
 * (*rc is 0 on entry). */
static yaml_node_t *parse(loader *ld, int *rc) {
  if ((*rc = check_bounds(ld)) != 0)
    return NULL;
  if (!yaml_parser_initialize(&ld->parser))
    return *rc = oom(), NULL;
  yaml_parser_set_input_string(&ld->parser, (const unsigned char *)ld->text.p,
                               ld->text.len);
  yaml_document_t next;
  if (!yaml_parser_load(&ld->parser, &ld->doc) ||
      !yaml_parser_load(&ld->parser, &next))
    return *rc = syntax_error(ld), NULL;
  yaml_node_t *second = yaml_document_get_root_node(&next);
  yaml_mark_t second_mark = second ? second->start_mark : mark_start();
  yaml_document_delete(&next);
  yaml_node_t *root = yaml_document_get_root_node(&ld->doc);
  if (second)
    *rc = at(ld, second_mark,
             "a second YAML document: the file must hold only one");
  else if (!root)
    *rc = at(ld, mark_start(),
             "empty: expected singleServerConfig, clusterServersConfig or "
             "sentinelServersConfig");
  else if (root->type != YAML_MAPPING_NODE)
    *rc = at(ld, root->start_mark,
             "the top level must be a mapping of keys "
             "(lockWatchdogTimeout, singleServerConfig...), not a %s",
             type_name(root));
  return *rc ? NULL : root;
}

/* ---- keys --------------------------------------------------------------- */

static const key_def *find_key(const char *name, unsigned where) {
  for (size_t i = 0; i < NKEYS; i++)
    if ((g_keys[i].where & where) && strcmp(g_keys[i].name, name) == 0)
      return &g_keys[i];
  return NULL;
}

/* Case-insensitive edit distance, or a large number for long words. */
static size_t distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b), row[64];
  if (la >= 64 || lb >= 64)
    return SIZE_MAX;
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t same =
          tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
      size_t best = diag + !same;
      if (up + 1 < best)
        best = up + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

/* The key of `where` closest to name, if it is close enough to be a typo. */
static const key_def *closest(const char *name, unsigned where) {
  const key_def *best = NULL;
  size_t best_d = strlen(name) < 6 ? 2 : 3;
  for (size_t i = 0; i < NKEYS; i++) {
    size_t d =
        (g_keys[i].where & where) ? distance(name, g_keys[i].name) : SIZE_MAX;
    if (d < best_d) {
      best = &g_keys[i];
      best_d = d;
    }
  }
  return best;
}

static int unknown_key(const loader *ld, unsigned where, const yaml_node_t *k) {
  const char *name = text_of(k);
  const key_def *other = find_key(name, ~where & (IN_ROOT | IN_SERVERS));
  if (other)
    return at(ld, k->start_mark, "'%s' does not belong %s (it belongs %s)",
              name, where_name(where), where_name(other->where));
  const key_def *near = closest(name, where);
  if (near)
    return at(ld, k->start_mark, "unknown key '%s' %s (did you mean '%s'?)",
              name, where_name(where), near->name);
  return at(ld, k->start_mark,
            "unknown key '%s' %s (docs/config.md lists the keys)", name,
            where_name(where));
}

/* ---- values ------------------------------------------------------------- */

#define VAR_CHARS                                                              \
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_."

/* Appends the value of the ${NAME} or ${NAME:-default} whose NAME starts at
 * p; *end = the byte after its '}'. */
static int expand_var(const loader *ld, const yaml_node_t *v, const char *key,
                      const char *p, dlock__sb *b, const char **end) {
  size_t n = strspn(p, VAR_CHARS);
  const char *def = n && strncmp(p + n, ":-", 2) == 0 ? p + n + 2 : NULL;
  const char *close = def ? strchr(def, '}') : p[n] == '}' ? p + n : NULL;
  if (n == 0 || !close)
    return at(ld, v->start_mark,
              "'%s': malformed ${...}: expected ${NAME} or ${NAME:-default} "
              "(NAME of letters, digits, _ and .; $${ is a literal ${)",
              key);
  char name[128];
  if (n >= sizeof name)
    return at(ld, v->start_mark, "'%s': variable name too long", key);
  memcpy(name, p, n);
  name[n] = '\0';
  const char *val = getenv(name);
  if (!val && !def)
    return at(ld, v->start_mark, "'%s': environment variable %s is not set",
              key, name);
  if (val)
    dlock__sb_adds(b, val);
  else
    dlock__sb_add(b, def, (size_t)(close - def));
  *end = close + 1;
  return 0;
}

/* *out = the scalar's text with ${...} replaced (a new string). */
static int expand(const loader *ld, const yaml_node_t *v, const char *key,
                  char **out) {
  const char *s = text_of(v);
  dlock__sb b;
  dlock__sb_init(&b);
  int rc = 0;
  while (*s && rc == 0) {
    const char *dollar = strchr(s, '$');
    if (!dollar) {
      dlock__sb_adds(&b, s);
      break;
    }
    dlock__sb_add(&b, s, (size_t)(dollar - s));
    if (strncmp(dollar, "$${", 3) == 0) {
      dlock__sb_add(&b, "${", 2);
      s = dollar + 3;
    } else if (dollar[1] == '{') {
      rc = expand_var(ld, v, key, dollar + 2, &b, &s);
    } else {
      dlock__sb_add(&b, "$", 1);
      s = dollar + 1;
    }
  }
  if (rc == 0 && (b.oom || !(*out = dlock__strndup(b.p, b.len))))
    rc = oom();
  dlock__sb_free(&b);
  return rc;
}

/* A decimal integer in [lo, hi]; -1 with *v untouched if not one. */
static int parse_long(const char *s, long lo, long hi, long *v) {
  const char *digits = *s == '-' ? s + 1 : s;
  if (!isdigit((unsigned char)*digits))
    return -1;
  char *end = NULL;
  errno = 0;
  long x = strtol(s, &end, 10);
  if (*end || errno || x < lo || x > hi)
    return -1;
  *v = x;
  return 0;
}

/* 1 / 0 from true / false; tls_verify from sslVerificationMode's words
 * (DLOCK_TLS_VERIFY_* are their values). -1 if s is none of them. */
static int parse_flag(const key_def *d, const char *s, int *v) {
  static const char *const words[][2] = {
      {"false", "true"}, {"False", "True"}, {"FALSE", "TRUE"}};
  static const struct {
    const char *word;
    int mode;
  } modes[] = {{"NONE", DLOCK_TLS_VERIFY_NONE},
               {"STRICT", DLOCK_TLS_VERIFY_FULL},
               {"CA_ONLY", DLOCK_TLS_VERIFY_CA_ONLY}};
  if (d->kind == K_VERIFY) {
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
      if (strcmp(s, modes[i].word) == 0)
        return *v = modes[i].mode, 0;
    return -1;
  }
  for (int yes = 0; yes < 2; yes++)
    for (size_t i = 0; i < 3; i++)
      if (strcmp(s, words[i][yes]) == 0)
        return *v = yes, 0;
  return -1;
}

static int bad_value(const loader *ld, const yaml_node_t *v, const key_def *d,
                     const char *s) {
  long lo = d->kind == K_DB ? 0 : dlock__config_int_min(d->off);
  long hi = d->kind == K_DB ? DLOCK__DB_MAX : INT_MAX;
  if (d->kind == K_VERIFY)
    return at(ld, v->start_mark,
              "'%s' must be STRICT, CA_ONLY or NONE, not '%.40s'", d->name, s);
  if (d->kind != K_INT && d->kind != K_DB && d->kind != K_INTERVAL)
    return at(ld, v->start_mark, "'%s' must be true or false, not '%.40s'",
              d->name, s);
  return at(ld, v->start_mark,
            "'%s' must be an integer from %ld to %ld, not "
            "'%.40s'",
            d->name, lo, hi, s);
}

/* ---- key stores, durations, delay strategies ----------------------------- */

/* sslTruststore / sslKeystore: Redisson's URL (file:/path, file:///path,
 * file:relative) or a plain path; the file must be a PKCS12 store -- a Java
 * keystore is refused here, naming the key, with the command that converts
 * it. A file that cannot be read is left to dlock_client_new (a redis://
 * server never needs it). The field gets the plain path. */
static int set_store(loader *ld, const key_def *d, const yaml_node_t *v,
                     char *s) {
  size_t scheme =
      strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                "0123456789+.-");
  if (scheme > 1 && s[scheme] == ':' && strncmp(s, "file:", 5) != 0) {
    int rc = at(ld, v->start_mark,
                "'%s': '%.60s' is not a file: dlock reads a key store from a "
                "file: URL (file:/path/to/store.p12) or a path",
                d->name, s);
    free(s);
    return rc;
  }
  const char *path = dlock__store_path(s);
  char *copy = dlock__strdup(path);
  free(s);
  if (!copy)
    return oom();
  /* A store this host cannot read: an error only if TLS needs it. */
  FILE *f = fopen(copy, "rb");
  unsigned char head[4];
  size_t n = f ? fread(head, 1, sizeof head, f) : 0;
  if (f)
    fclose(f);
  const char *kind;
  if (dlock__store_java_kind(head, n, &kind)) {
    char hint[1024];
    dlock__store_java_hint(hint, sizeof hint, d->name, copy, kind);
    int rc = at(ld, v->start_mark, "%s", hint);
    free(copy);
    return rc;
  }
  set_str(ld, d->off, copy, d->name);
  return 0;
}

/* Digits with an optional fraction ("1", "0.25"), as nanoseconds of unit
 * (ns per 1). -1 if s starts with none. *s moves past them. */
static int parse_amount(const char **s, int64_t unit, int64_t *ns) {
  const char *p = *s;
  int64_t whole = 0, frac = 0, scale = 1;
  if (!isdigit((unsigned char)*p))
    return -1;
  for (; isdigit((unsigned char)*p); p++)
    if ((whole = whole * 10 + (*p - '0')) > 100000000)
      return -1; /* far beyond any delay */
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p))
      return -1;
    for (; isdigit((unsigned char)*p); p++)
      if (scale < 1000000000) {
        frac = frac * 10 + (*p - '0');
        scale *= 10;
      }
  }
  if (whole > INT64_MAX / unit - 1)
    return -1;
  *ns = whole * unit + (int64_t)((double)frac * (double)unit / (double)scale);
  *s = p;
  return 0;
}

/* A java.time.Duration as Redisson's files write it: ISO-8601 (PT1S,
 * PT0.1S, PT1M30S, P1DT2H; what Duration.toString gives), or a number of
 * seconds (Jackson's form: 2, 1.5). *ms = whole milliseconds (truncated,
 * as Duration.toMillis). -1 if s is neither, or negative, or above
 * INT_MAX ms. */
static int parse_duration(const char *s, long *ms) {
  static const int64_t S = 1000000000;
  int64_t ns = 0, part;
  const char *p = s;
  if (*p != 'P' && *p != 'p') {
    if (parse_amount(&p, S, &ns) || *p)
      return -1;
  } else {
    int any = 0;
    p++;
    if (isdigit((unsigned char)*p)) {
      if (parse_amount(&p, 86400 * S, &part) || (*p != 'D' && *p != 'd'))
        return -1;
      ns += part;
      p++;
      any = 1;
    }
    if (*p == 'T' || *p == 't') {
      p++;
      static const struct {
        char unit;
        int64_t ns;
      } u[] = {{'H', 3600 * S}, {'M', 60 * S}, {'S', S}};
      int after = 0, found = 0;
      while (*p && after < 3) {
        const char *q = p;
        int64_t x;
        if (parse_amount(&q, 1, &x))
          return -1;
        char c = (char)toupper((unsigned char)*q);
        int i = after;
        while (i < 3 && u[i].unit != c)
          i++;
        if (i == 3)
          return -1;
        if (parse_amount(&p, u[i].ns, &part) || p != q)
          return -1;
        ns += part;
        p++;
        after = i + 1;
        found = 1;
      }
      if (!found)
        return -1;
      any = 1;
    }
    if (!any || *p)
      return -1;
  }
  if (ns / 1000000 > INT_MAX)
    return -1;
  *ms = (long)(ns / 1000000);
  return 0;
}

/* retryDelay: !<org.redisson.config.EqualJitterDelay> {baseDelay: PT1S,
 * maxDelay: PT2S} and the other kinds (ConstantDelay {delay: ...}). An
 * empty mapping gives Redisson's defaults (100 ms, 1 s). */
static int set_delay(loader *ld, const key_def *d, const yaml_node_t *v) {
  static const struct {
    const char *name;
    int kind;
  } kinds[] = {{"EqualJitterDelay", DLOCK_RETRY_EQUAL_JITTER},
               {"FullJitterDelay", DLOCK_RETRY_FULL_JITTER},
               {"DecorrelatedJitterDelay", DLOCK_RETRY_DECORRELATED_JITTER},
               {"ConstantDelay", DLOCK_RETRY_CONSTANT}};
  const char *tag = v->tag ? (const char *)v->tag : "";
  if (strncmp(tag, "tag:yaml.org,2002:", 18) == 0)
    tag += 18;
  if (strncmp(tag, "org.redisson.config.", 20) == 0)
    tag += 20;
  int kind = -1;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(tag, kinds[i].name) == 0)
      kind = kinds[i].kind;
  if (kind < 0 || v->type != YAML_MAPPING_NODE)
    return at(ld, v->start_mark,
              "'%s' must be a delay strategy: !<org.redisson.config."
              "EqualJitterDelay> {baseDelay: PT1S, maxDelay: PT2S} (or "
              "FullJitterDelay, DecorrelatedJitterDelay; ConstantDelay "
              "{delay: PT1.5S})",
              d->name);
  int constant = kind == DLOCK_RETRY_CONSTANT;
  long base = 100, max = 1000, delay = 100; /* Redisson's for {} */
  int have = 0;
  for (const yaml_node_pair_t *p = v->data.mapping.pairs.start;
       p < v->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = yaml_document_get_node(&ld->doc, p->key);
    const yaml_node_t *x = yaml_document_get_node(&ld->doc, p->value);
    const char *name = k->type == YAML_SCALAR_NODE ? text_of(k) : "";
    long *dst = NULL;
    int bit = 0;
    if (!constant && strcmp(name, "baseDelay") == 0)
      dst = &base, bit = 1;
    else if (!constant && strcmp(name, "maxDelay") == 0)
      dst = &max, bit = 2;
    else if (constant && strcmp(name, "delay") == 0)
      dst = &delay, bit = 4;
    if (!dst)
      return at(ld, k->start_mark, "'%s': %s takes %s", d->name, tag,
                constant ? "delay" : "baseDelay and maxDelay");
    char *s = NULL;
    if (x->type != YAML_SCALAR_NODE)
      return at(ld, x->start_mark, "'%s': %s must be a duration, not a %s",
                d->name, name, type_name(x));
    int rc = expand(ld, x, d->name, &s);
    if (rc)
      return rc;
    rc = parse_duration(s, dst);
    if (rc) {
      rc = at(ld, x->start_mark,
              "'%s': %s must be a duration (PT1S, PT0.5S, PT1M...), not "
              "'%.40s'",
              d->name, name, s);
    }
    free(s);
    if (rc)
      return rc;
    have |= bit;
  }
  if (have && !constant && have != 3)
    return at(ld, v->start_mark, "'%s': %s needs both baseDelay and maxDelay",
              d->name, tag);
  ld->cfg.retry_delay = kind;
  if (constant) {
    ld->cfg.retry_interval_ms = (int)delay;
  } else {
    ld->cfg.retry_base_delay_ms = (int)base;
    ld->cfg.retry_max_delay_ms = (int)max;
  }
  return 0;
}

/* Stores the expanded value s of key d (s is the load's from here on). */
static int set_value(loader *ld, const key_def *d, const yaml_node_t *v,
                     char *s) {
  long n = 0;
  int val = 0, bad = 0;
  switch (d->kind) {
  case K_STR:
    set_str(ld, d->off, s, d->name);
    return 0;
  case K_STORE:
    return set_store(ld, d, v, s);
  case K_ZERO:
    bad = parse_long(s, 0, 0, &n);
    if (bad) {
      free(s);
      return at(ld, v->start_mark,
                "'database' in clusterServersConfig must be 0: dlock uses a "
                "Redis Cluster's database 0 only");
    }
    free(s);
    return 0;
  case K_INTERVAL: /* as Redisson's setRetryInterval: a constant delay */
    bad = parse_long(s, dlock__config_int_min(d->off), INT_MAX, &n);
    val = (int)n;
    if (!bad && FITS(ld, retry_delay)) /* a struct before 0.3: constant */
      ld->cfg.retry_delay = DLOCK_RETRY_CONSTANT;
    break;
  case K_PART:
    free(ld->part[d->part]);
    ld->part[d->part] = s;
    ld->part_mark[d->part] = v->start_mark;
    return 0;
  case K_INT:
    bad = parse_long(s, dlock__config_int_min(d->off), INT_MAX, &n);
    val = (int)n;
    break;
  case K_DB:
    bad = parse_long(s, 0, DLOCK__DB_MAX, &ld->db);
    break;
  default: /* K_VERIFY, K_NAMES, K_SSLVERIFY, K_SYNC, K_FLAG */
    bad = parse_flag(d, s, &val);
    if (d->kind == K_SYNC) /* every connected replica, or no WAIT */
      val = val ? -1 : 0;
    /* As Redisson: no endpoint identification is the chain without the
     * name -- a host-name setting never turns the CA check off. */
    if (d->kind == K_NAMES)
      val = val ? DLOCK_TLS_VERIFY_FULL : DLOCK_TLS_VERIFY_CA_ONLY;
    /* Only sslVerificationMode: NONE (or the C field) turns every check
     * off: a boolean that reads like "relax the checks" must not. */
    if (d->kind == K_SSLVERIFY && !bad && !val) {
      free(s);
      return at(ld, v->start_mark,
                "'sslVerify: false' would turn off every certificate check; "
                "write 'sslVerificationMode: CA_ONLY' to skip only the "
                "host-name check, or 'sslVerificationMode: NONE' to accept "
                "any certificate (insecure: anyone on the path can "
                "impersonate the server)");
    }
    break;
  }
  int rc = bad ? bad_value(ld, v, d, s) : 0;
  if (!bad && d->kind != K_DB)
    memcpy(field_at(&ld->cfg, d->off), &val, sizeof val);
  free(s);
  return rc;
}

/* What a key of kind d->kind must be, for wrong-type messages. */
static const char *expected(const key_def *d) {
  switch (d->kind) {
  case K_INT:
  case K_DB:
  case K_INTERVAL:
  case K_ZERO:
    return "an integer";
  case K_NAMES:
  case K_SSLVERIFY:
  case K_SYNC:
  case K_FLAG:
    return "true or false";
  case K_VERIFY:
    return "STRICT, CA_ONLY or NONE";
  default:
    return "a string";
  }
}

/* A key whose value is a scalar (or a list of them, K_LIST). */
static int set_key(loader *ld, const key_def *d, const yaml_node_t *k,
                   yaml_node_t *v) {
  if (d->kind == K_LIST) {
    if (v->type != YAML_SEQUENCE_NODE)
      return at(ld, v->start_mark,
                "'%s' must be a list of addresses (lines '- redis://host:port'"
                "), not a %s",
                d->name, type_name(v));
    ld->list = v;
    return 0;
  }
  int fit = d->kind == K_PART || d->kind == K_DB || d->kind == K_ZERO ||
            fits(ld, d->off,
                 d->kind == K_STR || d->kind == K_STORE ? sizeof(char *)
                                                        : sizeof(int));
  if (d->kind == K_DELAY)
    fit = fit && FITS(ld, retry_max_delay_ms);
  if (v->type != YAML_SCALAR_NODE && d->kind != K_DELAY)
    return at(ld, v->start_mark, "'%s' must be %s, not a %s", d->name,
              expected(d), type_name(v));
  if (!fit)
    return at(ld, k->start_mark,
              "'%s' sets dlock_config.%s, which this program's dlock_config "
              "(%zu bytes, built against an older dlock.h) does not have",
              d->name, d->field, ld->size);
  if (d->kind == K_DELAY)
    return set_delay(ld, d, v);
  if (d->off == FIELD_OFF(tls_cert_file) && d->kind == K_STR)
    ld->cert_key = k;
  if (d->off == FIELD_OFF(tls_key_file) && d->kind == K_STR)
    ld->key_key = k;
  char *s = NULL;
  int rc = expand(ld, v, d->name, &s);
  return rc ? rc : set_value(ld, d, v, s);
}

static int walk_map(loader *ld, unsigned where, const yaml_node_t *map);

static int enter_section(loader *ld, const key_def *d, const yaml_node_t *k,
                         const yaml_node_t *v) {
  if (ld->section)
    return at(ld, k->start_mark,
              "a second server section '%s' (%s is at line %lu, column %lu): "
              "give exactly one",
              d->name, ld->section_name,
              (unsigned long)ld->section_mark.line + 1,
              (unsigned long)ld->section_mark.column + 1);
  ld->section = d->part;
  ld->section_name = d->name;
  ld->section_mark = k->start_mark;
  if (is_null(v))
    return 0;
  if (v->type != YAML_MAPPING_NODE)
    return at(ld, v->start_mark, "'%s' must be a mapping of keys, not a %s",
              d->name, type_name(v));
  return walk_map(ld, d->part, v);
}

static int apply_key(loader *ld, unsigned where, const yaml_node_t *k,
                     yaml_node_t *v) {
  const key_def *d = find_key(text_of(k), where);
  if (!d)
    return unknown_key(ld, where, k);
  if (d->kind == K_SECTION)
    return enter_section(ld, d, k, v);
  if (is_null(v))
    return 0;
  if (d->kind == K_IGNORED) {
    char line[300];
    snprintf(line, sizeof line,
             "%s:%lu:%lu: '%s' %s is a Redisson setting dlock has no use "
             "for: ignored\n",
             ld->path, (unsigned long)k->start_mark.line + 1,
             (unsigned long)k->start_mark.column + 1, d->name,
             where_name(where));
    dlock__sb_adds(&ld->ignored, line);
    return 0;
  }
  if (d->kind == K_REFUSED)
    return at(ld, k->start_mark, "'%s': %s", d->name, d->field);
  return set_key(ld, d, k, v);
}

/* Whether pass ld->pass of the top level skips key k: the first pass sets
 * the top level's own keys, the second enters the server section, so that
 * a section's setting wins over the same one at the top level (Redisson's
 * Config carries username, password, ssl*... there too). */
static int other_pass(const loader *ld, unsigned where, const yaml_node_t *k) {
  if (where != IN_ROOT)
    return 0;
  if (k->type != YAML_SCALAR_NODE)
    return ld->pass == 1;
  const key_def *d = find_key(text_of(k), where);
  return (d && d->kind == K_SECTION) != (ld->pass == 1);
}

static int walk_map(loader *ld, unsigned where, const yaml_node_t *map) {
  const yaml_node_pair_t *first = map->data.mapping.pairs.start;
  for (const yaml_node_pair_t *p = first; p < map->data.mapping.pairs.top;
       p++) {
    const yaml_node_t *k = yaml_document_get_node(&ld->doc, p->key);
    yaml_node_t *v = yaml_document_get_node(&ld->doc, p->value);
    if (other_pass(ld, where, k))
      continue;
    if (k->type != YAML_SCALAR_NODE)
      return at(ld, k->start_mark, "a key must be a name, not a %s",
                type_name(k));
    for (const yaml_node_pair_t *q = first; q < p; q++) {
      const yaml_node_t *qk = yaml_document_get_node(&ld->doc, q->key);
      if (qk->type == YAML_SCALAR_NODE && strcmp(text_of(qk), text_of(k)) == 0)
        return at(ld, k->start_mark,
                  "duplicate key '%s' (first at line %lu, column %lu)",
                  text_of(k), (unsigned long)qk->start_mark.line + 1,
                  (unsigned long)qk->start_mark.column + 1);
    }
    int rc = apply_key(ld, where, k, v);
    if (rc)
      return rc;
  }
  return 0;
}

/* ---- the URL ------------------------------------------------------------ */

enum scheme { S_BAD, S_REDIS, S_REDISS, S_UNIX };

/* The scheme of a Redisson address; *rest = what follows "://". */
static enum scheme split_scheme(const char *addr, const char **rest) {
  static const struct {
    const char *prefix;
    enum scheme s;
  } t[] = {{"redis://", S_REDIS}, {"rediss://", S_REDISS}, {"unix://", S_UNIX}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    size_t n = strlen(t[i].prefix);
    if (strncmp(addr, t[i].prefix, n) == 0) {
      *rest = addr + n;
      return t[i].s;
    }
  }
  return S_BAD;
}

/* host, host:port, [v6] or [v6]:port; no credentials, path or query. */
static int hostport_ok(const char *s) {
  if (!*s || s[strcspn(s, "/@?#,% \t")])
    return 0;
  const char *port;
  if (*s == '[') {
    const char *rb = strchr(s, ']');
    if (!rb || rb == s + 1)
      return 0;
    port = rb + 1;
  } else {
    port = s + strcspn(s, ":");
    if (port == s)
      return 0;
  }
  long p;
  return !*port || (*port == ':' && parse_long(port + 1, 1, 65535, &p) == 0);
}

/* s percent-encoded: every byte but A-Z a-z 0-9 - . _ ~ (url.c decodes). */
static void add_encoded(dlock__sb *b, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (isalnum(*p) || strchr("-._~", *p)) {
      dlock__sb_add(b, (const char *)p, 1);
    } else {
      char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
      dlock__sb_add(b, e, 3);
    }
  }
}

/* "?name=value" or "&name=value", if value is set. */
static void add_query(dlock__sb *b, int *first, const char *name,
                      const char *value) {
  if (!value)
    return;
  dlock__sb_adds(b, *first ? "?" : "&");
  dlock__sb_adds(b, name);
  dlock__sb_adds(b, "=");
  add_encoded(b, value);
  *first = 0;
}

/* A user without a password authenticates nowhere (AUTH needs both). */
static int check_user(const loader *ld, int user, int pass) {
  if (!ld->part[user] || ld->part[pass])
    return 0;
  return at(ld, ld->part_mark[user],
            "'%s' needs '%s' too (Redis authenticates a user with AUTH "
            "user password)",
            user == P_USER ? "username" : "sentinelUsername",
            user == P_USER ? "password" : "sentinelPassword");
}

/* "[user]:password@" when a password is set. */
static void add_userinfo(const loader *ld, dlock__sb *b) {
  if (!ld->part[P_PASSWORD])
    return;
  if (ld->part[P_USER])
    add_encoded(b, ld->part[P_USER]);
  dlock__sb_adds(b, ":");
  add_encoded(b, ld->part[P_PASSWORD]);
  dlock__sb_adds(b, "@");
}

static void add_db(const loader *ld, dlock__sb *b) {
  if (ld->db < 0)
    return;
  dlock__sb_adds(b, "/");
  dlock__sb_addi64(b, ld->db);
}

static int bad_address(const loader *ld, yaml_mark_t m, const char *addr,
                       const char *forms) {
  if (strchr(addr, '@')) /* not echoed: it may hold a password */
    return at(ld, m,
              "an address holds no credentials: give them as username and "
              "password");
  return at(ld, m, "address '%.80s' is not %s", addr, forms);
}

static int compose_single(loader *ld, dlock__sb *b) {
  const char *addr = ld->part[P_ADDRESS], *rest = NULL;
  yaml_mark_t m = ld->part_mark[P_ADDRESS];
  if (!addr)
    return at(ld, ld->section_mark,
              "singleServerConfig needs an address (redis://host:port)");
  enum scheme s = split_scheme(addr, &rest);
  const char *forms =
      "redis://host:port, rediss://host:port or unix:///path/to/socket";
  if (s == S_BAD || (s != S_UNIX && !hostport_ok(rest)) ||
      (s == S_UNIX && (*rest != '/' || strchr(rest, '?'))))
    return bad_address(ld, m, addr, forms);
  if (s != S_UNIX) {
    dlock__sb_adds(b, s == S_REDISS ? "rediss://" : "redis://");
    add_userinfo(ld, b);
    dlock__sb_adds(b, rest);
    add_db(ld, b);
    return 0;
  }
  int first = 1;
  char db[24];
  dlock__fmt_i64(db, ld->db);
  dlock__sb_adds(b, addr);
  add_query(b, &first, "db", ld->db >= 0 ? db : NULL);
  add_query(b, &first, "user",
            ld->part[P_USER]); /* check_user: has a password */
  add_query(b, &first, "password", ld->part[P_PASSWORD]);
  return 0;
}

/* One item of an address list: its host:port appended to b (after a ','
 * unless it is the first); *seen = its scheme, which all items share. */
static int add_host(const loader *ld, const yaml_node_t *v, const char *key,
                    dlock__sb *b, enum scheme *seen) {
  if (v->type != YAML_SCALAR_NODE)
    return at(ld, v->start_mark, "'%s': an address must be a string, not a %s",
              key, type_name(v));
  char *addr = NULL;
  const char *rest = NULL;
  int rc = expand(ld, v, key, &addr);
  if (rc)
    return rc;
  enum scheme s = split_scheme(addr, &rest);
  if ((s != S_REDIS && s != S_REDISS) || !hostport_ok(rest)) {
    rc = bad_address(ld, v->start_mark, addr,
                     "redis://host:port or rediss://host:port");
  } else if (*seen != S_BAD && s != *seen) {
    rc = at(ld, v->start_mark, "'%s': mixes redis:// and rediss:// addresses",
            key);
  } else {
    dlock__sb_adds(b, *seen == S_BAD ? "" : ",");
    dlock__sb_adds(b, rest);
    *seen = s;
  }
  free(addr);
  return rc;
}

/* The list's host:port items joined by ','; *tls = they are rediss://. */
static int add_hosts(loader *ld, dlock__sb *b, const char *key, int *tls) {
  enum scheme seen = S_BAD;
  for (const yaml_node_item_t *it = ld->list->data.sequence.items.start;
       it < ld->list->data.sequence.items.top; it++) {
    int rc = add_host(ld, yaml_document_get_node(&ld->doc, *it), key, b, &seen);
    if (rc)
      return rc;
  }
  *tls = seen == S_REDISS;
  return 0;
}

/* redis[s]-cluster://[user:pass@]h1:p1,h2:p2 or
 * redis[s]-sentinel://[user:pass@]h1:p1,h2:p2/master[/db][?sentinel_...]. */
static int compose_multi(loader *ld, dlock__sb *b) {
  int sentinel = ld->section == IN_SENTINEL, tls = 0;
  const char *key = sentinel ? "sentinelAddresses" : "nodeAddresses";
  if (!ld->list ||
      ld->list->data.sequence.items.start == ld->list->data.sequence.items.top)
    return at(ld, ld->section_mark, "%s needs %s (a list of redis://host:port)",
              ld->section_name, key);
  if (sentinel && !ld->part[P_MASTER])
    return at(ld, ld->section_mark, "sentinelServersConfig needs masterName");
  dlock__sb hosts;
  dlock__sb_init(&hosts);
  int rc = add_hosts(ld, &hosts, key, &tls);
  if (rc == 0) {
    dlock__sb_adds(b, tls ? "rediss-" : "redis-");
    dlock__sb_adds(b, sentinel ? "sentinel://" : "cluster://");
    add_userinfo(ld, b);
    dlock__sb_add(b, hosts.p, hosts.len);
    rc = hosts.oom ? oom() : 0;
  }
  dlock__sb_free(&hosts);
  if (rc || !sentinel)
    return rc;
  int first = 1;
  dlock__sb_adds(b, "/");
  add_encoded(b, ld->part[P_MASTER]);
  add_db(ld, b);
  add_query(b, &first, "sentinel_user", ld->part[P_SUSER]);
  add_query(b, &first, "sentinel_password", ld->part[P_SPASS]);
  return 0;
}

/* etcd[s]://[user:pass@]h1:p1,h2:p2[/prefix]: endpoints etcd://h:p,
 * etcds://h:p, or etcd's own http://h:p and https://h:p (TLS). */
static int compose_etcd(loader *ld, dlock__sb *b) {
  if (!ld->list ||
      ld->list->data.sequence.items.start == ld->list->data.sequence.items.top)
    return at(ld, ld->section_mark,
              "etcdConfig needs endpoints (a list of etcd://host:port)");
  static const char *const sch[4] = {"etcd://", "http://", "etcds://",
                                     "https://"};
  int tls = -1, rc = 0;
  dlock__sb hosts;
  dlock__sb_init(&hosts);
  for (const yaml_node_item_t *it = ld->list->data.sequence.items.start;
       rc == 0 && it < ld->list->data.sequence.items.top; it++) {
    yaml_node_t *v = yaml_document_get_node(&ld->doc, *it);
    char *addr = NULL;
    if (v->type != YAML_SCALAR_NODE) {
      rc = at(ld, v->start_mark, "'endpoints': an endpoint must be a string");
      break;
    }
    if ((rc = expand(ld, v, "endpoints", &addr)) != 0)
      break;
    int s = -1;
    for (int i = 0; i < 4 && s < 0; i++)
      if (strncmp(addr, sch[i], strlen(sch[i])) == 0)
        s = i;
    const char *rest = s >= 0 ? addr + strlen(sch[s]) : "";
    if (s < 0 || !hostport_ok(rest))
      rc = bad_address(ld, v->start_mark, addr,
                       "etcd://host:port (or http://host:port)");
    else if (tls >= 0 && (s >= 2) != tls)
      rc = at(ld, v->start_mark, "'endpoints': mixes TLS and plain endpoints");
    else {
      dlock__sb_adds(&hosts, tls < 0 ? "" : ",");
      dlock__sb_adds(&hosts, rest);
      tls = s >= 2;
    }
    free(addr);
  }
  if (rc == 0) {
    dlock__sb_adds(b, tls ? "etcds://" : "etcd://");
    add_userinfo(ld, b);
    dlock__sb_add(b, hosts.p, hosts.len);
    if (ld->part[P_PREFIX] && ld->part[P_PREFIX][0]) {
      dlock__sb_adds(b, "/");
      add_encoded(b, ld->part[P_PREFIX]);
    }
    rc = hosts.oom ? oom() : 0;
  }
  dlock__sb_free(&hosts);
  return rc;
}

static int compose(loader *ld) {
  int parts = 0;
  for (int i = 0; i < NPART; i++)
    parts |= ld->part[i] != NULL;
  /* A dlock-only second file (docs/config.md) sets no server: it keeps the
   * URL an earlier load (or the program) set. */
  if (!ld->section && ld->had_url && !parts)
    return 0;
  if (!ld->section)
    return at(ld, mark_start(),
              "no server section: give one of singleServerConfig, "
              "clusterServersConfig, sentinelServersConfig or etcdConfig%s",
              ld->had_url ? " (a file without one may hold only dlock's "
                            "own keys, not credentials)"
                          : "");
  int rc = check_user(ld, P_USER, P_PASSWORD);
  if (rc == 0)
    rc = check_user(ld, P_SUSER, P_SPASS);
  if (rc)
    return rc;
  dlock__sb b;
  dlock__sb_init(&b);
  rc = ld->section == IN_SINGLE ? compose_single(ld, &b)
       : ld->section == IN_ETCD ? compose_etcd(ld, &b)
                                : compose_multi(ld, &b);
  char *url = NULL;
  if (rc == 0 && (b.oom || !(url = dlock__strndup(b.p, b.len))))
    rc = oom();
  if (rc == 0)
    set_str(ld, FIELD_OFF(url), url, ld->section_name);
  dlock__sb_free(&b);
  return rc;
}

/* A client certificate this file names needs its key, and is given once:
 * the errors name the YAML keys (tls.c would name the C fields). */
static int check_pairs(loader *ld) {
  const dlock_config *c = &ld->cfg;
  const yaml_node_t *k = ld->cert_key ? ld->cert_key : ld->key_key;
  if (!k)
    return 0;
  if ((c->tls_cert_file != NULL) != (c->tls_key_file != NULL))
    return at(ld, k->start_mark,
              "'%s' needs '%s' too (a client certificate needs its key)",
              c->tls_cert_file ? "sslCertFile" : "sslKeyFile",
              c->tls_cert_file ? "sslKeyFile" : "sslCertFile");
  if (FITS(ld, tls_keystore) && c->tls_keystore)
    return at(ld, k->start_mark,
              "'%s' and 'sslKeystore' both give the client certificate: "
              "give one",
              text_of(k));
  return 0;
}

/* ---- the calls ---------------------------------------------------------- */

/* The working copy replaces *cfg; the previous load's memory goes. */
static int commit(loader *ld, dlock_config *cfg) {
  if (!FITS(ld, loaded))
    return dlock__fail(DLOCK_EINVAL,
                       "%s: this program's dlock_config (%zu bytes) predates "
                       "dlock_config_load: it was built against a dlock.h "
                       "older than 0.2",
                       ld->path, ld->size);
  loaded_mem *old = previous(cfg, ld->size);
  if (ld->ignored.oom)
    return oom();
  if (ld->ignored.len &&
      !(ld->mem->ignored = dlock__strndup(ld->ignored.p, ld->ignored.len)))
    return oom();
  ld->cfg.loaded = ld->mem;
  ld->mem = NULL;
  memcpy(cfg, &ld->cfg, ld->size);
  mem_free(old);
  return 0;
}

static int load(loader *ld, dlock_config *cfg) {
  int rc = read_file(ld);
  yaml_node_t *root = rc ? NULL : parse(ld, &rc);
  if (!root)
    return rc;
  for (ld->pass = 0; ld->pass < 2 && rc == 0; ld->pass++)
    rc = walk_map(ld, IN_ROOT, root);
  if (rc || (rc = check_pairs(ld)) != 0 || (rc = compose(ld)) != 0)
    return rc;
  return commit(ld, cfg);
}

int dlock_config_load(const char *path, dlock_config *cfg) {
  dlock__clear_error();
  if (!path || !cfg)
    return dlock__fail(DLOCK_EINVAL, "dlock_config_load: %s is NULL",
                       path ? "cfg" : "path");
  int rc = dlock__config_check_record(cfg, offsetof(dlock_config, url));
  if (rc)
    return rc;
  loader ld;
  if ((rc = loader_init(&ld, path, cfg)) == 0)
    rc = load(&ld, cfg);
  loader_free(&ld);
  return rc;
}

void dlock_config_dispose(dlock_config *cfg) {
  if (!cfg)
    return;
  dlock__err_keep_begin(); /* a call that cannot fail leaves no message */
  int bad = dlock__config_check_record(cfg, offsetof(dlock_config, url));
  dlock__err_keep_end();
  size_t size = bad ? 0 : cfg->abi_size;
  loaded_mem *m = previous(cfg, size < sizeof *cfg ? size : sizeof *cfg);
  if (!m)
    return;
  for (size_t i = 0; i < NSTR; i++) {
    const char *cur;
    if (g_str_off[i] + sizeof cur > size)
      continue;
    memcpy(&cur, field_at(cfg, g_str_off[i]), sizeof cur);
    if (cur == m->str[i])
      memset(field_at(cfg, g_str_off[i]), 0, sizeof cur);
  }
  mem_free(m);
  cfg->loaded = NULL;
}

/* The loaded record of cfg, if cfg's struct has the field and a load set
 * it. */
static const loaded_mem *loaded_of(const dlock_config *cfg) {
  size_t size = cfg->abi_size < sizeof *cfg ? cfg->abi_size : sizeof *cfg;
  return previous(cfg, size);
}

void dlock__config_log_ignored(const dlock_config *cfg,
                               const dlock_config *log) {
  const loaded_mem *m = loaded_of(cfg);
  if (!m || !m->ignored || !dlock__log_on(log, DLOCK_LOG_INFO))
    return;
  for (const char *p = m->ignored; *p;) {
    size_t n = strcspn(p, "\n");
    dlock__log(log, DLOCK_LOG_INFO, NULL, "config_ignored", "%.*s", (int)n, p);
    p += n + (p[n] == '\n');
  }
}

const char *dlock__config_key(const dlock_config *cfg, size_t off,
                              const char *c_name) {
  const loaded_mem *m = loaded_of(cfg);
  size_t i = str_slot(off);
  const char *cur;
  if (!m || g_str_off[i] != off || !m->key[i])
    return c_name;
  memcpy(&cur, field_at((dlock_config *)cfg, off), sizeof cur);
  return cur && cur == m->str[i] ? m->key[i] : c_name;
}

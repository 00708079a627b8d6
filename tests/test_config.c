/* dlock_config_load / dlock_config_dispose (docs/config.md): every key and
 * the field or URL it gives, Redisson's own example file, ${VAR}
 * substitution, every kind of error with its FILE:LINE:COLUMN and the config
 * left unchanged, memory (dispose, reloads; ASan/valgrind find leaks), a
 * caller built against an older header (guard bytes), and loaded configs
 * used for real against redis-servers (TCP, unix socket, ACL user with the
 * password from the environment). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlock/async.h>

#include "th.h"

/* Writes text to a file of the test's temp dir; returns its path. */
static const char *write_file(const char *name, const char *text) {
  const char *path = th_tmpfile(name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  CHECK_EQ(fputs(text, f) >= 0, 1);
  CHECK_EQ(fclose(f), 0);
  return path;
}

static int load_text(const char *text, dlock_config *cfg) {
  return dlock_config_load(write_file("c.yaml", text), cfg);
}

/* The file fails to load with DLOCK_EINVAL, the message "PATH:POS: ..."
 * containing want, and cfg (loaded with a first file) unchanged. */
static void expect_error(const char *text, const char *pos, const char *want) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text("singleServerConfig:\n"
                     "  address: redis://first:1\n"
                     "  sslCaFile: /first/ca.pem\n",
                     &cfg));
  cfg.pool_size = 7;
  unsigned char before[sizeof cfg]; /* every byte, padding included */
  memcpy(before, &cfg, sizeof cfg);
  const char *path = write_file("bad.yaml", text);
  CHECK_RC(dlock_config_load(path, &cfg), DLOCK_EINVAL);
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s:%s: ", path, pos);
  const char *e = dlock_last_error();
  CHECK_MSG(strncmp(e, prefix, strlen(prefix)) == 0 && strstr(e, want),
            "file:\n%s\nerror '%s', expected '%s...%s'", text, e, prefix, want);
  CHECK_MSG(memcmp((const unsigned char *)&cfg, before, sizeof cfg) == 0,
            "a failed load changed the config (%s)", e);
  CHECK_STR(cfg.url, "redis://first:1");
  CHECK_STR(cfg.tls_ca_file, "/first/ca.pem");
  dlock_config_dispose(&cfg);
}

/* The URL the file gives. */
static void expect_url(const char *text, const char *url) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  int rc = load_text(text, &cfg);
  CHECK_MSG(rc == 0, "file:\n%s\nfailed: %s", text, dlock_last_error());
  CHECK_STR(cfg.url, url);
  dlock_config_dispose(&cfg);
}

/* ---- keys and the fields they set ------------------------------------- */

/* Replica sync (issue 14): Redisson's checkLockSyncedSlaves and
 * slavesSyncTimeout, and dlock's syncReplicas. */
TH_CASE(sync_keys) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text("checkLockSyncedSlaves: false\n"
                     "slavesSyncTimeout: 250\n"
                     "singleServerConfig:\n  address: redis://h:1\n",
                     &cfg));
  CHECK_EQ(cfg.sync_replicas, 0);
  CHECK_EQ(cfg.sync_timeout_ms, 250);
  dlock_config_dispose(&cfg);
  dlock_config_init(&cfg);
  cfg.sync_replicas = 2;
  CHECK_OK(load_text("checkLockSyncedSlaves: true\n"
                     "singleServerConfig:\n  address: redis://h:1\n",
                     &cfg));
  CHECK_EQ(cfg.sync_replicas, -1);
  CHECK_EQ(cfg.sync_timeout_ms, 1000);
  dlock_config_dispose(&cfg);
  dlock_config_init(&cfg);
  CHECK_OK(load_text("syncReplicas: 1\n"
                     "sentinelServersConfig:\n"
                     "  sentinelAddresses: [redis://s1:26379]\n"
                     "  masterName: m\n",
                     &cfg));
  CHECK_EQ(cfg.sync_replicas, 1);
  CHECK_STR(cfg.url, "redis-sentinel://s1:26379/m");
  dlock_config_dispose(&cfg);
  dlock_config_init(&cfg);
  CHECK_RC(load_text("syncReplicas: -2\n"
                     "singleServerConfig:\n  address: redis://h:1\n",
                     &cfg),
           DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(), "from -1"), "%s", dlock_last_error());
  CHECK_RC(load_text("slavesSyncTimeout: 0\n"
                     "singleServerConfig:\n  address: redis://h:1\n",
                     &cfg),
           DLOCK_EINVAL);
  CHECK_RC(load_text("checkLockSyncedSlaves: yes\n"
                     "singleServerConfig:\n  address: redis://h:1\n",
                     &cfg),
           DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(), "true or false"), "%s",
            dlock_last_error());
  dlock_config_dispose(&cfg);
}

/* issue 31: dlock's own spinFallback (cfg.spin_fallback), default off. */
TH_CASE(spin_fallback_key) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_EQ(cfg.spin_fallback, 0);
  CHECK_OK(load_text("spinFallback: true\n"
                     "singleServerConfig:\n  address: redis://h:1\n",
                     &cfg));
  CHECK_EQ(cfg.spin_fallback, 1);
  dlock_config_dispose(&cfg);
  dlock_config_init(&cfg);
  cfg.spin_fallback = 1;
  CHECK_OK(load_text("spinFallback: false\n"
                     "singleServerConfig:\n  address: redis://h:1\n",
                     &cfg));
  CHECK_EQ(cfg.spin_fallback, 0);
  CHECK_RC(load_text("spinFallback: 2\n"
                     "singleServerConfig:\n  address: redis://h:1\n",
                     &cfg),
           DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(), "true or false"), "%s",
            dlock_last_error());
  dlock_config_dispose(&cfg);
}

TH_CASE(single_every_key) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.lazy_connect = 1; /* not a file key: stays */
  CHECK_OK(load_text("lockWatchdogTimeout: 12000\n"
                     "singleServerConfig:\n"
                     "  address: \"redis://10.0.0.5:6380\"\n"
                     "  username: app\n"
                     "  password: s3cret\n"
                     "  database: 3\n"
                     "  connectTimeout: 1500\n"
                     "  timeout: 2500\n"
                     "  retryAttempts: 0\n"
                     "  retryInterval: 0\n"
                     "  connectionPoolSize: 5\n"
                     "  sslCaFile: /etc/ssl/ca.pem\n"
                     "  sslCaDir: /etc/ssl/certs\n"
                     "  sslCertFile: client.crt\n"
                     "  sslKeyFile: client.key\n"
                     "  sslServerName: redis.internal\n"
                     "  clientName: billing-7\n"
                     "  sslVerificationMode: NONE\n",
                     &cfg));
  CHECK_STR(cfg.url, "redis://app:s3cret@10.0.0.5:6380/3");
  CHECK_EQ(cfg.watchdog_timeout_ms, 12000);
  CHECK_EQ(cfg.connect_timeout_ms, 1500);
  CHECK_EQ(cfg.command_timeout_ms, 2500);
  CHECK_EQ(cfg.retry_attempts, 0);
  CHECK_EQ(cfg.retry_interval_ms, 0);
  CHECK_EQ(cfg.pool_size, 5);
  CHECK_STR(cfg.tls_ca_file, "/etc/ssl/ca.pem");
  CHECK_STR(cfg.tls_ca_dir, "/etc/ssl/certs");
  CHECK_STR(cfg.tls_cert_file, "client.crt");
  CHECK_STR(cfg.tls_key_file, "client.key");
  CHECK_STR(cfg.tls_server_name, "redis.internal");
  CHECK_STR(cfg.client_name, "billing-7");
  CHECK_EQ(cfg.tls_verify, 0);
  CHECK_EQ(cfg.lazy_connect, 1);
  CHECK_EQ(cfg.multiplex, 1);
  CHECK_EQ(cfg.subscription_linger_ms, 100);
  /* Every spelling of tls_verify (issue 25 item 5): only
   * sslVerificationMode: NONE turns the CA check off; no endpoint
   * identification skips the name alone, as in Redisson. */
  static const struct {
    const char *line;
    int verify;
  } v[] = {
      {"  sslEnableEndpointIdentification: true\n", DLOCK_TLS_VERIFY_FULL},
      {"  sslEnableEndpointIdentification: false\n", DLOCK_TLS_VERIFY_CA_ONLY},
      {"  sslVerificationMode: STRICT\n", DLOCK_TLS_VERIFY_FULL},
      {"  sslVerificationMode: CA_ONLY\n", DLOCK_TLS_VERIFY_CA_ONLY},
      {"  sslVerificationMode: NONE\n", DLOCK_TLS_VERIFY_NONE},
      {"  sslVerify: true\n", DLOCK_TLS_VERIFY_FULL},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char text[256];
    snprintf(text, sizeof text,
             "singleServerConfig:\n  address: redis://h:1\n%s", v[i].line);
    cfg.tls_verify = 77;
    int rc = load_text(text, &cfg);
    CHECK_MSG(rc == 0, "%s: %s", v[i].line, dlock_last_error());
    CHECK_MSG(cfg.tls_verify == v[i].verify, "%s: tls_verify %d, want %d",
              v[i].line, cfg.tls_verify, v[i].verify);
  }
  dlock_config_dispose(&cfg);
}

/* Only what the file sets changes; the bounds are dlock_client_new's. */
TH_CASE(single_defaults_and_bounds) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.connect_timeout_ms = 777;
  CHECK_OK(load_text("singleServerConfig:\n  address: redis://h\n", &cfg));
  CHECK_STR(cfg.url, "redis://h");
  CHECK_EQ(cfg.connect_timeout_ms, 777);
  CHECK_EQ(cfg.command_timeout_ms, 3000);
  CHECK_EQ(cfg.watchdog_timeout_ms, 30000);
  CHECK_EQ(cfg.tls_verify, 1);
  CHECK(cfg.tls_ca_file == NULL);
  /* The lowest accepted values, and the highest. */
  CHECK_OK(load_text("lockWatchdogTimeout: 3\n"
                     "singleServerConfig:\n"
                     "  address: redis://h\n"
                     "  connectTimeout: 1\n"
                     "  timeout: 2147483647\n"
                     "  connectionPoolSize: 1\n"
                     "  database: 1000000\n",
                     &cfg));
  CHECK_EQ(cfg.watchdog_timeout_ms, 3);
  CHECK_EQ(cfg.connect_timeout_ms, 1);
  CHECK_EQ(cfg.command_timeout_ms, 2147483647);
  CHECK_EQ(cfg.pool_size, 1);
  CHECK_STR(cfg.url, "redis://h/1000000");
  dlock_config_dispose(&cfg);
}

TH_CASE(single_url_forms) {
  const char *head = "singleServerConfig:\n";
  char text[512];
  struct {
    const char *keys, *url;
  } t[] = {
      {"  address: rediss://db.example.com:6380\n",
       "rediss://db.example.com:6380"},
      {"  address: redis://[::1]:7000\n  database: 2\n",
       "redis://[::1]:7000/2"},
      {"  address: redis://h:1\n  password: pw\n", "redis://:pw@h:1"},
      /* Every byte outside A-Z a-z 0-9 - . _ ~ is percent-encoded. */
      {"  address: redis://h:1\n  username: \"u:@%/\"\n"
       "  password: \"p@ss:w/o%rd?&#+= \\u00e9\"\n",
       "redis://u%3A%40%25%2F:p%40ss%3Aw%2Fo%25rd%3F%26%23%2B%3D%20%C3%A9@h:1"},
      {"  address: unix:///run/redis.sock\n", "unix:///run/redis.sock"},
      {"  address: unix:///run/redis.sock\n  database: 4\n  username: u\n"
       "  password: \"a&b=c\"\n",
       "unix:///run/redis.sock?db=4&user=u&password=a%26b%3Dc"},
      {"  address: unix:///run/redis.sock\n  password: x\n",
       "unix:///run/redis.sock?password=x"},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    snprintf(text, sizeof text, "%s%s", head, t[i].keys);
    expect_url(text, t[i].url);
  }
}

TH_CASE(cluster_url) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text("clusterServersConfig:\n"
                     "  nodeAddresses:\n"
                     "  - \"redis://10.0.0.1:7000\"\n"
                     "  - \"redis://10.0.0.2:7001\"\n"
                     "  - redis://node3\n"
                     "  username: app\n"
                     "  password: pw\n"
                     "  masterConnectionPoolSize: 9\n"
                     "  timeout: 1234\n"
                     "  scanInterval: 1000\n"
                     "  readMode: SLAVE\n",
                     &cfg));
  CHECK_STR(cfg.url,
            "redis-cluster://app:pw@10.0.0.1:7000,10.0.0.2:7001,node3");
  CHECK_EQ(cfg.pool_size, 9);
  CHECK_EQ(cfg.command_timeout_ms, 1234);
  dlock_config_dispose(&cfg);
  expect_url("clusterServersConfig:\n"
             "  nodeAddresses: [rediss://a:1, 'rediss://b:2']\n"
             "  sslCaFile: ca.pem\n",
             "rediss-cluster://a:1,b:2");
}

TH_CASE(sentinel_url) {
  expect_url("sentinelServersConfig:\n"
             "  sentinelAddresses:\n"
             "  - redis://s1:26379\n"
             "  - redis://s2:26380\n"
             "  masterName: mymaster\n",
             "redis-sentinel://s1:26379,s2:26380/mymaster");
  expect_url("sentinelServersConfig:\n"
             "  sentinelAddresses: [rediss://s1:26379]\n"
             "  masterName: \"my master\"\n"
             "  database: 2\n"
             "  username: app\n"
             "  password: pw\n"
             "  sentinelUsername: sent\n"
             "  sentinelPassword: \"s&p\"\n"
             "  masterConnectionPoolSize: 3\n"
             "  checkSentinelsList: false\n",
             "rediss-sentinel://app:pw@s1:26379/my%20master/2"
             "?sentinel_user=sent&sentinel_password=s%26p");
  expect_url("sentinelServersConfig:\n"
             "  sentinelAddresses: [redis://s1]\n"
             "  masterName: m\n"
             "  sentinelPassword: sp\n",
             "redis-sentinel://s1/m?sentinel_password=sp");
}

/* A file as Redisson users write it (its documented single-server example,
 * with the keys dlock ignores), including nulls and a tagged codec. */
TH_CASE(redisson_example_file) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text("---\n"
                     "singleServerConfig:\n"
                     "  idleConnectionTimeout: 10000\n"
                     "  connectTimeout: 10000\n"
                     "  timeout: 3000\n"
                     "  retryAttempts: 3\n"
                     "  retryInterval: 1500\n"
                     "  password: null\n"
                     "  subscriptionsPerConnection: 5\n"
                     "  clientName: null\n"
                     "  address: \"redis://127.0.0.1:6379\"\n"
                     "  subscriptionConnectionMinimumIdleSize: 1\n"
                     "  subscriptionConnectionPoolSize: 50\n"
                     "  connectionMinimumIdleSize: 24\n"
                     "  connectionPoolSize: 64\n"
                     "  database: 0\n"
                     "  dnsMonitoringInterval: 5000\n"
                     "  sslTruststore: null\n"
                     "  pingConnectionInterval: 30000\n"
                     "  keepAlive: false\n"
                     "  tcpNoDelay: true\n"
                     "threads: 16\n"
                     "nettyThreads: 32\n"
                     "codec: !<org.redisson.codec.Kryo5Codec> {}\n"
                     "transportMode: \"NIO\"\n"
                     "lockWatchdogTimeout: 30000\n"
                     "keepPubSubOrder: true\n"
                     "useScriptCache: false\n",
                     &cfg));
  CHECK_STR(cfg.url, "redis://127.0.0.1:6379/0");
  CHECK_EQ(cfg.pool_size, 64);
  CHECK_EQ(cfg.connect_timeout_ms, 10000);
  CHECK_EQ(cfg.retry_attempts, 3);
  dlock_config_dispose(&cfg);
  /* Redisson's cluster example. */
  expect_url("clusterServersConfig:\n"
             "  idleConnectionTimeout: 10000\n"
             "  connectTimeout: 10000\n"
             "  timeout: 3000\n"
             "  retryAttempts: 3\n"
             "  retryInterval: 1500\n"
             "  failedSlaveReconnectionInterval: 3000\n"
             "  failedSlaveCheckInterval: 60000\n"
             "  password: null\n"
             "  subscriptionsPerConnection: 5\n"
             "  clientName: null\n"
             "  loadBalancer: !<org.redisson.connection.balancer."
             "RoundRobinLoadBalancer> {}\n"
             "  subscriptionConnectionMinimumIdleSize: 1\n"
             "  subscriptionConnectionPoolSize: 50\n"
             "  slaveConnectionMinimumIdleSize: 24\n"
             "  slaveConnectionPoolSize: 64\n"
             "  masterConnectionMinimumIdleSize: 24\n"
             "  masterConnectionPoolSize: 64\n"
             "  readMode: \"SLAVE\"\n"
             "  subscriptionMode: \"SLAVE\"\n"
             "  nodeAddresses:\n"
             "  - \"redis://127.0.0.1:7004\"\n"
             "  - \"redis://127.0.0.1:7001\"\n"
             "  - \"redis://127.0.0.1:7000\"\n"
             "  scanInterval: 1000\n"
             "  pingConnectionInterval: 30000\n"
             "  keepAlive: false\n"
             "  tcpNoDelay: true\n"
             "threads: 16\n"
             "nettyThreads: 32\n"
             "codec: !<org.redisson.codec.Kryo5Codec> {}\n"
             "transportMode: \"NIO\"\n",
             "redis-cluster://127.0.0.1:7004,127.0.0.1:7001,127.0.0.1:7000");
}

/* ---- ${VAR} ---------------------------------------------------------------
 */

TH_CASE(env_substitution) {
  CHECK_EQ(setenv("DLOCK_T_HOST", "10.1.2.3", 1), 0);
  CHECK_EQ(setenv("DLOCK_T_PORT", "7777", 1), 0);
  CHECK_EQ(setenv("DLOCK_T_PW", "p@ss word", 1), 0);
  CHECK_EQ(setenv("DLOCK_T_MS", "4500", 1), 0);
  CHECK_EQ(setenv("DLOCK_T_EMPTY", "", 1), 0);
  unsetenv("DLOCK_T_UNSET");
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text("singleServerConfig:\n"
                     "  address: redis://${DLOCK_T_HOST}:${DLOCK_T_PORT}\n"
                     "  password: ${DLOCK_T_PW}\n"
                     "  timeout: ${DLOCK_T_MS}\n"
                     "  retryAttempts: ${DLOCK_T_UNSET:-5}\n"
                     "  retryInterval: ${DLOCK_T_MS:-9}\n"
                     "  sslCaFile: \"$${literal}/$x/${DLOCK_T_EMPTY}ca\"\n",
                     &cfg));
  CHECK_STR(cfg.url, "redis://:p%40ss%20word@10.1.2.3:7777");
  CHECK_EQ(cfg.command_timeout_ms, 4500);
  CHECK_EQ(cfg.retry_attempts, 5);
  CHECK_EQ(cfg.retry_interval_ms, 4500);
  CHECK_STR(cfg.tls_ca_file, "${literal}/$x/ca");
  dlock_config_dispose(&cfg);
  /* In list items too. */
  expect_url("clusterServersConfig:\n"
             "  nodeAddresses: [\"redis://${DLOCK_T_HOST}:1\"]\n",
             "redis-cluster://10.1.2.3:1");
  /* An unset variable is named, at its value. */
  expect_error("singleServerConfig:\n"
               "  address: redis://h\n"
               "  password: \"${DLOCK_T_UNSET}\"\n",
               "3:13", "environment variable DLOCK_T_UNSET is not set");
  expect_error("clusterServersConfig:\n"
               "  nodeAddresses:\n"
               "    - redis://${DLOCK_T_UNSET}:1\n",
               "3:7", "DLOCK_T_UNSET is not set");
  expect_error("singleServerConfig:\n  address: redis://${DLOCK_T_HOST\n",
               "2:12", "malformed ${...}");
  expect_error("singleServerConfig:\n  address: redis://${}\n", "2:12",
               "malformed ${...}");
  /* A substituted value is checked like a literal one. */
  CHECK_EQ(setenv("DLOCK_T_MS", "-1", 1), 0);
  expect_error("singleServerConfig:\n  address: redis://h\n"
               "  timeout: ${DLOCK_T_MS}\n",
               "3:12", "'timeout' must be an integer from 1 to 2147483647");
}

/* ---- errors ----------------------------------------------------------------
 */

TH_CASE(error_unknown_keys) {
  expect_error("singleServerConfig:\n  adress: redis://h\n", "2:3",
               "unknown key 'adress' in singleServerConfig (did you mean "
               "'address'?)");
  expect_error("singleServerConfig:\n  address: redis://h\n"
               "  connectTimeOut: 5\n",
               "3:3", "did you mean 'connectTimeout'?");
  expect_error("lockWatchdogTimout: 1\n", "1:1",
               "unknown key 'lockWatchdogTimout' at the top level (did you "
               "mean 'lockWatchdogTimeout'?)");
  expect_error("singleServerConfig:\n  address: redis://h\n  frobnicate: 1\n",
               "3:3",
               "unknown key 'frobnicate' in singleServerConfig "
               "(docs/config.md lists the keys)");
  /* Known, but in another place. */
  expect_error("singleServerConfig:\n  nodeAddresses: [redis://h]\n", "2:3",
               "'nodeAddresses' does not belong in singleServerConfig (it "
               "belongs in clusterServersConfig)");
  expect_error("singleServerConfig:\n  address: redis://h\n"
               "  lockWatchdogTimeout: 5\n",
               "3:3", "(it belongs at the top level)");
  expect_error("timeout: 5\nsingleServerConfig:\n  address: redis://h\n", "1:1",
               "'timeout' does not belong at the top level");
  /* Redisson's ClusterServersConfig has a database (Valkey): dlock's
   * cluster URL has none, so only 0 is honoured. */
  expect_error("clusterServersConfig:\n  nodeAddresses: [redis://h]\n"
               "  database: 1\n",
               "3:13", "'database' in clusterServersConfig must be 0");
  expect_url("clusterServersConfig:\n  nodeAddresses: [redis://h:1]\n"
             "  database: 0\n",
             "redis-cluster://h:1");
  /* Redisson keys dlock cannot honour. */
  {
    /* A store this host lacks is an error only when TLS needs it. */
    dlock_config st;
    dlock_config_init(&st);
    CHECK_OK(load_text("singleServerConfig:\n  address: rediss://h\n"
                       "  sslTruststore: file:/nonexistent/truststore.p12\n",
                       &st));
    CHECK_STR(st.tls_truststore, "/nonexistent/truststore.p12");
    dlock_client *c = NULL;
    CHECK_RC(dlock_client_new(&st, &c), DLOCK_ETLS);
    CHECK_MSG(strstr(dlock_last_error(),
                     "cannot open sslTruststore '/nonexistent/truststore.p12'"),
              "%s", dlock_last_error());
    dlock_config_dispose(&st);
  }
  expect_error("singleServerConfig:\n  address: rediss://h\n"
               "  sslTruststore: classpath:truststore.p12\n",
               "3:18", "dlock reads a key store from a file: URL");
  expect_error("masterSlaveServersConfig:\n  masterAddress: redis://h\n", "1:1",
               "'masterSlaveServersConfig': not supported");
}

TH_CASE(error_types) {
  expect_error("singleServerConfig:\n  address: redis://h\n"
               "  timeout: [1, 2]\n",
               "3:12", "'timeout' must be an integer, not a list");
  expect_error("singleServerConfig:\n  address: redis://h\n"
               "  password:\n    a: b\n",
               "4:5", "'password' must be a string, not a mapping");
  expect_error("singleServerConfig:\n  address: [redis://h]\n", "2:12",
               "'address' must be a string, not a list");
  expect_error("clusterServersConfig:\n  nodeAddresses: redis://h:1\n", "2:18",
               "'nodeAddresses' must be a list of addresses");
  expect_error("clusterServersConfig:\n  nodeAddresses:\n  - [redis://h:1]\n",
               "3:5",
               "'nodeAddresses': an address must be a string, not a "
               "list");
  expect_error("singleServerConfig: redis://h\n", "1:21",
               "'singleServerConfig' must be a mapping of keys, not a scalar");
  expect_error("- singleServerConfig\n", "1:1",
               "the top level must be a mapping of keys");
  expect_error("singleServerConfig:\n  address: redis://h\n"
               "  sslVerify: yes\n",
               "3:14", "'sslVerify' must be true or false, not 'yes'");
  expect_error("? [a, b]\n: 1\n", "1:3", "a key must be a name, not a list");
}

TH_CASE(error_values) {
  const char *head = "singleServerConfig:\n  address: redis://h\n";
  struct {
    const char *line, *pos, *want;
  } t[] = {
      {"  timeout: -5\n", "3:12",
       "'timeout' must be an integer from 1 to 2147483647, not '-5'"},
      {"  connectTimeout: 0\n", "3:19", "from 1 to"},
      {"  retryAttempts: -1\n", "3:18", "from 0 to"},
      {"  retryInterval: 1.5\n", "3:18", "not '1.5'"},
      {"  connectionPoolSize: 0\n", "3:23", "from 1 to"},
      {"  timeout: 10s\n", "3:12", "not '10s'"},
      {"  timeout: 2147483648\n", "3:12", "not '2147483648'"},
      {"  timeout: \" 5\"\n", "3:12", "not ' 5'"},
      {"  database: 1000001\n", "3:13", "from 0 to 1000000"},
      {"  sslVerificationMode: VERIFY\n", "3:24",
       "must be STRICT, CA_ONLY or NONE, not 'VERIFY'"},
      {"  sslEnableEndpointIdentification: no\n", "3:36",
       "must be true or false, not 'no'"},
      /* A boolean never turns every certificate check off. */
      {"  sslVerify: false\n", "3:14",
       "'sslVerify: false' would turn off every certificate check; write "
       "'sslVerificationMode: CA_ONLY'"},
      {"  username: u\n", "3:13", "'username' needs 'password' too"},
  };
  char text[256];
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    snprintf(text, sizeof text, "%s%s", head, t[i].line);
    expect_error(text, t[i].pos, t[i].want);
  }
  expect_error("lockWatchdogTimeout: 2\nsingleServerConfig:\n"
               "  address: redis://h\n",
               "1:22", "from 3 to");
  expect_error("sentinelServersConfig:\n  sentinelAddresses: [redis://s]\n"
               "  masterName: m\n  sentinelUsername: su\n",
               "4:21", "'sentinelUsername' needs 'sentinelPassword' too");
}

TH_CASE(error_addresses) {
  const char *single = "is not redis://host:port, rediss://host:port or "
                       "unix:///path/to/socket";
  const char *bad[] = {"http://h:1",      "redis://",        "redis://h:0",
                       "redis://h:x",     "redis://h:65536", "redis://h:1/2",
                       "redis://h?x=1",   "redis://:1",      "redis://[::1",
                       "unix://relative", "unix:///s?db=1",  "redis://a b:1",
                       "redis://h1,h2"};
  char text[256];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(text, sizeof text, "singleServerConfig:\n  address: '%s'\n",
             bad[i]);
    expect_error(text, "2:12", single);
  }
  /* Not echoed: the address may hold a password. */
  expect_error("singleServerConfig:\n  address: redis://u:secret@h\n", "2:12",
               "an address holds no credentials: give them as username and "
               "password");
  CHECK(strstr(dlock_last_error(), "secret") == NULL);
  expect_error("singleServerConfig:\n  password: x\n", "1:1",
               "singleServerConfig needs an address");
  expect_error("singleServerConfig:\n", "1:1",
               "singleServerConfig needs an address");
  expect_error("clusterServersConfig:\n  nodeAddresses: []\n", "1:1",
               "clusterServersConfig needs nodeAddresses");
  expect_error("clusterServersConfig:\n  password: x\n", "1:1",
               "clusterServersConfig needs nodeAddresses");
  expect_error("clusterServersConfig:\n  nodeAddresses:\n"
               "  - redis://a:1\n  - unix:///s\n",
               "4:5", "is not redis://host:port or rediss://host:port");
  expect_error("clusterServersConfig:\n  nodeAddresses:\n"
               "  - redis://a:1\n  - rediss://b:1\n",
               "4:5", "mixes redis:// and rediss:// addresses");
  expect_error("sentinelServersConfig:\n  sentinelAddresses: [redis://s]\n",
               "1:1", "sentinelServersConfig needs masterName");
}

TH_CASE(error_structure) {
  expect_error("singleServerConfig:\n  address: redis://a\n"
               "clusterServersConfig:\n  nodeAddresses: [redis://b]\n",
               "3:1",
               "a second server section 'clusterServersConfig' "
               "(singleServerConfig is at line 1, column 1): give exactly one");
  expect_error("singleServerConfig:\n  address: redis://a\n"
               "  timeout: 1\n  timeout: 2\n",
               "4:3", "duplicate key 'timeout' (first at line 3, column 3)");
  /* After a load that set the URL, a file without a server section is a
   * dlock-only second file (docs/config.md); on a fresh config, an error. */
  {
    dlock_config fresh;
    dlock_config_init(&fresh);
    CHECK_RC(load_text("lockWatchdogTimeout: 5000\n", &fresh), DLOCK_EINVAL);
    CHECK_MSG(strstr(dlock_last_error(), ":1:1: no server section"), "%s",
              dlock_last_error());
  }
  expect_error("password: x\n", "1:1",
               "a file without one may hold only dlock's own keys");
  expect_error("", "1:1", "empty");
  expect_error("# only a comment\n", "1:1", "empty");
  expect_error("singleServerConfig:\n  address: redis://a\n---\nthreads: 1\n",
               "4:1", "a second YAML document");
  /* YAML syntax errors, where libyaml finds them. */
  expect_error("singleServerConfig:\n  address: redis://a\n timeout: 5\n",
               "3:2",
               "YAML syntax error: did not find expected key (while parsing a "
               "block mapping at line 1, column 1)");
  expect_error("singleServerConfig:\n  address: redis://a: b\n", "2:21",
               "YAML syntax error: mapping values are not allowed");
  expect_error("singleServerConfig:\n  address: \"redis://a\n", "3:1",
               "YAML syntax error: found unexpected end of stream (while "
               "scanning a quoted scalar at line 2, column 12)");
  expect_error("singleServerConfig:\n  address: *nope\n", "2:12",
               "YAML syntax error: found undefined alias");
  expect_error("a: \xff\n", "1:4", "YAML syntax error: invalid");
  expect_error("a:\tb\n\tc: d\n", "2:1", "YAML syntax error");
}

/* A file nested, anchored or aliased past the bounds docs/config.md gives
 * (32 levels, 64 anchors, 64 aliases) is refused where it crosses them, in
 * time linear in its size: libyaml alone took 1.4 s on 40k '[', over 2 min
 * on a 1 MiB file of them, and 34 s on 50k anchors (issue 25, item 16). The
 * bounds themselves still load. */
static void expect_refused_fast(const char *what, const char *text, size_t n,
                                const char *pos, const char *want) {
  const char *path = th_tmpfile("big.yaml");
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  CHECK_EQ(fwrite(text, 1, n, f), n);
  CHECK_EQ(fclose(f), 0);
  dlock_config cfg;
  dlock_config_init(&cfg);
  int64_t t0 = th_now_ms();
  int rc = dlock_config_load(path, &cfg);
  int64_t took = th_now_ms() - t0;
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s:%s: ", path, pos);
  const char *e = dlock_last_error();
  CHECK_MSG(rc == DLOCK_EINVAL && strncmp(e, prefix, strlen(prefix)) == 0 &&
                strstr(e, want),
            "%s (%zu bytes): %s '%s', expected EINVAL '%s...%s'", what, n,
            dlock_err_name(rc), e, prefix, want);
  printf("%s (%zu bytes): refused in %lld ms\n", what, n, (long long)took);
  /* Generous: a linear load takes milliseconds; the old one minutes. */
  CHECK_MSG(took < 10000LL * th_timeout_mult(), "%s: %lld ms", what,
            (long long)took);
  dlock_config_dispose(&cfg);
}

/* n bytes of unit repeated (the last copy cut to fit). */
static char *repeat(const char *head, const char *unit, size_t n) {
  char *s = malloc(n + 1);
  CHECK(s != NULL);
  size_t h = strlen(head), u = strlen(unit);
  memcpy(s, head, h);
  for (size_t i = h; i < n; i++)
    s[i] = unit[(i - h) % u];
  s[n] = '\0';
  return s;
}

/* A growing text for the big files. */
typedef struct growing {
  char *p;
  size_t len, cap;
} growing;

static void addf(growing *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void addf(growing *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    CHECK(w >= 0);
    if ((size_t)w < t->cap - t->len) {
      t->len += (size_t)w;
      return;
    }
    t->cap = t->cap * 2 + (size_t)w + 64;
    CHECK((t->p = realloc(t->p, t->cap)) != NULL);
  }
}

static growing growing_new(void) {
  growing t = {malloc(64), 0, 64};
  CHECK(t.p != NULL);
  t.p[0] = '\0';
  return t;
}

TH_CASE(error_deep_nesting_and_many_anchors_refused_fast) {
  const size_t mib = 1u << 20; /* the largest file the loader reads */
  char *s = repeat("", "[", mib);
  expect_refused_fast("1 MiB of [", s, mib, "1:33",
                      "nested deeper than 32 levels of lists and mappings");
  free(s);
  s = repeat("", "{a: ", mib);
  expect_refused_fast("1 MiB of {a: ", s, mib, "1:129",
                      "nested deeper than 32 levels");
  free(s);
  /* Block mappings, one more space of indentation a line. */
  growing t = growing_new();
  for (int i = 0; i < 1400; i++)
    addf(&t, "%*sk:\n", i, "");
  expect_refused_fast("1400 indented keys", t.p, t.len, "33:33",
                      "nested deeper than 32 levels");
  t.len = 0;
  addf(&t, "threads:\n");
  for (int i = 0; i < 50000; i++)
    addf(&t, "- &a%d x\n", i);
  expect_refused_fast("50k anchors", t.p, t.len, "66:3",
                      "more than 64 anchors (&name)");
  t.len = 0;
  addf(&t, "threads:\n- &a x\n");
  for (int i = 0; i < 200000; i++)
    addf(&t, "- *a\n");
  expect_refused_fast("200k aliases", t.p, t.len, "67:3",
                      "more than 64 aliases (*name)");
  /* The bounds: 32 levels (the top mapping and 31 lists), 64 anchors and
   * 64 aliases load. */
  t.len = 0;
  addf(&t, "singleServerConfig:\n  address: redis://h\nthreads: ");
  char *open = repeat("", "[", 31), *close = repeat("", "]", 31);
  addf(&t, "%s%s\n", open, close);
  free(open);
  free(close);
  addf(&t, "nettyThreads:\n");
  for (int i = 0; i < 64; i++)
    addf(&t, "- &a%d x\n", i);
  addf(&t, "codec:\n");
  for (int i = 0; i < 64; i++)
    addf(&t, "- *a%d\n", i);
  dlock_config cfg;
  dlock_config_init(&cfg);
  int rc = load_text(t.p, &cfg);
  CHECK_MSG(rc == 0, "%s", dlock_last_error());
  CHECK_STR(cfg.url, "redis://h");
  dlock_config_dispose(&cfg);
  free(t.p);
}

TH_CASE(error_files_and_arguments) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  const char *missing = th_tmpfile("no-such.yaml");
  CHECK_RC(dlock_config_load(missing, &cfg), DLOCK_EINVAL);
  char want[512];
  snprintf(want, sizeof want, "%s:1:1: cannot open the file: No such file",
           missing);
  CHECK_MSG(strncmp(dlock_last_error(), want, strlen(want)) == 0, "'%s'",
            dlock_last_error());
  const char *dir = th_tmpfile("a-dir");
  CHECK_EQ(mkdir(dir, 0700), 0);
  CHECK_RC(dlock_config_load(dir, &cfg), DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(), ":1:1: cannot read the file: Is a "
                                       "directory") != NULL,
            "'%s'", dlock_last_error());
  const char *ok = write_file("ok.yaml", "singleServerConfig:\n"
                                         "  address: redis://h\n");
  CHECK_RC(dlock_config_load(NULL, &cfg), DLOCK_EINVAL);
  CHECK_RC(dlock_config_load(ok, NULL), DLOCK_EINVAL);
  dlock_config raw;
  memset(&raw, 0, sizeof raw);
  CHECK_RC(dlock_config_load(ok, &raw), DLOCK_EINVAL);
  CHECK(strstr(dlock_last_error(), "dlock_config_init") != NULL);
  CHECK(raw.url == NULL);
  dlock_config_dispose(&raw); /* not set up: left alone */
  dlock_config_dispose(NULL);
  dlock_config_dispose(&cfg); /* never loaded: nothing to do */
  CHECK(cfg.url == NULL);
  CHECK_OK(dlock_config_load(ok, &cfg));
  CHECK_STR(dlock_last_error(), "");
  dlock_config_dispose(&cfg);
}

/* ---- memory ------------------------------------------------------------ */

TH_CASE(dispose_and_reload) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text("singleServerConfig:\n"
                     "  address: redis://a:1\n"
                     "  timeout: 111\n"
                     "  sslCaFile: /a/ca.pem\n"
                     "  sslServerName: a.example\n",
                     &cfg));
  /* A field the caller sets itself after a load is the caller's. */
  cfg.tls_cert_file = "mine.crt";
  /* The second file sets the URL and the key only: the CA and the name
   * stay, although the first load's memory is gone. */
  CHECK_OK(load_text("singleServerConfig:\n"
                     "  address: redis://b:2\n"
                     "  sslKeyFile: /b/key.pem\n"
                     "  sslServerName: null\n",
                     &cfg));
  CHECK_STR(cfg.url, "redis://b:2");
  CHECK_EQ(cfg.command_timeout_ms, 111);
  CHECK_STR(cfg.tls_ca_file, "/a/ca.pem");
  CHECK_STR(cfg.tls_server_name, "a.example");
  CHECK_STR(cfg.tls_key_file, "/b/key.pem");
  CHECK_STR(cfg.tls_cert_file, "mine.crt");
  /* Many loads: ASan / valgrind would report what each one leaked. */
  for (int i = 0; i < 200; i++)
    CHECK_OK(load_text("singleServerConfig:\n"
                       "  address: redis://c:3\n"
                       "  sslCertFile: c.crt\n",
                       &cfg));
  CHECK_STR(cfg.tls_ca_file, "/a/ca.pem");
  CHECK_STR(cfg.tls_cert_file, "c.crt");
  dlock_config_dispose(&cfg);
  CHECK(cfg.url == NULL);
  CHECK(cfg.tls_ca_file == NULL);
  CHECK(cfg.tls_cert_file == NULL);
  CHECK(cfg.tls_key_file == NULL);
  CHECK(cfg.tls_server_name == NULL);
  CHECK_EQ(cfg.command_timeout_ms, 111); /* numbers keep their values */
  dlock_config_dispose(&cfg);            /* twice: nothing left to do */
  /* A failed load after a good one leaves the good one whole. */
  CHECK_OK(load_text("singleServerConfig:\n  address: redis://d:4\n", &cfg));
  CHECK_RC(load_text("singleServerConfig:\n  address: redis://e:5\n"
                     "  bogus: 1\n",
                     &cfg),
           DLOCK_EINVAL);
  CHECK_STR(cfg.url, "redis://d:4");
  dlock_config_dispose(&cfg);
}

/* ---- a caller built against an older dlock.h ------------------------------
 */

#define GUARD 0xA5
#define GUARD_LEN 64

static void check_guard(const unsigned char *p, size_t size) {
  for (size_t i = 0; i < GUARD_LEN; i++)
    CHECK_MSG(p[size + i] == GUARD, "byte %zu past a %zu-byte struct written",
              i, size);
}

/* The struct as a 0.1 program has it (no TLS fields, no `loaded`): a file
 * with a TLS key fails naming the key and the missing field; any other file
 * fails because the struct cannot record what a load allocates. Nothing is
 * written, not even past the struct. */
TH_CASE(older_struct) {
  size_t size = offsetof(dlock_config, tls_ca_file);
  unsigned char *p = malloc(size + GUARD_LEN);
  CHECK(p != NULL);
  memset(p, GUARD, size + GUARD_LEN);
  dlock_config *cfg = (dlock_config *)p;
  dlock_config_init_sized(cfg, size);
  unsigned char before[sizeof(dlock_config)];
  memcpy(before, p, size);
  CHECK_RC(load_text("singleServerConfig:\n"
                     "  address: rediss://h\n"
                     "  timeout: 5\n"
                     "  sslCaFile: ca.pem\n",
                     cfg),
           DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(),
                   ":4:3: 'sslCaFile' sets dlock_config.tls_ca_file, which "
                   "this program's dlock_config") != NULL,
            "'%s'", dlock_last_error());
  CHECK_RC(load_text("singleServerConfig:\n  address: redis://h\n", cfg),
           DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(), "predates dlock_config_load") != NULL,
            "'%s'", dlock_last_error());
  CHECK_EQ(memcmp(before, p, size), 0);
  check_guard(p, size);
  dlock_config_dispose(cfg);
  check_guard(p, size);
  free(p);
  /* A struct from before the retry delay fields: retryInterval loads,
   * retryDelay is refused naming the field. */
  size = offsetof(dlock_config, retry_delay);
  p = malloc(size + GUARD_LEN);
  CHECK(p != NULL);
  memset(p, GUARD, size + GUARD_LEN);
  cfg = (dlock_config *)p;
  dlock_config_init_sized(cfg, size);
  CHECK_OK(load_text("singleServerConfig:\n"
                     "  address: redis://h\n"
                     "  retryInterval: 250\n",
                     cfg));
  CHECK_EQ(cfg->retry_interval_ms, 250);
  check_guard(p, size);
  CHECK_RC(
      load_text("singleServerConfig:\n"
                "  address: redis://h\n"
                "  retryDelay: !<org.redisson.config.FullJitterDelay> {}\n",
                cfg),
      DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(),
                   ":3:3: 'retryDelay' sets dlock_config.retry_delay") != NULL,
            "'%s'", dlock_last_error());
  check_guard(p, size);
  dlock_config_dispose(cfg);
  check_guard(p, size);
  free(p);
}

/* ---- loaded configs used for real ------------------------------------------
 */

/* A client on the loaded config takes and releases a lock on r. */
static void lock_with(th_redis *r, const dlock_config *cfg, const char *name) {
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(cfg, &c));
  dlock_mutex *m = NULL;
  CHECK_OK(dlock_mutex_new(c, name, &m));
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_EQ(th_cmd_int(r, "HLEN %s", name), 1);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(th_cmd_int(r, "EXISTS %s", name), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TH_CASE(live_tcp_and_unix) {
  th_redis *r = th_redis_new(1, NULL);
  char text[512];
  snprintf(text, sizeof text,
           "lockWatchdogTimeout: 9000\n"
           "singleServerConfig:\n"
           "  address: \"redis://127.0.0.1:%d\"\n"
           "  connectTimeout: 2000\n"
           "  retryInterval: 100\n"
           "  connectionPoolSize: 2\n"
           "codec: !<org.redisson.codec.JsonJacksonCodec> {}\n",
           r->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text(text, &cfg));
  lock_with(r, &cfg, "cfg:tcp");
  snprintf(text, sizeof text, "singleServerConfig:\n  address: \"unix://%s\"\n",
           r->sock);
  CHECK_OK(load_text(text, &cfg));
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  /* The client copied what it needs: disposing the config is fine. */
  dlock_config_dispose(&cfg);
  dlock_mutex *m = NULL;
  CHECK_OK(dlock_mutex_new(c, "cfg:unix", &m));
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_EQ(th_cmd_int(r, "PTTL cfg:unix") > 8000, 1); /* the file's 9 s */
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* An ACL user whose password has every character a URL cares about, given
 * through ${VAR}; and the default user's password with a database over the
 * unix socket. */
TH_CASE(live_password_from_env) {
  th_redis *r = th_redis_new(1, "user alice on >P@ss:w/o%rd?&#+=x ~* &* +@all\n"
                                "requirepass defpw\n");
  CHECK_EQ(setenv("DLOCK_T_ALICE_PW", "P@ss:w/o%rd?&#+=x", 1), 0);
  CHECK_EQ(setenv("DLOCK_T_DEF_PW", "defpw", 1), 0);
  char text[512];
  const char *fmt = "singleServerConfig:\n"
                    "  address: redis://127.0.0.1:%d\n"
                    "  username: alice\n"
                    "  password: ${DLOCK_T_ALICE_PW}\n"
                    "  database: %d\n";
  snprintf(text, sizeof text, fmt, r->port, 0);
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text(text, &cfg));
  lock_with(r, &cfg, "cfg:acl");
  snprintf(text, sizeof text, fmt, r->port, 5);
  CHECK_OK(load_text(text, &cfg));
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_mutex *m = NULL;
  CHECK_OK(dlock_mutex_new(c, "cfg:db5", &m));
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_EQ(th_cmd_int(r, "EXISTS cfg:db5"), 0);
  redisReply *x = th_cmd(r, "CLIENT LIST");
  CHECK(x && x->type == REDIS_REPLY_STRING);
  CHECK_MSG(strstr(x->str, "user=alice") && strstr(x->str, "db=5"), "%s",
            x->str);
  freeReplyObject(x);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
  snprintf(text, sizeof text,
           "singleServerConfig:\n"
           "  address: unix://%s\n"
           "  password: ${DLOCK_T_DEF_PW}\n",
           r->sock);
  CHECK_OK(load_text(text, &cfg));
  lock_with(r, &cfg, "cfg:default");
  /* A wrong password is the server's refusal, not a config error. */
  CHECK_EQ(setenv("DLOCK_T_DEF_PW", "wrong", 1), 0);
  CHECK_OK(load_text(text, &cfg));
  c = NULL;
  CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_EAUTH);
  dlock_config_dispose(&cfg);
}

/* ---- Redisson's own files, every Redisson key, delay strategies ----------
 * (issue 28) */

/* Events the log hook got: config_ignored and retry lines, with the time
 * each came. */
typedef struct events {
  pthread_mutex_t mu;
  int n;
  char ev[128][16];
  char msg[128][400];
  int64_t at[128];
} events;

static void collect(void *arg, int level, const char *name, const char *event,
                    const char *msg) {
  (void)level;
  (void)name;
  events *e = arg;
  pthread_mutex_lock(&e->mu);
  if (e->n < 128) {
    snprintf(e->ev[e->n], sizeof e->ev[0], "%s", event);
    snprintf(e->msg[e->n], sizeof e->msg[0], "%s", msg);
    e->at[e->n] = th_now_ms();
    e->n++;
  }
  pthread_mutex_unlock(&e->mu);
}

static void events_init(events *e, dlock_config *cfg) {
  memset(e, 0, sizeof *e);
  pthread_mutex_init(&e->mu, NULL);
  cfg->log_fn = collect;
  cfg->log_arg = e;
  cfg->log_level = DLOCK_LOG_DEBUG;
}

/* Whether an event of kind ev has a message containing what. */
static int logged(events *e, const char *ev, const char *what) {
  pthread_mutex_lock(&e->mu);
  int found = 0;
  for (int i = 0; i < e->n && !found; i++)
    found = strcmp(e->ev[i], ev) == 0 && strstr(e->msg[i], what);
  pthread_mutex_unlock(&e->mu);
  return found;
}

static const char *fixture(const char *name) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/%s", DLOCK_TEST_CONFIG_DIR, name);
  return path;
}

/* Redisson's example files (tests/config/, copied unchanged from its
 * docs/configuration.md and repository) load and give their settings:
 * tagged values (codec, loadBalancer, failedSlaveNodeDetector...), the
 * current retryDelay (EqualJitterDelay, Duration strings), the older
 * retryInterval, top-level username/password. What dlock has no use for is
 * reported through the log hook when a client is made from the config.
 * Failed at 86b83ff: "'failedSlaveNodeDetector' does not belong ...". */
TH_CASE(redisson_doc_files_load_unchanged) {
  static const struct {
    const char *file, *url;
    int retry_delay, attempts, interval;
  } t[] = {
      {"redisson-single.yaml", "redis://127.0.0.1:6379/0",
       DLOCK_RETRY_EQUAL_JITTER, 4, 1500},
      {"redisson-cluster.yaml",
       "redis-cluster://127.0.0.1:7004,127.0.0.1:7001,127.0.0.1:7000",
       DLOCK_RETRY_EQUAL_JITTER, 4, 1500},
      {"redisson-sentinel.yaml",
       "redis-sentinel://127.0.0.1:26379,127.0.0.1:26389/mymaster/0",
       DLOCK_RETRY_EQUAL_JITTER, 4, 1500},
      {"redisson-3.x-single.yaml", "redis://127.0.0.1:6379/0",
       DLOCK_RETRY_CONSTANT, 3, 1500},
      {"redisson-3.x-cluster.yaml",
       "redis-cluster://127.0.0.1:7004,127.0.0.1:7001,127.0.0.1:7000",
       DLOCK_RETRY_CONSTANT, 3, 1500},
      {"redisson-3.x-sentinel.yaml",
       "redis-sentinel://127.0.0.1:26379,127.0.0.1:26389/mymaster/0",
       DLOCK_RETRY_CONSTANT, 3, 1500},
      {"redisson-spring-boot-test.yaml", "redis://:123456@127.0.0.1:6379",
       DLOCK_RETRY_CONSTANT, 3, 1500},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    dlock_config cfg;
    dlock_config_init(&cfg);
    int rc = dlock_config_load(fixture(t[i].file), &cfg);
    CHECK_MSG(rc == 0, "%s: %s", t[i].file, dlock_last_error());
    CHECK_STR(cfg.url, t[i].url);
    CHECK_EQ(cfg.retry_delay, t[i].retry_delay);
    CHECK_EQ(cfg.retry_attempts, t[i].attempts);
    CHECK_EQ(cfg.retry_interval_ms, t[i].interval);
    if (t[i].retry_delay == DLOCK_RETRY_EQUAL_JITTER) {
      CHECK_EQ(cfg.retry_base_delay_ms, 1000); /* PT1S */
      CHECK_EQ(cfg.retry_max_delay_ms, 2000);  /* PT2S */
    }
    if (i != 6) {
      CHECK_EQ(cfg.connect_timeout_ms, 10000);
      CHECK_EQ(cfg.command_timeout_ms, 3000);
      CHECK_EQ(cfg.pool_size, 64);
    }
    CHECK_EQ(cfg.watchdog_timeout_ms, 30000);
    CHECK(cfg.client_name == NULL); /* clientName: null */
    /* The ignored settings, at client creation (lazy: no server needed;
     * the cluster and sentinel URLs need one, and fail after logging). */
    events e;
    events_init(&e, &cfg);
    cfg.lazy_connect = 1;
    cfg.retry_attempts = 0;
    cfg.connect_timeout_ms = 200;
    dlock_client *c = NULL;
    if (dlock_client_new(&cfg, &c) == 0)
      dlock_client_free(c);
    if (i != 6) {
      CHECK_MSG(logged(&e, "config_ignored", "'codec' at the top level"),
                "%s: no config_ignored event for codec", t[i].file);
      CHECK(logged(&e, "config_ignored", "'idleConnectionTimeout' in "));
      CHECK(logged(&e, "config_ignored", t[i].file));
    }
    if (strstr(t[i].file, "cluster") || strstr(t[i].file, "sentinel"))
      CHECK(logged(&e, "config_ignored", "'loadBalancer'") &&
            logged(&e, "config_ignored", "'failedSlaveNodeDetector'"));
    if (i < 3)
      CHECK(logged(&e, "config_ignored", "'reconnectionDelay'"));
    /* clientName: null and password: null are "not set", not ignored. */
    CHECK(!logged(&e, "config_ignored", "'clientName'"));
    CHECK(!logged(&e, "config_ignored", "'password'"));
    /* The event-loop client reports them too. */
    if (i == 0) {
      events e2;
      events_init(&e2, &cfg);
      dlock_async *a = NULL;
      CHECK_OK(dlock_async_new(&cfg, &a));
      dlock_async_free(a);
      CHECK(logged(&e2, "config_ignored", "'codec' at the top level"));
      CHECK_EQ(e2.n, e.n);
    }
    dlock_config_dispose(&cfg);
  }
  /* dlock has no replicated mode: the example is refused with the reason. */
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_RC(dlock_config_load(fixture("redisson-replicated.yaml"), &cfg),
           DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(),
                   ":2:1: 'replicatedServersConfig': not supported"),
            "%s", dlock_last_error());
}

/* Every property of Redisson's Config, BaseConfig,
 * BaseMasterSlaveServersConfig, SingleServerConfig, SentinelServersConfig
 * and ClusterServersConfig (3.x to 4.x, read from its sources) is accepted,
 * with tagged mapping and tagged scalar values too. Failed at 86b83ff on
 * pingTimeout, credentialsReapplyInterval, failedSlaveNodeDetector... */
TH_CASE(every_redisson_key_accepted) {
  static const char *const root[] = {"addressResolverGroupFactory",
                                     "cleanUpKeysAmount",
                                     "codec",
                                     "codecProvider",
                                     "commandMapper",
                                     "connectionListener",
                                     "credentialsResolver",
                                     "decodeInExecutor",
                                     "eventLoopGroup",
                                     "executor",
                                     "fairLockWaitTimeout",
                                     "keepPubSubOrder",
                                     "lazyInitialization",
                                     "lockWatchdogBatchSize",
                                     "maxCleanUpDelay",
                                     "minCleanUpDelay",
                                     "nameMapper",
                                     "nettyExecutor",
                                     "nettyHook",
                                     "nettyThreads",
                                     "protocol",
                                     "redissonReferenceEnabled",
                                     "referenceCodecProvider",
                                     "referenceEnabled",
                                     "reliableTopicWatchdogTimeout",
                                     "resolverProvider",
                                     "sslCiphers",
                                     "sslKeyManagerFactory",
                                     "sslKeystoreType",
                                     "sslProtocols",
                                     "sslProvider",
                                     "sslTrustManagerFactory",
                                     "tcpKeepAlive",
                                     "tcpKeepAliveCount",
                                     "tcpKeepAliveIdle",
                                     "tcpKeepAliveInterval",
                                     "tcpNoDelay",
                                     "tcpUserTimeout",
                                     "threads",
                                     "transportMode",
                                     "useLinuxNativeEpoll",
                                     "useScriptCache",
                                     "useThreadClassLoader",
                                     "valkeyCapabilities",
                                     NULL};
  static const char *const base[] = {"commandMapper",
                                     "credentialsReapplyInterval",
                                     "credentialsResolver",
                                     "failedAttempts",
                                     "idleConnectionTimeout",
                                     "keepAlive",
                                     "nameMapper",
                                     "pingConnection",
                                     "pingConnectionInterval",
                                     "pingTimeout",
                                     "reconnectionDelay",
                                     "reconnectionTimeout",
                                     "sslCiphers",
                                     "sslKeyManagerFactory",
                                     "sslKeystoreType",
                                     "sslProtocols",
                                     "sslProvider",
                                     "sslTrustManagerFactory",
                                     "subscriptionTimeout",
                                     "subscriptionsPerConnection",
                                     "tcpKeepAliveCount",
                                     "tcpKeepAliveIdle",
                                     "tcpKeepAliveInterval",
                                     "tcpNoDelay",
                                     "tcpUserTimeout",
                                     "subscriptionConnectionMinimumIdleSize",
                                     "subscriptionConnectionPoolSize",
                                     "dnsMonitoringInterval",
                                     "dnsMonitoringTimes",
                                     NULL};
  static const char *const ms[] = {"failedSlaveCheckInterval",
                                   "failedSlaveNodeDetector",
                                   "failedSlaveReconnectionInterval",
                                   "fallbackLoadingToMaster",
                                   "loadBalancer",
                                   "masterConnectionMinimumIdleSize",
                                   "readMode",
                                   "slaveConnectionMinimumIdleSize",
                                   "slaveConnectionPoolSize",
                                   "slaveSubscriptionConnectionMinimumIdleSize",
                                   "slaveSubscriptionConnectionPoolSize",
                                   "subscriptionMode",
                                   "scanInterval",
                                   "natMapper",
                                   "natMap",
                                   NULL};
  static const char *const single[] = {"connectionMinimumIdleSize",
                                       "dnsMonitoring", NULL};
  static const char *const cluster[] = {"checkSlotsCoverage",
                                        "checkMasterLinkStatus",
                                        "shardedSubscriptionMode", NULL};
  static const char *const sentinel[] = {"checkSentinelsList",
                                         "checkSlaveStatusWithSyncing",
                                         "sentinelsDiscovery", NULL};
  static const struct {
    const char *section, *head;
    const char *const *lists[3];
  } t[] = {
      {"singleServerConfig", "  address: redis://h:1\n", {base, single, NULL}},
      {"clusterServersConfig",
       "  nodeAddresses: [redis://h:1]\n  database: 0\n",
       {base, ms, cluster}},
      {"sentinelServersConfig",
       "  sentinelAddresses: [redis://h:1]\n  masterName: m\n",
       {base, ms, sentinel}},
  };
  for (size_t s = 0; s < sizeof t / sizeof t[0]; s++) {
    char *text = calloc(1, 16384);
    size_t n = 0, keys = 0;
    CHECK(text != NULL);
    for (int i = 0; root[i]; i++, keys++) /* mapping, scalar, tagged */
      n += (size_t)snprintf(text + n, 16384 - n,
                            i % 3 == 0   ? "%s: !<org.redisson.X%d> {}\n"
                            : i % 3 == 1 ? "%s: \"v%d\"\n"
                                         : "%s: !<java.lang.Y> \"v%d\"\n",
                            root[i], i);
    n += (size_t)snprintf(text + n, 16384 - n, "%s:\n%s", t[s].section,
                          t[s].head);
    for (int l = 0; l < 3 && t[s].lists[l]; l++)
      for (int i = 0; t[s].lists[l][i]; i++, keys++)
        n += (size_t)snprintf(text + n, 16384 - n,
                              i % 2 ? "  %s: !<org.redisson.Z> {a: 1}\n"
                                    : "  %s: 5\n",
                              t[s].lists[l][i]);
    dlock_config cfg;
    dlock_config_init(&cfg);
    int rc = load_text(text, &cfg);
    CHECK_MSG(rc == 0, "%s: %s", t[s].section, dlock_last_error());
    events e;
    events_init(&e, &cfg);
    cfg.lazy_connect = 1;
    cfg.retry_attempts = 0;
    cfg.connect_timeout_ms = 200;
    dlock_client *c = NULL;
    if (dlock_client_new(&cfg, &c) == 0)
      dlock_client_free(c);
    CHECK_MSG((size_t)e.n == keys, "%s: %d config_ignored events for %zu keys",
              t[s].section, e.n, keys);
    dlock_config_dispose(&cfg);
    free(text);
  }
}

/* java.time.Duration values and the four delay kinds of retryDelay. */
TH_CASE(retry_delay_values) {
  static const struct {
    const char *value;
    int kind, base, max, interval;
  } ok[] = {
      {"!<org.redisson.config.EqualJitterDelay> {baseDelay: PT1S, maxDelay: "
       "PT2S}",
       DLOCK_RETRY_EQUAL_JITTER, 1000, 2000, 1500},
      {"!<org.redisson.config.FullJitterDelay> {baseDelay: PT0.1S, maxDelay: "
       "PT10S}",
       DLOCK_RETRY_FULL_JITTER, 100, 10000, 1500},
      {"!<org.redisson.config.DecorrelatedJitterDelay>\n    baseDelay: "
       "PT0.25S\n    maxDelay: PT1M30S",
       DLOCK_RETRY_DECORRELATED_JITTER, 250, 90000, 1500},
      {"!<org.redisson.config.ConstantDelay> {delay: PT0.75S}",
       DLOCK_RETRY_CONSTANT, 1000, 2000, 750},
      /* SnakeYAML's !! form, Jackson's seconds, an empty mapping
       * (Redisson's defaults: 100 ms, 1 s), hours and days */
      {"!!org.redisson.config.EqualJitterDelay {baseDelay: 0.5, maxDelay: 3}",
       DLOCK_RETRY_EQUAL_JITTER, 500, 3000, 1500},
      {"!<org.redisson.config.FullJitterDelay> {}", DLOCK_RETRY_FULL_JITTER,
       100, 1000, 1500},
      {"!<org.redisson.config.EqualJitterDelay> {baseDelay: PT0.0015S, "
       "maxDelay: P1DT1H}",
       DLOCK_RETRY_EQUAL_JITTER, 1, 90000000, 1500},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    char text[512];
    snprintf(text, sizeof text,
             "singleServerConfig:\n  address: redis://h:1\n  retryDelay: %s\n",
             ok[i].value);
    dlock_config cfg;
    dlock_config_init(&cfg);
    int rc = load_text(text, &cfg);
    CHECK_MSG(rc == 0, "%s: %s", ok[i].value, dlock_last_error());
    CHECK_EQ(cfg.retry_delay, ok[i].kind);
    CHECK_EQ(cfg.retry_base_delay_ms, ok[i].base);
    CHECK_EQ(cfg.retry_max_delay_ms, ok[i].max);
    CHECK_EQ(cfg.retry_interval_ms, ok[i].interval);
    dlock_config_dispose(&cfg);
  }
  /* retryInterval after retryDelay: a constant delay, as Redisson's
   * setRetryInterval gives. */
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text("singleServerConfig:\n  address: redis://h:1\n"
                     "  retryDelay: !<org.redisson.config.FullJitterDelay> "
                     "{baseDelay: PT1S, maxDelay: PT2S}\n"
                     "  retryInterval: 300\n",
                     &cfg));
  CHECK_EQ(cfg.retry_delay, DLOCK_RETRY_CONSTANT);
  CHECK_EQ(cfg.retry_interval_ms, 300);
  dlock_config_dispose(&cfg);
  const char *head = "singleServerConfig:\n  address: redis://h:1\n";
  char text[512];
#define BAD(value, pos, want)                                                  \
  do {                                                                         \
    snprintf(text, sizeof text, "%s  retryDelay: %s\n", head, value);          \
    expect_error(text, pos, want);                                             \
  } while (0)
  BAD("{baseDelay: PT1S, maxDelay: PT2S}", "3:15",
      "'retryDelay' must be a delay strategy");
  BAD("!<org.redisson.config.Nope> {}", "3:15", "must be a delay strategy");
  BAD("1500", "3:15", "must be a delay strategy");
  BAD("!<org.redisson.config.EqualJitterDelay> {baseDelay: PT1S}", "3:15",
      "needs both baseDelay and maxDelay");
  BAD("!<org.redisson.config.EqualJitterDelay> {delay: PT1S}", "3:56",
      "EqualJitterDelay takes baseDelay and maxDelay");
  BAD("!<org.redisson.config.ConstantDelay> {baseDelay: PT1S}", "3:53",
      "ConstantDelay takes delay");
  static const char *const bad_durations[] = {
      "1s",     "PT",  "P",    "-PT1S",      "PT1S2M", "PT1.S",
      "PT1H1H", "P1H", "PT1X", "PT2147484S", "x",      "1e3"};
  for (size_t i = 0; i < sizeof bad_durations / sizeof bad_durations[0]; i++) {
    char v[128];
    snprintf(v, sizeof v,
             "!<org.redisson.config.ConstantDelay> {delay: \"%s\"}",
             bad_durations[i]);
    BAD(v, "3:60", "delay must be a duration (PT1S");
  }
#undef BAD
}

/* The Redisson file's settings reach the server: clientName is the
 * connections' name (CLIENT LIST name=), lockWatchdogTimeout the lease,
 * timeouts and the retry policy are the config's. The address comes from
 * ${VAR}, which Redisson substitutes too: the file stays Redisson's. */
TH_CASE(redisson_file_settings_honoured) {
  th_redis *r = th_redis_new(1, NULL);
  char port[16];
  snprintf(port, sizeof port, "%d", r->port);
  CHECK_EQ(setenv("DLOCK_T_REDIS_PORT", port, 1), 0);
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text(
      "singleServerConfig:\n"
      "  idleConnectionTimeout: 10000\n"
      "  connectTimeout: 2500\n"
      "  timeout: 2000\n"
      "  retryAttempts: 2\n"
      "  retryDelay: !<org.redisson.config.EqualJitterDelay> {baseDelay: "
      "PT0.2S, maxDelay: PT0.8S}\n"
      "  reconnectionDelay: !<org.redisson.config.EqualJitterDelay> "
      "{baseDelay: PT0.1S, maxDelay: PT10S}\n"
      "  subscriptionsPerConnection: 5\n"
      "  clientName: \"orders-service\"\n"
      "  address: \"redis://127.0.0.1:${DLOCK_T_REDIS_PORT}\"\n"
      "  connectionPoolSize: 8\n"
      "  pingConnectionInterval: 30000\n"
      "lockWatchdogTimeout: 6000\n"
      "codec: !<org.redisson.codec.Kryo5Codec> {}\n"
      "transportMode: \"NIO\"\n",
      &cfg));
  CHECK_EQ(cfg.connect_timeout_ms, 2500);
  CHECK_EQ(cfg.command_timeout_ms, 2000);
  CHECK_EQ(cfg.retry_attempts, 2);
  CHECK_EQ(cfg.retry_delay, DLOCK_RETRY_EQUAL_JITTER);
  CHECK_EQ(cfg.pool_size, 8);
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_config_dispose(&cfg);
  dlock_mutex *m = NULL;
  CHECK_OK(dlock_mutex_new(c, "cfg:honoured", &m));
  CHECK_OK(dlock_mutex_lock(m));
  long long pttl = th_cmd_int(r, "PTTL cfg:honoured");
  CHECK_MSG(pttl > 3000 && pttl <= 6000, "PTTL %lld: not the file's 6 s", pttl);
  redisReply *x = th_cmd(r, "CLIENT LIST");
  CHECK(x && x->type == REDIS_REPLY_STRING);
  CHECK_MSG(strstr(x->str, "name=orders-service "), "%s", x->str);
  freeReplyObject(x);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* The gaps between retries against a stopped server follow retryDelay.
 * Each "retry" event says the pause it is about to take; the test checks
 * that pause against the kind's range and the gap to the next try against
 * the pause (generous upper slack for a loaded machine). */
static void measure_retries(const char *delay, int kind) {
  /* A port bound but never listened on: every connection is refused, and
   * no other process can take the port while the test holds it. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0);
  int port = ntohs(sa.sin_port);
  char text[512];
  snprintf(text, sizeof text,
           "singleServerConfig:\n"
           "  address: \"redis://127.0.0.1:%d\"\n"
           "  connectTimeout: 1000\n"
           "  retryAttempts: 4\n"
           "  retryDelay: %s\n",
           port, delay);
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(load_text(text, &cfg));
  cfg.lazy_connect = 1;
  events e;
  events_init(&e, &cfg);
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_config_dispose(&cfg);
  dlock_mutex *m = NULL;
  CHECK_OK(dlock_mutex_new(c, "cfg:retry", &m));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_mutex_lock(m), DLOCK_ECONN);
  int64_t end = th_now_ms();
  dlock_mutex_free(m);
  dlock_client_free(c);
  close(fd);
  /* the pauses of the 4 retries, from the events */
  int64_t pause[4], at[5];
  int k = 0;
  for (int i = 0; i < e.n && k < 4; i++) {
    if (strcmp(e.ev[i], "retry") != 0)
      continue;
    /* A pause of 0 (full jitter draws from [0, e]) is told as "re-sent at
     * once" rather than "the next in 0 ms". */
    const char *p = strstr(e.msg[i], "the next in ");
    if (p)
      pause[k] = atoll(p + 12);
    else if (strstr(e.msg[i], "re-sent at once"))
      pause[k] = 0;
    else
      continue;
    at[k++] = e.at[i];
  }
  CHECK_MSG(k == 4, "%d retry events (want 4)", k);
  at[4] = end;
  int64_t slack = 300LL * th_timeout_mult();
  int64_t prev = 100; /* decorrelated: the first pause's "previous" */
  for (int i = 0; i < 4; i++) {
    int64_t b = 100, mx = 400, e2 = b << i < mx ? b << i : mx;
    int64_t lo = 0, hi = 0;
    switch (kind) {
    case DLOCK_RETRY_EQUAL_JITTER:
      lo = e2 / 2, hi = e2;
      break;
    case DLOCK_RETRY_FULL_JITTER:
      lo = 0, hi = e2;
      break;
    case DLOCK_RETRY_DECORRELATED_JITTER:
      lo = b, hi = b + 3 * prev - 1 < mx ? b + 3 * prev - 1 : mx;
      prev = pause[i];
      break;
    default:
      lo = hi = 150;
    }
    CHECK_MSG(pause[i] >= lo && pause[i] <= hi,
              "%s: pause %d is %lld ms, not in [%lld, %lld]", delay, i,
              (long long)pause[i], (long long)lo, (long long)hi);
    int64_t gap = at[i + 1] - at[i];
    CHECK_MSG(gap >= pause[i] - 2 && gap <= pause[i] + slack,
              "%s: retry %d came %lld ms after the previous try, the pause "
              "was %lld ms",
              delay, i, (long long)gap, (long long)pause[i]);
  }
  printf("%s: pauses %lld %lld %lld %lld ms, call %lld ms\n", delay,
         (long long)pause[0], (long long)pause[1], (long long)pause[2],
         (long long)pause[3], (long long)(end - t0));
}

TH_CASE(retry_delay_kinds_measured) {
  measure_retries("!<org.redisson.config.EqualJitterDelay> {baseDelay: "
                  "PT0.1S, maxDelay: PT0.4S}",
                  DLOCK_RETRY_EQUAL_JITTER);
  measure_retries("!<org.redisson.config.FullJitterDelay> {baseDelay: "
                  "PT0.1S, maxDelay: PT0.4S}",
                  DLOCK_RETRY_FULL_JITTER);
  measure_retries("!<org.redisson.config.DecorrelatedJitterDelay> "
                  "{baseDelay: PT0.1S, maxDelay: PT0.4S}",
                  DLOCK_RETRY_DECORRELATED_JITTER);
  measure_retries("!<org.redisson.config.ConstantDelay> {delay: PT0.15S}",
                  DLOCK_RETRY_CONSTANT);
}

/* dlock's own settings (PEM files, syncReplicas...) go in a second file
 * that Redisson never reads, loaded after the Redisson file: it sets no
 * server and keeps the first file's URL. */
TH_CASE(dlock_settings_in_a_second_file) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_OK(dlock_config_load(fixture("redisson-single.yaml"), &cfg));
  CHECK_OK(load_text("# dlock.yaml\n"
                     "sslCaFile: /etc/ssl/redis/ca.pem\n"
                     "sslCertFile: /etc/ssl/redis/client.pem\n"
                     "sslKeyFile: /etc/ssl/redis/client.key\n"
                     "sslServerName: redis.internal\n"
                     "syncReplicas: 1\n",
                     &cfg));
  CHECK_STR(cfg.url, "redis://127.0.0.1:6379/0");
  CHECK_STR(cfg.tls_ca_file, "/etc/ssl/redis/ca.pem");
  CHECK_STR(cfg.tls_server_name, "redis.internal");
  CHECK_EQ(cfg.sync_replicas, 1);
  CHECK_EQ(cfg.retry_delay, DLOCK_RETRY_EQUAL_JITTER); /* the first file's */
  /* The ignored settings of the first file are still reported. */
  events e;
  events_init(&e, &cfg);
  cfg.lazy_connect = 1;
  dlock_client *c = NULL;
  if (dlock_client_new(&cfg, &c) == 0)
    dlock_client_free(c);
  CHECK(logged(&e, "config_ignored", "redisson-single.yaml"));
  dlock_config_dispose(&cfg);
  /* A certificate without its key names the YAML keys. */
  dlock_config_init(&cfg);
  CHECK_OK(dlock_config_load(fixture("redisson-single.yaml"), &cfg));
  CHECK_RC(load_text("sslCertFile: /etc/ssl/redis/client.pem\n", &cfg),
           DLOCK_EINVAL);
  CHECK_MSG(
      strstr(dlock_last_error(), ":1:1: 'sslCertFile' needs 'sslKeyFile' too"),
      "%s", dlock_last_error());
  dlock_config_dispose(&cfg);
}

TH_MAIN()

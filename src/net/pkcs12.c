/*
 * pkcs12.c -- PKCS12 key stores for TLS: Redisson's sslTruststore (trusted
 * CA certificates) and sslKeystore (the client's certificate and key), as
 * dlock_config.tls_truststore / tls_keystore with their passwords.
 *
 * Java writes two other formats under the same keys: JKS and JCEKS (magic
 * 0xFEEDFEED / 0xCECECECE), which OpenSSL cannot read; they are refused
 * with the keytool command that converts them. Paths may be plain or
 * Redisson's URL form file:/path, file:///path, file:relative.
 *
 * Messages name the setting as the caller wrote it: the YAML key when the
 * config came from a file (dlock__config_key), else the C field. (Store
 * paths and the Java formats: config/keystore.c.)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pkcs12.h>
#include <openssl/ssl.h>

#include "net/net.h"

/* A key store larger than this is not one. */
#define STORE_MAX (1u << 20)

/* *out = the parsed PKCS12 file at path (the setting `key`), or an error. */
static int read_store(const char *key, const char *path, PKCS12 **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f)
    return dlock__fail(DLOCK_ETLS, "TLS: cannot open %s '%s': %s", key, path,
                       strerror(errno));
  static const size_t cap = STORE_MAX + 1;
  unsigned char *buf = dlock__malloc(cap);
  size_t n = buf ? fread(buf, 1, cap, f) : 0;
  fclose(f);
  if (!buf)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  const char *kind;
  char hint[1024];
  int rc = 0;
  if (dlock__store_java_kind(buf, n, &kind)) {
    dlock__store_java_hint(hint, sizeof hint, key, path, kind);
    rc = dlock__fail(DLOCK_EINVAL, "TLS: %s", hint);
  } else if (n > STORE_MAX) {
    rc = dlock__fail(DLOCK_ETLS,
                     "TLS: %s '%s' is larger than %u bytes: not "
                     "a key store",
                     key, path, STORE_MAX);
  } else {
    const unsigned char *p = buf;
    *out = d2i_PKCS12(NULL, &p, (long)n);
    if (!*out) {
      ERR_clear_error();
      rc = dlock__fail(DLOCK_ETLS,
                       "TLS: %s '%s' is not a PKCS12 file (dlock reads "
                       "PKCS12 key stores; PEM files go in sslCaFile / "
                       "sslCertFile + sslKeyFile)",
                       key, path);
    }
  }
  free(buf);
  return rc;
}

/* Opens the store: *pkey, *cert and *ca as PKCS12_parse gives them. */
static int open_store(const char *key, const char *pass_key, const char *path,
                      const char *pass, EVP_PKEY **pkey, X509 **cert,
                      STACK_OF(X509) * *ca) {
  PKCS12 *p12;
  int rc = read_store(key, path, &p12);
  if (rc)
    return rc;
  /* No password given: a store without one, or with the empty one. */
  const char *tries[2] = {pass, pass ? pass : ""};
  int ok = 0;
  for (int i = 0; i < 2 && !ok; i++) {
    if (PKCS12_mac_present(p12) && !PKCS12_verify_mac(p12, tries[i], -1))
      continue;
    ok = PKCS12_parse(p12, tries[i], pkey, cert, ca) == 1;
  }
  PKCS12_free(p12);
  if (ok)
    return 0;
  char e[200];
  dlock__tls_err_text(e, sizeof e, 1);
  return dlock__fail(DLOCK_ETLS,
                     "TLS: cannot open %s '%s': wrong or missing %s, or an "
                     "encryption this OpenSSL does not offer (re-export it "
                     "with 'openssl pkcs12 -export'): %s",
                     key, path, pass_key, e);
}

#define KEY(f, c) dlock__config_key(cfg, offsetof(dlock_config, f), c)

static int load_trust(SSL_CTX *ctx, const dlock_config *cfg) {
  const char *key = KEY(tls_truststore, "tls_truststore");
  const char *path = dlock__store_path(cfg->tls_truststore);
  EVP_PKEY *pkey = NULL;
  X509 *cert = NULL;
  STACK_OF(X509) *ca = NULL;
  int rc =
      open_store(key, KEY(tls_truststore_password, "tls_truststore_password"),
                 path, cfg->tls_truststore_password, &pkey, &cert, &ca);
  if (rc)
    return rc;
  X509_STORE *st = SSL_CTX_get_cert_store(ctx);
  int n = 0;
  if (cert && X509_STORE_add_cert(st, cert) == 1)
    n++;
  for (int i = 0; ca && i < sk_X509_num(ca); i++)
    if (X509_STORE_add_cert(st, sk_X509_value(ca, i)) == 1)
      n++;
  ERR_clear_error(); /* a certificate already in the store */
  EVP_PKEY_free(pkey);
  X509_free(cert);
  sk_X509_pop_free(ca, X509_free);
  if (n == 0)
    return dlock__fail(DLOCK_ETLS, "TLS: %s '%s' holds no certificate", key,
                       path);
  return 0;
}

static int load_key(SSL_CTX *ctx, const dlock_config *cfg) {
  const char *key = KEY(tls_keystore, "tls_keystore");
  const char *path = dlock__store_path(cfg->tls_keystore);
  EVP_PKEY *pkey = NULL;
  X509 *cert = NULL;
  STACK_OF(X509) *ca = NULL;
  int rc = open_store(key, KEY(tls_keystore_password, "tls_keystore_password"),
                      path, cfg->tls_keystore_password, &pkey, &cert, &ca);
  if (rc)
    return rc;
  char e[200];
  if (!pkey || !cert)
    rc = dlock__fail(DLOCK_ETLS,
                     "TLS: %s '%s' holds no private key with its "
                     "certificate (a client key store needs both)",
                     key, path);
  else if (SSL_CTX_use_certificate(ctx, cert) != 1 ||
           SSL_CTX_use_PrivateKey(ctx, pkey) != 1 ||
           SSL_CTX_check_private_key(ctx) != 1)
    rc = dlock__fail(DLOCK_ETLS,
                     "TLS: cannot use the key and certificate of "
                     "%s '%s': %s",
                     key, path, dlock__tls_err_text(e, sizeof e, 1));
  for (int i = 0; rc == 0 && ca && i < sk_X509_num(ca); i++)
    if (SSL_CTX_add1_chain_cert(ctx, sk_X509_value(ca, i)) != 1)
      rc = dlock__fail(DLOCK_ETLS, "TLS: cannot use the chain of %s '%s': %s",
                       key, path, dlock__tls_err_text(e, sizeof e, 1));
  EVP_PKEY_free(pkey);
  X509_free(cert);
  sk_X509_pop_free(ca, X509_free);
  return rc;
}

int dlock__tls_load_pkcs12(void *ctx_, const dlock_config *cfg) {
  SSL_CTX *ctx = ctx_;
  if (cfg->tls_keystore && (cfg->tls_cert_file || cfg->tls_key_file))
    return dlock__fail(
        DLOCK_EINVAL, "TLS: give the client certificate once: %s, or %s and %s",
        KEY(tls_keystore, "tls_keystore"), KEY(tls_cert_file, "tls_cert_file"),
        KEY(tls_key_file, "tls_key_file"));
  int rc = cfg->tls_truststore ? load_trust(ctx, cfg) : 0;
  if (rc == 0 && cfg->tls_keystore)
    rc = load_key(ctx, cfg);
  return rc;
}

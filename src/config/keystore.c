/*
 * keystore.c -- key store files as a config names them (Redisson's
 * sslTruststore / sslKeystore): a path in plain or Redisson's URL form
 * (file:/path, file:///path, file:relative), and the two Java formats
 * OpenSSL cannot read (JKS, JCEKS: magic 0xFEEDFEED / 0xCECECECE), refused
 * with the keytool command that converts them. No OpenSSL here: the config
 * file loader (config.c) checks a store early, pkcs12.c loads it.
 */
#include <stdio.h>
#include <string.h>

#include "config/config.h"

const char *dlock__store_path(const char *p) {
  if (strncmp(p, "file://", 7) == 0 && p[7] == '/')
    return p + 7;
  if (strncmp(p, "file:", 5) == 0)
    return p + 5;
  return p;
}

int dlock__store_java_kind(const unsigned char *b, size_t n,
                           const char **kind) {
  static const struct {
    unsigned char magic[4];
    const char *name;
  } t[] = {{{0xFE, 0xED, 0xFE, 0xED}, "JKS"},
           {{0xCE, 0xCE, 0xCE, 0xCE}, "JCEKS"}};
  for (size_t i = 0; n >= 4 && i < sizeof t / sizeof t[0]; i++)
    if (memcmp(b, t[i].magic, 4) == 0) {
      *kind = t[i].name;
      return 1;
    }
  return 0;
}

int dlock__store_java_hint(char *buf, size_t len, const char *key,
                           const char *path, const char *kind) {
  return snprintf(
      buf, len,
      "%s '%s' is a Java keystore (%s), which dlock cannot read: convert it "
      "to PKCS12 with 'keytool -importkeystore -srcstoretype %s -srckeystore "
      "%s -deststoretype PKCS12 -destkeystore %s.p12' and name the .p12 file",
      key, path, kind, kind, path, path);
}

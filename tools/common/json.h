/*
 * json.h -- writing JSON values with stdio: strings (escaped, always valid
 * UTF-8) and numbers (NaN and infinities as null).
 */
#ifndef DLOCK_COMMON_JSON_H
#define DLOCK_COMMON_JSON_H

#include <stdio.h>

/* s as a JSON string literal, quotes included; NULL is written as "".
 * Each byte that is not part of valid UTF-8 (0x80-0xff) is written as the
 * escape of a lone low surrogate, \udc80-\udcff (Python's
 * "surrogateescape"): the output parses whatever s holds (a key name can
 * hold any bytes), two different byte strings never give the same string
 * (valid UTF-8 never encodes a surrogate, and valid sequences are written
 * as they are), and a reader gets the bytes back -- in Python,
 * s.encode("utf-8", "surrogateescape"). */
void dlc_json_str(FILE *f, const char *s);

/* v as a JSON number: integers without a fraction, others with %.6g;
 * null when v is NaN or infinite. */
void dlc_json_num(FILE *f, double v);

#endif

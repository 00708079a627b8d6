/*
 * json.h -- writing JSON values with stdio: strings (escaped, always valid
 * UTF-8) and numbers (NaN and infinities as null).
 */
#ifndef DLOCK_COMMON_JSON_H
#define DLOCK_COMMON_JSON_H

#include <stdio.h>

/* s as a JSON string literal, quotes included; NULL is written as "".
 * Bytes that are not valid UTF-8 become U+FFFD, so the output parses
 * whatever s holds (a key name can hold any bytes). */
void dlc_json_str(FILE *f, const char *s);

/* v as a JSON number: integers without a fraction, others with %.6g;
 * null when v is NaN or infinite. */
void dlc_json_num(FILE *f, double v);

#endif

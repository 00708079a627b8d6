/* json.c -- JSON strings and numbers (see json.h). */
#include "json.h"

#include <math.h>

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if the bytes there
 * are not one (stray continuation, overlong, surrogate, past U+10FFFF). */
static size_t utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80)
    return 1;
  size_t n = c >= 0xc2 && c <= 0xdf   ? 2
             : c >= 0xe0 && c <= 0xef ? 3
             : c >= 0xf0 && c <= 0xf4 ? 4
                                      : 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80)
      return 0;
  if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) ||
      (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f))
    return 0;
  return n;
}

/* The two-character escapes; other control bytes become \u00XX. */
static const char *const k_esc[0x60] = {['"'] = "\\\"",
                                        ['\\'] = "\\\\",
                                        ['\n'] = "\\n",
                                        ['\r'] = "\\r",
                                        ['\t'] = "\\t"};

/* One ASCII byte, escaped as JSON requires. */
static void put_ascii(FILE *f, unsigned char ch) {
  if (ch < sizeof k_esc / sizeof k_esc[0] && k_esc[ch])
    fputs(k_esc[ch], f);
  else if (ch < 0x20)
    fprintf(f, "\\u%04x", ch);
  else
    fputc(ch, f);
}

void dlc_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p < 0x80) {
      put_ascii(f, *p);
      continue;
    }
    size_t n = utf8_len(p);
    if (n == 0) {
      /* A byte that is not UTF-8 (0x80-0xff): the lone low surrogate
       * U+DC80-U+DCFF, as Python's "surrogateescape" does. No valid UTF-8
       * text encodes a surrogate, so distinct byte strings stay distinct
       * strings, and the bytes can be recovered. */
      fprintf(f, "\\udc%02x", *p);
    } else {
      fwrite(p, 1, n, f);
      p += n - 1;
    }
  }
  fputc('"', f);
}

void dlc_json_num(FILE *f, double v) {
  if (isnan(v) || isinf(v))
    fputs("null", f);
  else if (v == floor(v) && fabs(v) < 1e15)
    fprintf(f, "%.0f", v);
  else
    fprintf(f, "%.6g", v);
}

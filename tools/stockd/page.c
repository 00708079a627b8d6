/* page.c -- the page's files (page/page.html, page.css, page.js), compiled
 * in by embed.cmake, by path. GET / is page.html with "@PRODUCT@" replaced
 * by the first product (http.c); the page reads /stock (and, behind
 * dlock-rig --serve, /rig/state) itself. No external asset: the service
 * serves everything the page needs. */
#include <string.h>

#include "stockd.h"

extern const unsigned char sd_asset_page_html[], sd_asset_page_css[],
    sd_asset_page_js[];
extern const size_t sd_asset_page_html_len, sd_asset_page_css_len,
    sd_asset_page_js_len;

static const sd_asset g_assets[] = {
    {"/", "text/html; charset=utf-8", sd_asset_page_html,
     &sd_asset_page_html_len},
    {"/page.css", "text/css; charset=utf-8", sd_asset_page_css,
     &sd_asset_page_css_len},
    {"/page.js", "text/javascript; charset=utf-8", sd_asset_page_js,
     &sd_asset_page_js_len},
};

const sd_asset *sd_asset_find(const char *path) {
  for (size_t i = 0; i < sizeof g_assets / sizeof g_assets[0]; i++)
    if (strcmp(g_assets[i].path, path) == 0)
      return &g_assets[i];
  return NULL;
}

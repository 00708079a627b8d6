/* metrics.c -- dlock-stockd's counters (process-wide atomics, any
 * thread) and their Prometheus text exposition for GET /metrics. */
#include <event2/buffer.h>
#include <stdatomic.h>

#include "stockd.h"

static const char *const ep_names[SD_EP_N] = {
    "deduct_stock", "stock", "reset", "metrics", "healthz", "page", "other"};
/* status classes counted per endpoint: 2xx, 4xx, 5xx */
static atomic_llong g_requests[SD_EP_N][3];
static atomic_llong g_orders, g_soldout, g_duplicate, g_errors, g_gaveup;

/* lock wait histogram, upper bounds in microseconds (+Inf last) */
static const long long wait_bounds_us[] = {
    100, 500, 1000, 5000, 10000, 50000, 100000, 500000, 1000000, 5000000};
#define N_BOUNDS (sizeof wait_bounds_us / sizeof wait_bounds_us[0])
static atomic_llong g_wait_bucket[N_BOUNDS + 1];
static atomic_llong g_wait_sum_us, g_wait_count;

void sd_metrics_request(enum sd_endpoint ep, int status) {
  int c = status >= 500 ? 2 : status >= 400 ? 1 : 0;
  atomic_fetch_add(&g_requests[ep][c], 1);
}

void sd_metrics_purchase(int outcome, long long wait_us) {
  switch (outcome) {
  case SK_O_ORDER:
    atomic_fetch_add(&g_orders, 1);
    break;
  case SK_O_SOLDOUT:
    atomic_fetch_add(&g_soldout, 1);
    break;
  case SK_O_DUPLICATE:
    atomic_fetch_add(&g_duplicate, 1);
    break;
  case SK_O_DEADLOCK:
    atomic_fetch_add(&g_gaveup, 1);
    break;
  default:
    atomic_fetch_add(&g_errors, 1);
  }
  size_t b = 0;
  while (b < N_BOUNDS && wait_us > wait_bounds_us[b])
    b++;
  atomic_fetch_add(&g_wait_bucket[b], 1);
  atomic_fetch_add(&g_wait_sum_us, wait_us);
  atomic_fetch_add(&g_wait_count, 1);
}

static void counter(struct evbuffer *out, const char *name, const char *help) {
  evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s counter\n", name, help,
                      name);
}

static void write_requests(struct evbuffer *out) {
  static const char *const cls[3] = {"2xx", "4xx", "5xx"};
  counter(out, "stockd_requests_total", "HTTP requests answered");
  for (int e = 0; e < SD_EP_N; e++)
    for (int c = 0; c < 3; c++)
      evbuffer_add_printf(out,
                          "stockd_requests_total{endpoint=\"%s\",code=\"%s\"} "
                          "%lld\n",
                          ep_names[e], cls[c], atomic_load(&g_requests[e][c]));
}

static void write_wait(struct evbuffer *out) {
  evbuffer_add_printf(out, "# HELP stockd_lock_wait_seconds time a purchase "
                           "waited for its lock\n"
                           "# TYPE stockd_lock_wait_seconds histogram\n");
  long long cum = 0;
  for (size_t b = 0; b <= N_BOUNDS; b++) {
    cum += atomic_load(&g_wait_bucket[b]);
    if (b < N_BOUNDS)
      evbuffer_add_printf(out,
                          "stockd_lock_wait_seconds_bucket{le=\"%g\"} "
                          "%lld\n",
                          (double)wait_bounds_us[b] / 1e6, cum);
    else
      evbuffer_add_printf(
          out, "stockd_lock_wait_seconds_bucket{le=\"+Inf\"} %lld\n", cum);
  }
  evbuffer_add_printf(out, "stockd_lock_wait_seconds_sum %.6f\n",
                      (double)atomic_load(&g_wait_sum_us) / 1e6);
  evbuffer_add_printf(out, "stockd_lock_wait_seconds_count %lld\n",
                      atomic_load(&g_wait_count));
}

void sd_metrics_write(struct evbuffer *out, const sd_opts *o) {
  evbuffer_add_printf(out,
                      "# HELP stockd_info this instance\n"
                      "# TYPE stockd_info gauge\n"
                      "stockd_info{instance=\"%s\",strategy=\"%s\"} 1\n",
                      o->name, o->strategy->name);
  write_requests(out);
  counter(out, "stockd_orders_total", "purchases that bought an item");
  evbuffer_add_printf(out, "stockd_orders_total %lld\n",
                      atomic_load(&g_orders));
  counter(out, "stockd_rejections_total", "purchases refused");
  evbuffer_add_printf(out,
                      "stockd_rejections_total{reason=\"soldout\"} %lld\n"
                      "stockd_rejections_total{reason=\"duplicate\"} %lld\n",
                      atomic_load(&g_soldout), atomic_load(&g_duplicate));
  counter(out, "stockd_errors_total",
          "purchases that failed (Redis or lock errors, lock wait given up)");
  evbuffer_add_printf(out,
                      "stockd_errors_total{reason=\"error\"} %lld\n"
                      "stockd_errors_total{reason=\"lock_wait\"} %lld\n",
                      atomic_load(&g_errors), atomic_load(&g_gaveup));
  write_wait(out);
}

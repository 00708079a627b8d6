/* scen_peers.c -- --peers: where the side-by-side comparison lives.
 * The comparison with other Redis lock libraries is a separate script,
 * tools/bench/peers/run_peers.sh (make bench-peers), so dlock-bench itself
 * needs nothing but the library and hiredis. */
#include "bench.h"

void scen_peers(const bench_opts *o) {
  bm_note("peers: run tools/bench/peers/run_peers.sh (make bench-peers) for "
          "the side-by-side comparison with other libraries (%s)",
          o->peers_dir);
}

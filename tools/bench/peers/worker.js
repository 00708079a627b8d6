// One contended worker for tools/bench/peers (a node peer library).
// usage: node worker.js LIB CONFIG_JSON SOCK LOCKKEY COUNTERKEY START_EPOCH_S SECS
// LIB: redlock | redis-semaphore. Waits until START, then until START+SECS:
// acquire (timed), GET counter, SET counter+1, release. Prints one JSON line:
// {"count":n,"fail":f,"lat_us":[...]} (time-to-acquire of each acquisition).
// Prints "ready" once connected and reads the real start time from stdin.
'use strict';
const Redis = require('ioredis');

async function main() {
  const [lib, cfgJson, sock, lockKey, counterKey, startS, secsS] =
      process.argv.slice(2);
  const cfg = JSON.parse(cfgJson);
  const lockConn = new Redis({path: sock});
  const dataConn = new Redis({path: sock});
  await lockConn.ping();
  await dataConn.ping();
  let acquire, release;
  if (lib === 'redlock') {
    const Redlock = require('redlock');
    const rl = new Redlock([lockConn], cfg);
    acquire = async () => rl.lock(lockKey, 10000);
    release = async (l) => l.unlock();
  } else if (lib === 'redis-semaphore') {
    const {Mutex} = require('redis-semaphore');
    acquire = async () => {
      const m = new Mutex(lockConn, lockKey, cfg);
      await m.acquire();
      return m;
    };
    release = async (m) => m.release();
  } else {
    throw new Error('unknown lib ' + lib);
  }
  // Barrier: tell the orchestrator we are connected, get the start time.
  process.stdout.write('ready\n');
  const line = await new Promise((resolve) => {
    let buf = '';
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', (d) => {
      buf += d;
      if (buf.includes('\n')) resolve(buf);
    });
    process.stdin.on('end', () => resolve(buf || startS));
  });
  process.stdin.pause();
  const start = Number(line.trim()) * 1000, end = start + Number(secsS) * 1000;
  const wait = start - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  const lat = [];
  let fail = 0;
  while (Date.now() < end) {
    const t0 = process.hrtime.bigint();
    let l;
    try {
      l = await acquire();
    } catch (e) {
      fail++;
      continue;
    }
    lat.push(Number(process.hrtime.bigint() - t0) / 1000);
    const v = Number((await dataConn.get(counterKey)) || 0);
    await dataConn.set(counterKey, String(v + 1));
    try {
      await release(l);
    } catch (e) {
      fail++;
    }
  }
  process.stdout.write(JSON.stringify({count: lat.length, fail, lat_us: lat}) + '\n');
  lockConn.disconnect();
  dataConn.disconnect();
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});

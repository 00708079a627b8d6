/* page.js -- dlock-stockd's page (served by the service itself, no
 * external asset). Alone, it shows the product's stock, orders, oversold,
 * lost updates and purchases per instance from /stock, refreshed every
 * second. Behind `dlock-rig --serve` (nginx sends /rig/ to the rig) it also
 * shows a button per strategy: a click asks the rig to run that strategy
 * (fresh instances, stock reset, ab's load), and the page follows the run
 * live: stock and orders over time as a chart, purchases per instance,
 * oversold in red, the verdict and the lesson; every finished strategy
 * gets a card, side by side. ?run=a,b runs those strategies on load;
 * ?product=P shows another product. Stable ids and data- attributes are
 * what the tests read. */
(function () {
  'use strict';
  var $ = function (id) { return document.getElementById(id); };
  var q = new URLSearchParams(location.search);
  var product = q.get('product') || $('product').textContent;
  $('product').textContent = product;
  var rig = null;          /* the rig's last state; null: no rig */
  var noRig = false;       /* /rig/state answered 404: the service alone */
  var own = [];            /* samples of our own when there is no rig */
  var t0 = Date.now();
  var autorun = q.get('run');

  function get(url) {
    return fetch(url, {cache: 'no-store'}).then(function (r) {
      if (r.status === 404) { var e = new Error('404'); e.status = 404; throw e; }
      if (!r.ok) throw new Error('HTTP ' + r.status + ' from ' + url);
      return r.json();
    });
  }
  function post(url) {
    return fetch(url, {method: 'POST', cache: 'no-store'}).then(function (r) {
      return r.json().then(function (j) {
        if (!r.ok) throw new Error(j.error || ('HTTP ' + r.status));
        return j;
      });
    });
  }
  function text(id, v) { $(id).textContent = String(v); }
  function el(tag, cls, txt) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (txt !== undefined) e.textContent = String(txt);
    return e;
  }

  /* ---- the chart: stock and orders over time ---- */
  function drawChart(cv, series, initial, small) {
    var g = cv.getContext('2d');
    var W = cv.width, H = cv.height;
    var L = small ? 30 : 44, R = 10, T = 10, B = small ? 18 : 28;
    g.clearRect(0, 0, W, H);
    var tmax = 1, ymax = Math.max(initial, 1);
    series.forEach(function (p) {
      tmax = Math.max(tmax, p[0]);
      ymax = Math.max(ymax, p[1], p[2]);
    });
    ymax = Math.ceil(ymax * 1.1);
    var X = function (t) { return L + (W - L - R) * t / tmax; };
    var Y = function (v) { return T + (H - T - B) * (1 - v / ymax); };
    g.font = (small ? 9 : 11) + 'px sans-serif';
    g.fillStyle = '#666';
    g.strokeStyle = '#ddd';
    g.lineWidth = 1;
    for (var i = 0; i <= 4; i++) { /* horizontal grid and labels */
      var v = Math.round(ymax * i / 4), y = Y(v);
      g.beginPath(); g.moveTo(L, y); g.lineTo(W - R, y); g.stroke();
      g.textAlign = 'right'; g.fillText(String(v), L - 4, y + 4);
    }
    g.textAlign = 'center';
    g.fillText('0', X(0), H - B + (small ? 11 : 14));
    g.fillText((tmax / 1000).toFixed(1) + ' s', X(tmax) - 14,
               H - B + (small ? 11 : 14));
    if (!small) g.fillText(rig ? 'time since the load started' :
                           'time since the page opened', (L + W - R) / 2, H - 4);
    if (initial > 0) { /* the stock at the start: orders above it oversell */
      g.strokeStyle = '#999'; g.setLineDash([4, 3]);
      g.beginPath(); g.moveTo(L, Y(initial)); g.lineTo(W - R, Y(initial)); g.stroke();
      g.setLineDash([]);
    }
    if (series.length === 0) return;
    /* oversold: the area of orders above the initial stock */
    g.fillStyle = 'rgba(200,55,45,0.35)';
    g.beginPath(); g.moveTo(X(series[0][0]), Y(initial));
    series.forEach(function (p) { g.lineTo(X(p[0]), Y(Math.max(p[2], initial))); });
    g.lineTo(X(series[series.length - 1][0]), Y(initial)); g.closePath(); g.fill();
    [[1, '#5b7db1'], [2, '#2e8b3e']].forEach(function (c) {
      g.strokeStyle = c[1]; g.lineWidth = 2; g.beginPath();
      series.forEach(function (p, k) {
        if (k === 0) g.moveTo(X(p[0]), Y(p[c[0]])); else g.lineTo(X(p[0]), Y(p[c[0]]));
      });
      g.stroke();
    });
    g.lineWidth = 1;
  }

  /* ---- the live panel ---- */
  function verdictOf(s, running) {
    if (s.oversold > 0) return ['oversold', 'bad'];
    if (s.lost_updates > 0) return ['lost updates', 'bad'];
    if (running) return ['selling', 'busy'];
    return ['correct', 'ok'];
  }

  function showStock(s) {
    text('strategy', s.strategy);
    text('initial', s.initial);
    text('stock', s.stock);
    text('orders', s.orders);
    text('oversold', s.oversold);
    text('lost', s.lost_updates);
    $('oversold').className = 'v ' + (s.oversold > 0 ? 'bad' : 'ok');
    $('lost').className = 'v ' + (s.lost_updates > 0 ? 'bad' : 'ok');
    $('summary').textContent = s.summary || '';
    var tb = $('instances');
    while (tb.firstChild) tb.removeChild(tb.firstChild);
    var req = s.requests_per_instance || {};
    var names = Object.keys(req).concat(Object.keys(s.per_instance))
      .filter(function (k, i, a) { return a.indexOf(k) === i; }).sort();
    names.forEach(function (k) {
      var tr = el('tr');
      tr.setAttribute('data-instance', k);
      tr.appendChild(el('td', '', k));
      tr.appendChild(el('td', 'purchases', s.per_instance[k] || 0));
      tr.appendChild(el('td', 'requests', req[k] || 0));
      tb.appendChild(tr);
    });
    var running = rig && rig.running === s.strategy;
    var done = rig && rig.results.length &&
      rig.results[rig.results.length - 1].name === s.strategy && !running;
    var v = verdictOf(s, running);
    var b = $('verdict');
    b.textContent = v[0];
    b.className = 'badge ' + v[1];
    var les = $('lesson');
    if (s.oversold > 0 || s.lost_updates > 0) {
      les.textContent = 'Lesson: ' + s.lesson;
      les.className = 'lesson bad';
    } else if (running || (!rig && s.stock > 0)) {
      les.textContent = 'Nothing sold twice so far.';
      les.className = 'lesson';
    } else {
      les.textContent = 'Correct: every item sold once, nothing oversold.' +
        (s.hint ? ' This lock still has a flaw that this load does not show: ' +
         s.hint + ' (dlock-seckill).' : '');
      les.className = 'lesson ok';
    }
    if (done) les.setAttribute('data-done', s.strategy);
    else les.removeAttribute('data-done');
    var series = own;
    if (rig) series = rig.running ? rig.series :
      (rig.results.length ? rig.results[rig.results.length - 1].series : []);
    drawChart($('chart'), series, s.initial, false);
    if (!rig && noRig)
      text('setup', 'instance ' + s.instance + ' of dlock-stockd, on its own ' +
           '(behind dlock-rig --serve the page also runs the strategies)');
  }

  /* ---- the rig: buttons, state, cards ---- */
  function setupRig(st) {
    var c = st.config;
    text('setup', c.instances + ' dlock-stockd instances behind nginx; ab sends ' +
         c.requests + ' purchase requests at concurrency ' + c.concurrency +
         '; the stock is reset to ' + c.stock + ' before each strategy.');
    var bs = $('buttons');
    c.strategies.forEach(function (name) {
      var b = el('button', '', name);
      b.setAttribute('data-strategy', name);
      b.title = 'run ' + name + ': fresh instances, stock reset, ab\'s load';
      b.addEventListener('click', function () { run(name); });
      bs.appendChild(b);
    });
    var all = el('button', 'all', 'run all');
    all.setAttribute('data-strategy', c.strategies.join(','));
    all.addEventListener('click', function () { run(c.strategies.join(',')); });
    bs.appendChild(all);
    $('controls').hidden = false;
  }

  function run(names) {
    post('rig/run?strategy=' + encodeURIComponent(names)).then(function () {
      tick();
    }).catch(function (e) { text('runstate', 'could not start: ' + e.message); });
  }

  function showRig(st) {
    var first = rig === null;
    rig = st;
    if (first) setupRig(st);
    var q2 = st.queue || [];
    document.querySelectorAll('#buttons button').forEach(function (b) {
      var n = b.getAttribute('data-strategy');
      b.className = (b.className.indexOf('all') >= 0 ? 'all ' : '') +
        (n === st.running ? 'running' : q2.indexOf(n) >= 0 ? 'queued' : '');
    });
    text('runstate', st.error ? 'error: ' + st.error :
         st.running ? 'running ' + st.running + ' (' + st.phase + ')' +
         (q2.length ? '; next: ' + q2.join(', ') : '') :
         st.results.length ? 'done: ' + st.results.length +
         ' run(s). Click a strategy to run it again.' :
         'Click a strategy to run it.');
    $('runstate').setAttribute('data-idle', st.running || q2.length ? 'no' : 'yes');
    showCards(st.results);
  }

  function showCards(results) {
    var box = $('cards');
    $('all').hidden = results.length === 0;
    if (box.getAttribute('data-n') === String(results.length)) return;
    box.setAttribute('data-n', String(results.length));
    while (box.firstChild) box.removeChild(box.firstChild);
    /* the last run of each strategy, in the order of the buttons */
    var last = {};
    results.forEach(function (r) { last[r.name] = r; });
    rig.config.strategies.concat(Object.keys(last)).forEach(function (name) {
      var r = last[name];
      if (!r) return;
      delete last[name];
      var bad = r.oversold > 0 || r.lost_updates > 0 || r.errors > 0;
      var card = el('div', 'card ' + (bad ? 'fail' : 'good'));
      card.setAttribute('data-strategy', r.name);
      var h = el('h3', '', r.name);
      h.appendChild(el('span', 'badge ' + (bad ? 'bad' : 'ok'),
                       r.oversold > 0 ? 'oversold' : r.lost_updates > 0 ?
                       'lost updates' : r.errors > 0 ? 'errors' : 'correct'));
      card.appendChild(h);
      var cv = el('canvas');
      cv.width = 230; cv.height = 110;
      card.appendChild(cv);
      drawChart(cv, r.series || [], r.initial, true);
      var dl = el('dl');
      [['orders', r.orders], ['stock left', r.final_stock],
       ['oversold', r.oversold], ['lost updates', r.lost_updates],
       ['purchases per instance', r.purchases_per_instance.join(' / ')],
       ['requests per instance', r.per_instance.join(' / ')],
       ['errors', r.errors], ['req/s', Math.round(r.throughput)],
       ['p50 / p99 ms', r.p50_ms + ' / ' + r.p99_ms]].forEach(function (kv) {
        dl.appendChild(el('dt', '', kv[0]));
        var dd = el('dd', '', kv[1]);
        dd.setAttribute('data-k', kv[0]);
        if ((kv[0] === 'oversold' || kv[0] === 'lost updates') && kv[1] > 0)
          dd.className = 'bad';
        dl.appendChild(dd);
      });
      card.appendChild(dl);
      card.appendChild(el('p', 'card-lesson', r.lesson));
      box.appendChild(card);
    });
  }

  /* ---- the loop ---- */
  var timer = null, inflight = false, again = false;
  function tick() {
    if (timer) clearTimeout(timer);
    timer = null;
    if (inflight) { again = true; return; }
    inflight = true;
    var rs = noRig ? Promise.resolve(null) : get('rig/state').catch(function (e) {
      if (e.status === 404) noRig = true;
      return null;
    });
    rs.then(function (st) {
      if (st) showRig(st);
      if (st && autorun) {
        var names = autorun;
        autorun = null;
        history.replaceState(null, '', location.pathname +
                             (q.get('product') ? '?product=' + product : ''));
        run(names);
      }
      return get('stock?product=' + encodeURIComponent(product));
    }).then(function (s) {
      if (!rig) {
        own.push([Date.now() - t0, s.stock, s.orders]);
        if (own.length > 600) own.shift();
      }
      showStock(s);
      text('status', 'updated ' + new Date().toISOString() + ' by ' + s.instance);
    }).catch(function (e) {
      text('status', 'error: ' + e.message);
    }).then(function () {
      inflight = false;
      if (again) { again = false; tick(); return; }
      timer = setTimeout(tick, rig && (rig.running || (rig.queue || []).length) ?
                         250 : 1000);
    });
  }
  tick();
})();

// The SpanEdge hub dashboard: reads snapshots from /dashboard/events and draws them.
// The token lives in sessionStorage and travels only in the Authorization header.
"use strict";

(() => {
  const TOKEN_KEY = "spanedge.token";
  const APP_KEY = "spanedge.app";
  const SVG = "http://www.w3.org/2000/svg";
  const STALE_AFTER_MS = 5000;
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#9c755f",
    "#ff9da7", "#86bcb6", "#8cd17d", "#d4a6c8"];
  const NODE_W = 184;
  const NODE_H = 62;
  const GAP_X = 70;
  const GAP_Y = 22;
  const PAD = 16;

  const $ = (id) => document.getElementById(id);
  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    app: sessionStorage.getItem(APP_KEY),
    controller: null,
    retry: null,
    failures: 0,
    count: 0,
    lastAt: 0,
    snapshot: null,
    colours: new Map(),
    dagKey: "",
    rateNodes: new Map(),
    sitesFilter: "",
    sitesPage: 0,
  };
  const SITES_PER_PAGE = 50;
  const MATRIX_SITES = 20;

  // -- DOM helpers ------------------------------------------------------------------------------

  function build(make, tag, attrs, children) {
    const node = make(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children || []) if (child) node.append(child);
    return node;
  }
  const h = (tag, attrs, ...children) => build((t) => document.createElement(t), tag, attrs, children);
  const s = (tag, attrs, ...children) => build((t) => document.createElementNS(SVG, t), tag, attrs, children);

  // -- formatting -------------------------------------------------------------------------------

  const dash = "–";
  const isNum = (v) => typeof v === "number" && Number.isFinite(v);
  function num(v, digits) {
    if (!isNum(v)) return dash;
    const d = digits !== undefined ? digits : Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2;
    return v.toLocaleString("en-US", { minimumFractionDigits: 0, maximumFractionDigits: d });
  }
  const rate = (v) => (isNum(v) ? `${num(v)}/s` : dash);
  function seconds(v) {
    if (!isNum(v)) return dash;
    if (v < 60) return `${num(v, v < 10 ? 1 : 0)} s`;
    if (v < 3600) return `${Math.floor(v / 60)} min ${Math.round(v % 60)} s`;
    return `${num(v / 3600, 1)} h`;
  }
  function bytes(v) {
    if (!isNum(v)) return dash;
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return `${num(v, i ? 1 : 0)} ${units[i]}`;
  }
  const clock = (epoch) => (isNum(epoch) ? new Date(epoch * 1000).toLocaleTimeString() : dash);

  // -- sign in and out --------------------------------------------------------------------------

  function showLogin(message) {
    $("main").hidden = true;
    $("signout").hidden = true;
    $("login").hidden = false;
    const error = $("login-error");
    error.textContent = message || "";
    error.hidden = !message;
    setConn("signed-out", "signed out");
    $("token").focus();
  }

  function signIn(token) {
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("login").hidden = true;
    $("main").hidden = false;
    $("signout").hidden = false;
    connect();
  }

  function signOut(message) {
    stop();
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(message);
  }

  function setConn(kind, text) {
    const pill = $("conn");
    pill.dataset.state = kind;
    pill.textContent = text;
  }

  // -- the event stream -------------------------------------------------------------------------

  function stop() {
    if (state.controller) state.controller.abort();
    state.controller = null;
    clearTimeout(state.retry);
  }

  function connect() {
    stop();
    const controller = new AbortController();
    state.controller = controller;
    setConn("connecting", "connecting");
    fetch("/dashboard/events", {
      headers: { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" },
      cache: "no-store",
      signal: controller.signal,
    })
      .then((response) => {
        if (response.status === 401 || response.status === 403) {
          signOut(`The hub refused that token (HTTP ${response.status}).`);
          return "refused";
        }
        if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
        showVia(response.headers);
        return read(response.body.getReader());
      })
      .then(
        (outcome) => {
          if (outcome === "refused" || controller.signal.aborted) return;
          state.failures = 0;
          state.retry = setTimeout(connect, 0); // the hub ends each stream after a while
        },
        (error) => {
          if (controller.signal.aborted) return;
          state.failures += 1;
          const delay = Math.min(10000, 1000 * 2 ** Math.min(state.failures - 1, 4));
          setConn("down", `reconnecting (${error.message || error})`);
          state.retry = setTimeout(connect, delay);
        },
      );
  }

  // A standby hub sends the stream on from the leader and says so in its headers.
  function showVia(headers) {
    const via = $("via");
    const standby = headers.get("X-SpanEdge-Role") === "standby";
    via.hidden = !standby;
    via.textContent = standby ? `via a standby, from the leader ${headers.get("X-SpanEdge-Served-By") || "?"}` : "";
  }

  async function read(reader) {
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return "ended";
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        dispatch(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  }

  function dispatch(block) {
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (!data.length) return;
    const payload = JSON.parse(data.join("\n"));
    if (event === "snapshot") render(payload);
    else if (event === "problem") showProblems([`The hub could not read its state: ${payload.detail}`]);
  }

  // -- rendering --------------------------------------------------------------------------------

  function colour(site) {
    if (!state.colours.has(site)) state.colours.set(site, PALETTE[state.colours.size % PALETTE.length]);
    return state.colours.get(site);
  }

  function render(snap) {
    state.snapshot = snap;
    state.count += 1;
    state.lastAt = Date.now();
    for (const site of snap.sites || []) colour(site.site);
    const updated = $("updated");
    updated.dataset.count = String(state.count);
    updated.dataset.generatedAt = String(snap.generated_at);
    setConn("live", "live");
    tick();
    draw();
  }

  function draw() {
    const snap = state.snapshot;
    if (!snap) return;
    const apps = snap.apps || [];
    const app = apps.find((a) => a.app === state.app) || apps[0] || null;
    drawTabs(apps, app);
    drawLegend(snap.sites || []);
    drawDag(app);
    drawSites(snap.sites || []);
    drawResults(app);
    drawLinks(snap.sites || [], snap.links || []);
    drawHistory(app);
    drawRollout(app);
    drawModels(app);
    drawPreviews(app);
    drawHub(snap.hub || {});
    showProblems((snap.hub && snap.hub.errors) || []);
  }

  function showProblems(problems) {
    const banner = $("problems");
    banner.textContent = problems.join(" · ");
    banner.hidden = problems.length === 0;
  }

  function drawTabs(apps, current) {
    const nav = $("apps");
    nav.replaceChildren(
      ...apps.map((a) => {
        const tab = h("button", {
          type: "button", class: "tab", "data-testid": "app-tab", "data-app": a.app,
          "aria-pressed": String(a === current), text: `${a.app} v${a.version}`,
        });
        tab.addEventListener("click", () => {
          state.app = a.app;
          sessionStorage.setItem(APP_KEY, a.app);
          draw();
        });
        return tab;
      }),
    );
  }

  function drawLegend(sites) {
    const wan = s("svg", { width: 26, height: 8, "aria-hidden": "true" },
      s("line", { x1: 0, y1: 4, x2: 26, y2: 4, class: "edge wan" }));
    $("legend").replaceChildren(
      ...sites.map((site) => h("span", { class: "key" },
        swatch(site.site), document.createTextNode(site.site))),
      h("span", { class: "key wan" }, wan, document.createTextNode("crosses sites")),
    );
  }

  function swatch(site) {
    const box = s("svg", { width: 12, height: 12, class: "swatch", "aria-hidden": "true" },
      s("rect", { width: 12, height: 12, rx: 3, fill: colour(site) }));
    return box;
  }

  // The DAG: layers by longest path from the sources, ordered within a layer by the mean
  // position of the neighbours (a few sweeps each way), flowing left to right.
  function layout(app) {
    const names = app.operators.map((o) => o.name);
    const preds = new Map(names.map((n) => [n, []]));
    const succs = new Map(names.map((n) => [n, []]));
    for (const [a, b] of app.edges) {
      if (preds.has(b) && succs.has(a)) { preds.get(b).push(a); succs.get(a).push(b); }
    }
    const layer = new Map();
    const indegree = new Map(names.map((n) => [n, preds.get(n).length]));
    const queue = names.filter((n) => indegree.get(n) === 0);
    for (const n of queue) layer.set(n, 0);
    while (queue.length) {
      const n = queue.shift();
      for (const m of succs.get(n)) {
        layer.set(m, Math.max(layer.get(m) || 0, layer.get(n) + 1));
        indegree.set(m, indegree.get(m) - 1);
        if (indegree.get(m) === 0) queue.push(m);
      }
    }
    for (const n of names) if (!layer.has(n)) layer.set(n, 0); // only on a cycle, which plans never have
    const layers = [];
    for (const n of names) (layers[layer.get(n)] ||= []).push(n);
    const position = new Map();
    const index = () => layers.forEach((row) => row.forEach((n, i) => position.set(n, i)));
    index();
    const mean = (list) => (list.length ? list.reduce((t, n) => t + position.get(n), 0) / list.length : null);
    const sweep = (rows, neighbours) => {
      for (const row of rows) {
        const keyed = row.map((n, i) => [mean(neighbours.get(n)), i, n]);
        keyed.sort((x, y) => (x[0] ?? x[1]) - (y[0] ?? y[1]) || x[1] - y[1]);
        row.splice(0, row.length, ...keyed.map((k) => k[2]));
        row.forEach((n, i) => position.set(n, i));
      }
    };
    for (let i = 0; i < 4; i += 1) {
      sweep(layers.slice(1), preds);
      sweep(layers.slice(0, -1).reverse(), succs);
    }
    const tallest = Math.max(1, ...layers.map((row) => row.length));
    const height = PAD * 2 + tallest * NODE_H + (tallest - 1) * GAP_Y;
    const width = PAD * 2 + layers.length * NODE_W + (layers.length - 1) * GAP_X;
    const at = new Map();
    layers.forEach((row, col) => {
      const used = row.length * NODE_H + (row.length - 1) * GAP_Y;
      const top = (height - used) / 2;
      row.forEach((n, i) => at.set(n, { x: PAD + col * (NODE_W + GAP_X), y: top + i * (NODE_H + GAP_Y) }));
    });
    return { at, width, height };
  }

  const sitesOf = (op) => [...new Set(op.replicas.map((r) => r.site))];
  const rateText = (op) => `in ${rate(op.in_rate)} · out ${rate(op.out_rate)}`;

  function drawDag(app) {
    const box = $("dag");
    $("app-title").textContent = app ? `${app.app} · plan v${app.version}` : "";
    if (!app || !app.operators.length) {
      state.dagKey = "";
      box.replaceChildren(h("p", { class: "empty", text: "No app is deployed. Deploy one with: spanedge deploy app.py --sites sites.yaml" }));
      return;
    }
    const key = JSON.stringify([app.app, app.version, app.operators.map((o) => [o.name, o.kind, sitesOf(o)]), app.edges,
      [...state.colours]]);
    if (key !== state.dagKey) {
      state.dagKey = key;
      box.replaceChildren(dagSvg(app));
    }
    for (const op of app.operators) {
      const text = state.rateNodes.get(op.name);
      if (text) text.textContent = rateText(op);
    }
  }

  function dagSvg(app) {
    const { at, width, height } = layout(app);
    const defs = s("defs", {},
      s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
        s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#7b8494" })));
    const svg = s("svg", {
      viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": `operator graph of ${app.app}`,
    }, defs);
    svg.style.minWidth = `${Math.round(width * 0.8)}px`; // shrink to fit, but scroll rather than turn unreadable
    const siteSets = new Map(app.operators.map((o) => [o.name, sitesOf(o)]));
    for (const [a, b] of app.edges) {
      const p = at.get(a);
      const q = at.get(b);
      if (!p || !q) continue;
      const x1 = p.x + NODE_W; const y1 = p.y + NODE_H / 2;
      const x2 = q.x - 2; const y2 = q.y + NODE_H / 2;
      const bend = Math.max(24, (x2 - x1) / 2);
      const same = JSON.stringify(siteSets.get(a)) === JSON.stringify(siteSets.get(b));
      svg.append(s("path", {
        d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`,
        class: same ? "edge" : "edge wan", "marker-end": "url(#arrow)",
        "data-testid": "edge", "data-src": a, "data-dst": b,
      }));
    }
    state.rateNodes = new Map();
    app.operators.forEach((op, i) => {
      const { x, y } = at.get(op.name);
      const sites = sitesOf(op);
      const where = sites.length === 1 ? sites[0] : `${sites.length} sites`;
      const rates = s("text", { x: 12, y: 52, class: "op-rate", "data-testid": "operator-rate", text: rateText(op) });
      state.rateNodes.set(op.name, rates);
      const band = s("g", {});
      sites.forEach((site, k) => band.append(s("rect", {
        x: (k * NODE_W) / sites.length, y: 0, width: NODE_W / sites.length, height: 6, fill: colour(site),
      })));
      svg.append(s("g", {
        transform: `translate(${x},${y})`, class: "op", "data-testid": "operator",
        "data-operator": op.name, "data-site": sites.join(" "), "data-kind": op.kind,
      },
      s("title", { text: `${op.name} (${op.kind})\n${op.replicas.map((r) => `${r.replica} at ${r.site}`).join("\n")}` }),
      s("rect", { width: NODE_W, height: NODE_H, rx: 8, fill: "#fff" }),
      // one site: tinted in its colour; several: a band with a segment per site
      s("rect", { width: NODE_W, height: NODE_H, rx: 8, fill: sites.length === 1 ? colour(sites[0]) : "#fff",
        "fill-opacity": sites.length === 1 ? 0.14 : 1, stroke: sites.length === 1 ? colour(sites[0]) : "#8a93a3",
        class: "op-box" }),
      s("clipPath", { id: `clip-${i}` }, s("rect", { width: NODE_W, height: NODE_H, rx: 8 })),
      s("g", { "clip-path": `url(#clip-${i})` }, band),
      s("text", { x: 12, y: 25, class: "op-name", text: clip(op.name, 22) }),
      s("text", { x: 12, y: 38, class: "op-meta", text: clip(op.kind === "operator" ? where : `${op.kind} · ${where}`, 30) }),
      rates));
    });
    return svg;
  }

  const clip = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

  // -- sites: problems first, filtered by name or label, a page at a time -------------------------

  function siteTrouble(site) {
    if (site.alive === false) return 0;
    if (site.plan_expired || (site.connectors_down || []).length) return 1;
    return 2;
  }

  function siteMatches(site, filter) {
    if (!filter) return true;
    return filter.split(/\s+/).filter(Boolean).every((term) => {
      const [key, value] = term.split("=", 2);
      if (value !== undefined) return (site.labels || {})[key] === value;
      return site.site.toLowerCase().includes(term.toLowerCase());
    });
  }

  function shownSites(sites) {
    const matching = sites.filter((site) => siteMatches(site, state.sitesFilter));
    matching.sort((a, b) => siteTrouble(a) - siteTrouble(b) || a.site.localeCompare(b.site));
    const pages = Math.max(1, Math.ceil(matching.length / SITES_PER_PAGE));
    state.sitesPage = Math.min(state.sitesPage, pages - 1);
    const first = state.sitesPage * SITES_PER_PAGE;
    return { matching, pages, page: matching.slice(first, first + SITES_PER_PAGE), first };
  }

  function drawSites(sites) {
    const { matching, pages, page, first } = shownSites(sites);
    const down = sites.filter((site) => site.alive === false).length;
    const count = $("sites-count");
    count.dataset.total = String(sites.length);
    count.dataset.matching = String(matching.length);
    count.dataset.down = String(down);
    count.textContent = `${matching.length === sites.length ? "" : `${matching.length} of `}${sites.length}` +
      `${down ? `, ${down} down` : ""}`;
    $("sites-page").textContent = matching.length ? `${first + 1}–${first + page.length} · page ${state.sitesPage + 1}/${pages}` : "none match";
    $("sites-prev").disabled = state.sitesPage === 0;
    $("sites-next").disabled = state.sitesPage >= pages - 1;
    $("sites").replaceChildren(...page.map((site) => {
      const status = site.alive === null ? "none" : site.alive ? "up" : "down";
      const label = { up: "up", down: "down", none: "no agent" }[status];
      const stale = isNum(site.stale_s);
      // a site that is down shows its last heartbeat's figures, greyed and dated, not as live ones
      const figure = (base, text, count) => h("td", {
        class: `${cls(base, stale ? 0 : count)}${stale ? " stale" : ""}`, "data-testid": "site-figure",
        "data-stale": stale ? "true" : "false",
        title: stale ? `as of ${seconds(site.stale_s)} ago, the site's last heartbeat: not live` : null, text,
      });
      return h("tr", { "data-testid": "site-row", "data-site": site.site, "data-state": status },
        h("td", { class: "site" }, swatch(site.site), document.createTextNode(site.site)),
        h("td", { text: site.tier }),
        h("td", {}, h("span", { class: `badge ${status}`, "data-testid": "site-state", text: label }),
          site.plan_expired && h("span", { class: "badge down", "data-testid": "site-plan-expired", text: "plan expired" }),
          ...(site.connectors_down || []).map((c) => h("span", {
            class: "badge down", "data-testid": "site-connector-down", title: c.last_error, text: `${c.name} down`,
          }))),
        h("td", { class: "num", "data-testid": "site-heartbeat", text: isNum(site.last_heartbeat_age_s) ? `${seconds(site.last_heartbeat_age_s)} ago` : "never" },
          stale && h("span", { class: "badge stale", "data-testid": "site-stale", text: `stale, ${seconds(site.stale_s)} old` })),
        figure("num", isNum(site.cpu) ? `${num(site.cpu, 1)} %` : dash),
        figure("num", bytes(site.rss_bytes)),
        figure("num", num(site.outbox_records, 0)),
        figure("num", seconds(site.watermark_lag_s)),
        figure("num", num(site.dead_lettered, 0), site.dead_lettered),
        figure("num", num(site.late, 0), site.late));
    }));
  }

  function drawResults(app) {
    $("results-app").textContent = app ? app.app : "";
    const rows = (app && app.results) || [];
    if (!rows.length) {
      $("results").replaceChildren(h("tr", {}, h("td", { colspan: 6, class: "empty", text: "No results written in the last minute." })));
      return;
    }
    const ms = (v) => (isNum(v) ? `${num(v, v < 10 ? 1 : 0)} ms` : dash);
    $("results").replaceChildren(...rows.map((r) => {
      const stale = isNum(r.stale_s);
      return h("tr", {
        "data-testid": "latency-row", "data-sink": r.sink, "data-site": r.site, "data-stale": stale ? "true" : "false",
        class: stale ? "stale" : "",
        title: stale ? `as of ${seconds(r.stale_s)} ago: ${r.site} is down` : null,
      },
      h("td", { class: "site", text: r.sink }),
      h("td", {}, swatch(r.site), document.createTextNode(r.site)),
      h("td", { class: "num", "data-testid": "latency-p50", text: ms(r.p50_ms) }),
      h("td", { class: "num", "data-testid": "latency-p95", text: ms(r.p95_ms) }),
      h("td", { class: "num", text: num(r.results, 0) }),
      h("td", { "data-testid": "latency-age" }, stale ? h("span", { class: "badge stale", text: `stale, ${seconds(r.stale_s)} old` }) : document.createTextNode("live")));
    }));
  }

  const cls = (base, count) => (isNum(count) && count > 0 ? `${base} warn` : base);

  function drawLinks(sites, links) {
    if (sites.length > MATRIX_SITES) {
      drawSlowLinks(sites, links);
      return;
    }
    const names = sites.map((site) => site.site);
    const byPair = new Map(links.map((l) => [`${l.src}\u0000${l.dst}`, l]));
    if (names.length < 2) {
      $("links").replaceChildren(h("p", { class: "empty", text: "Fewer than two sites." }));
      return;
    }
    const head = h("tr", {}, h("th", {}), ...names.map((n) => h("th", { class: "num" }, swatch(n), document.createTextNode(n))));
    const rows = names.map((src) => h("tr", {}, h("th", {}, swatch(src), document.createTextNode(src)), ...names.map((dst) => {
      if (src === dst) return h("td", { class: "num self", text: dash });
      const link = byPair.get(`${src}\u0000${dst}`);
      if (!link) return h("td", { class: "num", text: dash });
      const measured = isNum(link.measured_ms);
      return h("td", {
        class: "num link", "data-testid": "link-cell", "data-src": src, "data-dst": dst,
        "data-source": measured ? "measured" : "declared",
        title: `declared ${num(link.declared_ms)} ms` + (measured ? `, measured ${num(link.measured_ms)} ms` : ""),
      },
      h(measured ? "b" : "i", { text: measured ? num(link.measured_ms) : num(link.declared_ms) }),
      h("small", { text: measured ? `decl. ${num(link.declared_ms)} · ${seconds(link.age_s)}` : "declared" }));
    })));
    $("links").replaceChildren(h("table", { class: "matrix" }, h("thead", {}, head), h("tbody", {}, ...rows)));
  }

  // above MATRIX_SITES sites the snapshot carries the measured links only: the slowest against their declared value
  function drawSlowLinks(sites, links) {
    const measured = links.filter((l) => isNum(l.measured_ms));
    const ratio = (l) => (isNum(l.declared_ms) && l.declared_ms > 0 ? l.measured_ms / l.declared_ms : Infinity);
    const slowest = [...measured].sort((a, b) => ratio(b) - ratio(a) || b.measured_ms - a.measured_ms).slice(0, 20);
    const note = h("p", { class: "note", "data-testid": "links-note",
      text: `${sites.length} sites: the matrix is shown up to ${MATRIX_SITES}. ${measured.length} measured links; the 20 slowest against their declared latency:` });
    const rows = slowest.map((l) => h("tr", { "data-testid": "slow-link", "data-src": l.src, "data-dst": l.dst },
      h("td", {}, swatch(l.src), document.createTextNode(l.src)),
      h("td", {}, swatch(l.dst), document.createTextNode(l.dst)),
      h("td", { class: "num", text: `${num(l.measured_ms)} ms` }),
      h("td", { class: "num", text: isNum(l.declared_ms) ? `${num(l.declared_ms)} ms` : dash }),
      h("td", { class: "num", text: isNum(ratio(l)) && ratio(l) !== Infinity ? `${num(ratio(l), 1)}×` : dash }),
      h("td", { class: "num", text: seconds(l.age_s) })));
    const table = h("table", { "data-testid": "slow-links" },
      h("thead", {}, h("tr", {}, ...["From", "To", "Measured", "Declared", "Ratio", "Age"].map((t, i) => h("th", { class: i > 1 ? "num" : "", text: t })))),
      h("tbody", {}, ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 6, class: "empty", text: "No link measured yet." }))])));
    $("links").replaceChildren(note, table);
  }

  function drawHistory(app) {
    $("history-app").textContent = app ? app.app : "";
    const entries = app ? [...app.history].reverse() : [];
    if (!entries.length) {
      $("history").replaceChildren(h("tr", {}, h("td", { colspan: 6, class: "empty", text: "No plans yet." })));
      return;
    }
    $("history").replaceChildren(...entries.map((e) => h("tr", {
      "data-testid": "history-row", "data-version": e.version, "data-count": e.count, class: e.changed ? "" : "unchanged",
    },
    h("td", { class: "num", text: `v${e.version}` }),
    h("td", { text: isNum(e.until) ? `${clock(e.at)} – ${clock(e.until)}` : clock(e.at) }),
    h("td", { class: "reason", text: e.reason }),
    h("td", { class: "moved" }, ...(e.moved.length ? e.moved.map(moveItem) : [dash])),
    h("td", { class: "num", text: num(e.objective, 3) }),
    h("td", { class: "baselines" }, ...baselineItems(e.baselines, e.objective)))));
  }

  // -- the app's staged rollout: stage, sites per version, each step's gate values ------------------

  function drawRollout(app) {
    const r = app ? app.rollout : null;
    $("rollout-card").hidden = !r;
    if (!r) return;
    $("rollout-app").textContent = app.app;
    const summary = $("rollout-summary");
    summary.dataset.status = r.status;
    summary.dataset.stage = String(r.stage);
    summary.textContent = `${r.status} at stage ${r.stage + 1}/${r.stages.length} ${r.stages[r.stage].spec}` +
      ` · gates ${r.gates || "none"} · hold ${num(r.hold_s)} s · ${r.reason}`;
    $("rollout-versions").replaceChildren(...Object.entries(r.versions).map(([version, sites]) => h("div", {
      "data-testid": "rollout-version", "data-version": version, "data-count": String(sites.length),
      class: version === r.to_version ? "new" : "old",
    }, h("b", { text: `${version === r.to_version ? "new" : "previous"} ${version.slice(0, 12)}` }),
    h("span", { text: ` on ${sites.length} site${sites.length === 1 ? "" : "s"}: ${sites.join(", ") || "none"}` }))));
    $("rollout-stages").replaceChildren(...r.stages.map((st, i) => h("tr", {
      "data-testid": "rollout-stage", "data-stage": String(i), "data-state": stageState(r, i),
      class: i === r.stage ? "current" : "",
    },
    h("td", { class: "num", text: String(i + 1) }),
    h("td", { text: st.spec }),
    h("td", { text: st.changes.join(", ") || "none (the stages before reached them)" }),
    h("td", { text: stageState(r, i) }))));
    $("rollout-steps").replaceChildren(...[...r.steps].reverse().map((step) => h("tr", {
      "data-testid": "rollout-step", "data-status": step.status, "data-stage": String(step.stage),
    },
    h("td", { text: clock(step.at) }),
    h("td", { class: "num", text: String(step.stage + 1) }),
    h("td", { text: step.status }),
    h("td", {}, ...((step.gates || []).length ? step.gates.map(gateItem) : [dash])),
    h("td", { class: "reason", text: step.reason }))));
  }

  // -- the app's models: each one's newest versions (why, rows, metrics) and what each site scores with --

  function drawModels(app) {
    const models = app ? app.models || [] : [];
    $("models-card").hidden = !models.length;
    if (!models.length) return;
    $("models-app").textContent = app.app;
    $("models").replaceChildren(...models.map((m) => h("div", { "data-testid": "model", "data-model": m.model },
      h("h3", { text: `${m.model} · ${m.algorithm} on ${m.features.join(", ")}` }),
      h("p", { class: "note", text: modelNote(m) }),
      h("div", { class: "scroll" }, h("table", { "data-testid": "model-versions" },
        h("thead", {}, h("tr", {}, ...["Version", "Trained", "Reason", "Rows", "Metrics", "Scores from"].map(
          (t, i) => h("th", { class: [0, 3].includes(i) ? "num" : "", text: t })))),
        h("tbody", {}, ...(m.versions.length ? m.versions.map(versionRow) : [h("tr", {},
          h("td", { colspan: 6, class: "empty", text: "Not trained yet." }))])))),
      h("div", { class: "scroll" }, h("table", { "data-testid": "model-sites" },
        h("thead", {}, h("tr", {}, ...["Site", "Sent", "Holds", "PSI", "Live error", "Records"].map(
          (t, i) => h("th", { class: i ? "num" : "", text: t })))),
        h("tbody", {}, ...modelSiteRows(m)))))));
  }

  function modelNote(m) {
    const limits = isNum(m.max_psi) ? [`retrain at PSI > ${num(m.max_psi, 2)}`] : [];
    if (isNum(m.max_error)) limits.push(`${limits.length ? "or " : "retrain at "}live error > ${num(m.max_error, 3)}`);
    const shown = m.versions.length < m.version_count ? ` (newest ${m.versions.length} shown)` : "";
    return [`${m.version_count} version${m.version_count === 1 ? "" : "s"}${shown}`, limits.join(" ")].filter(Boolean).join(" · ");
  }

  function versionRow(v) {
    const metrics = Object.entries(v.metrics).map(([k, x]) => `${k} ${num(x, 3)}`).join(", ");
    return h("tr", { "data-testid": "model-version", "data-version": String(v.version), "data-reason": v.reason },
      h("td", { class: "num", text: `v${v.version}` }),
      h("td", { text: clock(v.trained_at) }),
      h("td", { class: "reason", text: v.reason }),
      h("td", { class: "num", text: `${v.rows} (+${v.held_out} held out)` }),
      h("td", { text: metrics || dash }),
      h("td", { text: isNum(v.switch_at) ? clock(v.switch_at) : "not sent" }));
  }

  function modelSiteRows(m) {
    const rows = Object.entries(m.sites).map(([site, s]) => {
      const r = s.report || {};
      const drifted = isNum(r.psi) && isNum(m.max_psi) && r.psi > m.max_psi;
      return h("tr", {
        "data-testid": "model-site", "data-site": site, "data-held": isNum(s.held) ? String(s.held) : "",
        "data-psi": isNum(r.psi) ? String(r.psi) : "", class: drifted ? "infeasible" : "",
      },
      h("td", { text: site }),
      h("td", { class: "num", text: isNum(s.sent) ? `v${s.sent}` : dash }),
      h("td", { class: "num", text: isNum(s.held) ? `v${s.held}` : dash }),
      h("td", { class: "num", text: isNum(r.psi) ? num(r.psi, 3) + (drifted ? " ✗" : "") : dash }),
      h("td", { class: "num", text: isNum(r.error) ? num(r.error, 3) : dash }),
      h("td", { class: "num", text: isNum(r.records) ? String(r.records) : dash }));
    });
    return rows.length ? rows : [h("tr", {}, h("td", { colspan: 6, class: "empty", text: "No site scores with it yet." }))];
  }

  // -- the app's live previews: a candidate beside the version running now, over one site's records --

  function drawPreviews(app) {
    const previews = app ? app.previews || [] : [];
    $("previews-card").hidden = !previews.length;
    if (!previews.length) return;
    $("previews-app").textContent = app.app;
    $("previews").replaceChildren(...previews.map((p) => h("div", {
      "data-testid": "preview", "data-site": p.site, "data-candidate": p.candidate_file,
      "data-sha256": p.candidate_sha256, "data-differing": isNum(p.differing_results) ? String(p.differing_results) : "",
    },
    h("h3", { text: `${p.site} · ${new Date(p.started_at * 1000).toLocaleString()} · ${p.candidate_file} (${p.candidate_sha256.slice(0, 12)})` +
      ` against ${p.live ? p.live.version : "nothing"}` }),
    h("p", { class: "note", "data-testid": "preview-summary", text: previewNote(p) }),
    h("div", { class: "scroll" }, h("table", { "data-testid": "preview-operators" },
      h("thead", {}, h("tr", {}, ...["Operator", "Part", "In live", "In candidate", "Out live", "Out candidate",
        "Dead letters live", "Dead letters candidate"].map((t, i) => h("th", { class: i > 1 ? "num" : "", text: t })))),
      h("tbody", {}, ...p.operators.map(previewRow)))))));
  }

  function cpuPerRecord(run) {
    if (!run || !isNum(run.cpu_per_record_s)) return dash;
    const s = run.cpu_per_record_s;
    return s < 1e-3 ? `${num(s * 1e6, 1)} µs` : `${num(s * 1e3, 2)} ms`;
  }

  function previewNote(p) {
    const n = p.differing_results;
    const parts = [
      `${p.records} record${p.records === 1 ? "" : "s"} in ${num(p.ended_at - p.started_at, 1)} s of ${num(p.duration_s)} s`,
      isNum(n) ? `${n} result${n === 1 ? " differs" : "s differ"}` : "no version to compare with",
      `dead letters ${p.live ? p.live.dead_letters : dash} live, ${p.candidate.dead_letters} candidate`,
      `CPU per record ${cpuPerRecord(p.live)} live, ${cpuPerRecord(p.candidate)} candidate`,
    ];
    if (p.stopped_early) parts.push(`stopped early: ${p.stop_reason || "no reason given"}`);
    if (p.operators_left_out) parts.push(`${p.operators_left_out} more operators not sent`);
    return parts.join(" · ");
  }

  function previewRow(op) {
    const figure = (counts, field) => (counts && isNum(counts[field]) ? String(counts[field]) : dash);
    const pairs = [["records_in", "in"], ["records_out", "out"], ["dead_letters", "dead"]];
    const differs = pairs.slice(1).some(([f]) => figure(op.live, f) !== figure(op.candidate, f));
    return h("tr", { "data-testid": "preview-operator", "data-operator": op.name, class: differs ? "differs" : "" },
      h("td", { text: op.name }),
      h("td", { text: op.part }),
      ...pairs.flatMap(([f, short]) => [
        h("td", { class: "num", "data-figure": `${short}-live`, text: figure(op.live, f) }),
        h("td", { class: "num", "data-figure": `${short}-candidate`, text: figure(op.candidate, f) }),
      ]));
  }

  function stageState(r, i) {
    if (i < r.stage || (i === r.stage && r.status === "passed")) return "passed";
    if (i > r.stage) return "waiting";
    return r.status;
  }

  function gateItem(g) {
    const where = g.site ? ` at ${g.site}` : "";
    return h("div", {
      "data-testid": "rollout-gate", "data-gate": g.gate, "data-passed": g.passed ? "true" : "false",
      "data-value": isNum(g.value) ? String(g.value) : "", class: g.passed ? "" : "infeasible",
      text: `${g.gate}: ${isNum(g.value) ? num(g.value, 4) : "no value"}${where}${g.passed ? "" : " ✗"}`,
    });
  }

  function baselineItems(baselines, objective) {
    const items = Object.entries(baselines).flatMap(([name, b], i) => [i ? document.createTextNode(" · ") : null, h("span", {
      "data-testid": "baseline", "data-baseline": name, "data-feasible": b.feasible ? "true" : "false",
      class: b.feasible ? "" : "infeasible",
      title: b.feasible ? null : `infeasible here, so not comparable: ${b.violations.join("; ")}`,
      text: baselineText(name, b, objective),
    })]);
    return items.length ? items : [dash];
  }

  function moveItem(m) {
    const keys = m.keys ? ` (${m.keys})` : "";
    const at = isNum(m.switch_at) ? `, windows from ${clock(m.switch_at)}` : "";
    const state = isNum(m.state_bytes) ? `, state ${bytes(m.state_bytes)}` : "";
    const done = isNum(m.handover_s) ? `, handed over in ${num(m.handover_s, 1)} s` : "";
    const risk = goneText(m);
    return h("div", {
      "data-testid": "moved", "data-replica": m.replica, "data-from": m.from, "data-to": m.to,
      class: risk.cls,
      text: `${m.replica}${keys}: ${m.from} → ${m.to}${at}${state}${done}${risk.text}`,
    });
  }

  function goneText(m) {
    const since = isNum(m.at_risk_from) ? `from ${clock(m.at_risk_from)} ` : "";
    if (m.recovered_by) {
      return { cls: "recovered", text: `; ${m.from} gone: results ${since}to the switch recomputed by ${m.recovered_by} from its spool` };
    }
    if (!isNum(m.recover_by)) return { cls: "", text: "" };
    if (!isNum(m.back_at)) {
      return { cls: "at-risk", text: `; ${m.from} gone: results ${since}to the switch lost unless it is back by ${clock(m.recover_by)}` };
    }
    if (m.back_at <= m.recover_by) {
      return { cls: "recovered", text: `; ${m.from} gone, back at ${clock(m.back_at)}: it finishes its results ${since}to the switch; hub windows closed while it was gone lack them` };
    }
    return { cls: "lost", text: `; ${m.from} gone, back at ${clock(m.back_at)}, too late: results ${since}to the switch lost` };
  }

  function baselineText(name, b, objective) {
    if (!b.feasible) return `${name} ${num(b.objective, 3)} (infeasible)`;
    const ratio = isNum(objective) && isNum(b.objective) && b.objective > 0 ? ` (${num(objective / b.objective, 2)}×)` : "";
    return `${name} ${num(b.objective, 3)}${ratio}`;
  }

  function drawHub(hub) {
    const parts = [];
    if (hub.ingest_connected !== null && hub.ingest_connected !== undefined) {
      parts.push(`ingest ${hub.ingest_connected ? "connected" : "disconnected"}`);
    }
    if (isNum(hub.ingest_records)) parts.push(`${num(hub.ingest_records, 0)} records logged`);
    parts.push(`worst ingest lag ${seconds(hub.ingest_lag_s)}`);
    $("ingest").textContent = parts.join(" · ");
    const queries = hub.queries || [];
    if (!queries.length) {
      $("queries").replaceChildren(h("tr", {}, h("td", { colspan: 5, class: "empty", text: "No Spark queries (the engine is off, or no sink runs at the hub)." })));
      return;
    }
    $("queries").replaceChildren(...queries.map((q) => h("tr", { "data-testid": "query-row", "data-query": q.name },
      h("td", { text: q.name }),
      h("td", {}, h("span", { class: `badge ${q.active ? "up" : "down"}`, title: q.error || null, text: q.active ? "active" : "stopped" })),
      h("td", { class: "num", text: isNum(q.batch_duration_ms) ? `${num(q.batch_duration_ms, 0)} ms` : dash }),
      h("td", { class: "num", text: num(q.input_rows_per_s) }),
      h("td", { class: cls("num", q.restarts), text: num(q.restarts, 0) }))));
  }

  // The "last update" counter, and a stale warning when snapshots stop coming.
  function tick() {
    if (!state.lastAt) return;
    const age = (Date.now() - state.lastAt) / 1000;
    $("updated").textContent = `updated ${num(age, 1)} s ago · #${state.count}`;
    const pill = $("conn");
    if (age * 1000 > STALE_AFTER_MS && pill.dataset.state === "live") setConn("stale", "stale");
  }

  // -- start ------------------------------------------------------------------------------------

  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = $("token");
    const token = input.value.trim();
    input.value = "";
    if (token) signIn(token);
  });
  $("signout").addEventListener("click", () => signOut(""));
  $("sites-filter").addEventListener("input", (event) => {
    state.sitesFilter = event.target.value.trim();
    state.sitesPage = 0;
    draw();
  });
  $("sites-prev").addEventListener("click", () => { state.sitesPage = Math.max(0, state.sitesPage - 1); draw(); });
  $("sites-next").addEventListener("click", () => { state.sitesPage += 1; draw(); });
  setInterval(tick, 250);
  if (state.token) signIn(state.token);
  else showLogin("");
})();

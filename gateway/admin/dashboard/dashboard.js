// Vigil's dashboard: polls the admin API every 2 s and draws the signals,
// their history (uPlot), the backends and the alerts. No build step, no
// dependencies beyond the vendored uPlot; served from the gateway binary.
(function () {
  "use strict";

  // An admin token, when the gateway needs one, is read from the page's
  // fragment, /dashboard#token=SECRET (fragments never reach servers), and
  // sent as a bearer token on every fetch.
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  const headers = token ? { Authorization: "Bearer " + token } : {};

  const REFRESH_MS = 2000;
  const CHART_H = 190;
  const RANGES = { "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400 };
  const TARGET_POINTS = 300;
  const SIGNALS = ["drift", "confidence", "latency", "output", "precision"];
  const ALARM_STATES = ["drift", "decay", "anomalous", "divergent"];
  const RULE_SIGNAL = {
    drift_score: "drift", confidence_drop: "confidence", latency_ttft_p95: "latency",
    latency_e2e_p95: "latency", perplexity_band: "output", precision_divergence: "precision",
    error_rate: "errors", error_budget_burn: "errors",
  };
  const PALETTE = ["#2563eb", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777",
    "#65a30d", "#7c3aed", "#ca8a04", "#0f766e", "#dc2626", "#475569"];

  let range = RANGES[params.get("range")] ? params.get("range") : "15m";

  // ---- numbers for people -------------------------------------------------

  const MINUS = "\u2212";
  const DASH = "\u2013";

  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function numOrNull(v) { return isNum(v) ? v : null; }

  function trimZeros(s) { return s.indexOf(".") < 0 ? s : s.replace(/0+$/, "").replace(/\.$/, ""); }

  const SUP = { "-": "\u207b", "0": "\u2070", "1": "\u00b9", "2": "\u00b2", "3": "\u00b3", "4": "\u2074", "5": "\u2075", "6": "\u2076", "7": "\u2077", "8": "\u2078", "9": "\u2079" };

  // num writes v with three significant digits: 0.000268 → 2.68·10⁻⁴,
  // 0.8 → 0.8, 12345.6 → 12,300; null, NaN and ±Inf → "–".
  function num(v) {
    if (!isNum(v)) return DASH;
    if (v === 0) return "0";
    const a = Math.abs(v);
    const r = Number(a.toPrecision(3));
    let s;
    if (r >= 1000) s = r.toLocaleString("en-US");
    else if (r < 1e-3) {
      const e = Math.floor(Math.log10(r));
      let m = Number((r / Math.pow(10, e)).toPrecision(3));
      s = trimZeros(m.toFixed(2)) + "\u00b710" + String(e).split("").map(c => SUP[c]).join("");
    } else s = trimZeros(r.toPrecision(3));
    return (v < 0 ? MINUS : "") + s;
  }
  function pct(v) { return isNum(v) ? num(100 * v) + " %" : DASH; }
  function signedPct(v) { return isNum(v) ? (v > 0 ? "+" : "") + pct(v) : DASH; }
  function ms(v) { return !isNum(v) ? DASH : Math.abs(v) >= 1000 ? num(v / 1000) + " s" : num(v) + " ms"; }
  function nats(v) { return isNum(v) ? num(v) + " nats" : DASH; }
  function times(v) { return isNum(v) ? num(v) + "\u00d7" : DASH; }
  function sigmas(v) { return isNum(v) ? num(v) + " \u03c3" : DASH; }
  function count(v) { return isNum(v) ? Math.round(v).toLocaleString("en-US") : DASH; }

  const RULE_FMT = {
    drift_score: v => isNum(v) ? "PSI " + num(v) : DASH, confidence_drop: pct,
    latency_ttft_p95: ms, latency_e2e_p95: ms, error_rate: pct, perplexity_band: sigmas,
    precision_divergence: nats, error_budget_burn: times,
  };
  function ruleFmt(rule) { return RULE_FMT[rule] || num; }

  function pad2(n) { return n < 10 ? "0" + n : String(n); }
  function clock(d) { return pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + ":" + pad2(d.getSeconds()); }
  function parseTime(s) {
    const t = typeof s === "string" ? Date.parse(s) : NaN;
    return isNaN(t) || t <= 0 ? null : new Date(t);
  }
  function ago(d) {
    if (!d) return DASH;
    const s = Math.round((Date.now() - d.getTime()) / 1000);
    if (s < 5) return "just now";
    if (s < 90) return s + " s ago";
    if (s < 90 * 60) return Math.round(s / 60) + " min ago";
    if (s < 36 * 3600) return num(s / 3600) + " h ago";
    return d.toLocaleDateString();
  }
  // durSec reads a Go duration ("1s", "1m30s", "500ms") as seconds.
  function durSec(s) {
    if (typeof s !== "string") return null;
    const U = { ns: 1e-9, us: 1e-6, "\u00b5s": 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600 };
    const re = /([\d.]+)(ns|us|\u00b5s|ms|s|m|h)/g;
    let t = 0, m, any = false;
    while ((m = re.exec(s))) { t += parseFloat(m[1]) * U[m[2]]; any = true; }
    return any && t > 0 ? t : null;
  }

  function stateClass(s) {
    if (s === "ok") return "ok";
    if (!s || s === "unknown") return "unknown";
    if (ALARM_STATES.indexOf(s) >= 0) return "alarm";
    return "warn";
  }
  function alertSignal(a) { return (a.labels && a.labels.signal) || RULE_SIGNAL[a.rule] || ""; }
  // modelOf is the model an alert or threshold is about; "" for the fleet.
  function modelOf(x) { return (x && x.labels && x.labels.model) || ""; }
  function isActive(a) { return a.state === "pending" || a.state === "firing" || a.state === "silenced"; }

  // ---- DOM helpers --------------------------------------------------------

  const $ = id => document.getElementById(id);
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  function td(row, text, cls, title) {
    const c = el("td", text, cls);
    if (title) c.title = title;
    row.appendChild(c);
    return c;
  }
  function pill(text, cls) { return el("span", text, "pill " + cls); }
  function fillBody(table, rows, cols, emptyText) {
    const body = table.tBodies[0];
    body.replaceChildren();
    if (rows.length === 0) {
      const r = body.insertRow();
      const c = td(r, emptyText, "empty");
      c.colSpan = cols;
    }
    for (const f of rows) f(body.insertRow());
  }
  function labelText(labels, skip) {
    return Object.entries(labels || {}).filter(([k]) => skip.indexOf(k) < 0).map(([k, v]) => k + "=" + v).join(", ");
  }

  // ---- fetching -----------------------------------------------------------

  class HTTPError extends Error {
    constructor(path, status) { super(path + ": HTTP " + status); this.status = status; }
  }
  async function getJSON(path) {
    const r = await fetch(path, { headers, cache: "no-store" });
    if (!r.ok) throw new HTTPError(path, r.status);
    return r.json();
  }

  // ---- tiles --------------------------------------------------------------

  function notEnabled(sig) { return !sig || Object.keys(sig).length <= 1; }

  function featureMap(f) {
    // History points carry {name: psi}; /admin/signals an array of tests.
    const out = {};
    if (Array.isArray(f)) {
      for (const t of f) if (t && isNum(t.psi)) out[t.name] = Math.max(out[t.name] ?? -Infinity, t.psi);
    } else if (f && typeof f === "object") {
      for (const [k, v] of Object.entries(f)) if (isNum(v)) out[k] = v;
    }
    return out;
  }

  function findThreshold(list, rule, backend) {
    for (const t of list || []) {
      if (t.rule === rule && (!backend || (t.labels && t.labels.backend === backend))) return t;
    }
    return null;
  }

  function driftTile(d) {
    if (notEnabled(d)) return { big: DASH, reason: "not enabled" };
    const ref = d.reference === "pinned" ? "pinned baseline" : "rolling reference";
    if (d.state === "unknown") {
      return { big: DASH, reason: d.reason || "waiting for data (" + count(d.current_requests) + " requests" +
        (isNum(d.reference_requests) && d.reference_requests === 0 ? ", no reference yet)" : ")") };
    }
    let worst = null;
    for (const t of Array.isArray(d.features) ? d.features : []) {
      if (t && isNum(t.psi) && (!worst || t.psi > worst.psi)) worst = t;
    }
    let reason;
    if (worst && worst.test === "mahalanobis") reason = "joint outliers " + signedPct(worst.psi) + " vs " + ref;
    else if (worst && worst.test === "classifier") reason = worst.name + ": held-out AUC " + num(worst.statistic) + " vs " + ref;
    else if (worst) reason = worst.name + " PSI " + num(worst.psi) + " vs " + ref;
    else reason = "PSI " + num(d.score) + " vs " + ref;
    // What the prompts are now about: the terms whose share rose most
    // (hashed ids unless analyzers.drift.text.explain).
    const c = d.content;
    if (c && c.drift && Array.isArray(c.rose) && c.rose.length) {
      reason += "; rising: " + c.rose.slice(0, 3).map(t => t.term + " " + pct(t.reference_share) + " → " + pct(t.current_share)).join(", ");
    }
    // The embedding test's losses: prompts its backend could not embed.
    const e = d.embedder;
    if (e && isNum(e.failed) && isNum(e.dropped) && e.failed + e.dropped > 0) {
      reason += "; embeddings lost: " + count(e.failed) + " failed, " + count(e.dropped) + " dropped";
    }
    return { big: "PSI " + num(d.score), reason };
  }

  function confidenceTile(c) {
    if (notEnabled(c)) return { big: DASH, reason: "not enabled" };
    if (c.state === "unknown" && !isNum(c.confidence)) {
      return { big: DASH, reason: c.reason || "waiting for data (" + count(c.responses) + " responses)" };
    }
    let reason = "confidence " + num(c.confidence);
    if (isNum(c.drop)) reason += " (" + signedPct(-c.drop) + " vs reference)";
    else reason += c.state === "unknown" ? ", waiting for a reference (" + count(c.responses) + " responses)" : "";
    if (isNum(c.low_confidence_share) && c.low_confidence_share > 0) reason += "; low-confidence share " + pct(c.low_confidence_share);
    return { big: num(c.confidence), reason };
  }

  const LAT_NAMES = { ttft: "TTFT", e2e: "E2E", itl: "ITL", stall: "Stall", tokens_per_second: "tokens/s" };
  function latencyTile(l, thresholds) {
    if (notEnabled(l)) return { big: DASH, reason: "not enabled" };
    const m = l.metrics || {};
    const p95 = k => m[k] && m[k].p95;
    const fmtK = (k, v) => k === "tokens_per_second" ? num(v) + " tokens/s" : ms(v);
    let key = "ttft";
    for (const k of ["ttft", "e2e", "itl", "stall", "tokens_per_second"]) if (m[k] && m[k].anomalous) { key = k; break; }
    if (!isNum(p95(key))) key = isNum(p95("e2e")) ? "e2e" : key;
    if (!isNum(p95(key))) return { big: DASH, reason: l.reason || "waiting for data (" + count(l.responses) + " responses)" };
    let reason = LAT_NAMES[key] + " P95 " + fmtK(key, p95(key));
    if (m[key] && m[key].anomalous) reason += ", anomalous share " + pct(m[key].anomalous_share) + " vs " + pct(m[key].reference_anomalous_share);
    const t = findThreshold(thresholds, key === "e2e" ? "latency_e2e_p95" : "latency_ttft_p95");
    if ((key === "ttft" || key === "e2e") && t && isNum(t.threshold)) reason += " (alert above " + ms(t.threshold) + ", " + sourceText(t.source) + ")";
    if (key !== "e2e" && isNum(p95("e2e"))) reason += "; E2E P95 " + ms(p95("e2e"));
    if (l.state === "unknown") reason += "; no reference yet";
    return { big: ms(p95(key)), reason };
  }

  function outputTile(o) {
    if (notEnabled(o)) return { big: DASH, reason: "not enabled" };
    const cur = isNum(o.perplexity) ? o.perplexity : numOrNull(o.current_perplexity ?? o.current);
    if (!isNum(o.baseline_mean) || !isNum(o.baseline_std)) {
      return { big: num(cur), reason: (isNum(cur) ? "perplexity " + num(cur) + "; " : "") +
        (o.reason || "waiting for data (" + count(o.baseline_minutes) + " baseline minutes)") };
    }
    let reason = "perplexity " + num(cur) + ", band " + num(o.baseline_mean) + " \u00b1 " + num(3 * o.baseline_std);
    if (isNum(o.minutes_outside) && o.minutes_outside > 0) reason += "; " + o.minutes_outside + " min outside";
    return { big: num(cur), reason };
  }

  function precisionTile(p) {
    if (notEnabled(p)) return { big: DASH, reason: "not enabled" };
    const pairs = Array.isArray(p.pairs) ? p.pairs : [];
    if (pairs.length === 0) return { big: DASH, reason: "no backend names a reference" };
    const rank = q => (stateClass(q.state) === "alarm" ? 1e9 : 0) + (isNum(q.kl) ? q.kl : -1);
    const worst = pairs.slice().sort((a, b) => rank(b) - rank(a))[0];
    if (!isNum(worst.kl)) return { big: DASH, reason: "waiting for data (" + count(pairs.reduce((n, q) => n + (q.tokens || 0), 0)) + " compared tokens)" };
    let reason = worst.backend + " KL " + nats(worst.kl) + ", top-1 " + pct(worst.top1_agreement);
    // Teacher forcing is the norm; the walk stops at the first disagreement.
    if (worst.method === "greedy_walk" || worst.method === "mixed") reason += " (" + worst.method.replace("_", " ") + ")";
    if (pairs.length > 1) reason += " (+" + (pairs.length - 1) + " more)";
    return { big: nats(worst.kl), reason };
  }

  // renderTiles fills the main tiles with the fleet's signals or, given a
  // segment, one model's; precision compares backends, not models, and
  // stays the fleet's (the scope line says so). With seg null (missing
  // says why) the model's tiles show that reason. The alerts and
  // thresholds are the scope's.
  function renderTiles(sig, alerts, seg, missing) {
    const one = seg !== undefined;
    const view = one ? Object.assign({}, seg, { precision: sig.precision }) : sig;
    const scope = one ? (seg && seg.model) || "" : "";
    const thresholds = (Array.isArray(sig.thresholds) ? sig.thresholds : []).filter(t => modelOf(t) === scope);
    const active = (alerts || []).filter(a => isActive(a) && (!one || alertSignal(a) === "precision" || modelOf(a) === scope));
    const fns = {
      drift: () => driftTile(view.drift), confidence: () => confidenceTile(view.confidence),
      latency: () => latencyTile(view.latency, thresholds), output: () => outputTile(view.output),
      precision: () => precisionTile(view.precision),
    };
    // In the fleet's view an alert names its model, if it has one.
    const alertName = a => a.name + (!one && modelOf(a) ? " (" + modelOf(a) + ")" : "");
    for (const name of SIGNALS) {
      const tile = $("tile-" + name);
      const absent = one && !seg && name !== "precision";
      const s = absent ? null : view[name];
      const state = (s && typeof s.state === "string") ? s.state : "unknown";
      const t = absent ? { big: DASH, reason: missing } : fns[name]();
      tile.dataset.state = state;
      tile.className = "tile " + stateClass(state);
      tile.querySelector("h2").dataset.label = state;
      tile.querySelector(".big").textContent = t.big;
      tile.querySelector(".reason").textContent = t.reason;
      const mine = active.filter(a => alertSignal(a) === name);
      const firing = mine.filter(a => a.state !== "pending");
      tile.querySelector(".alert-note").textContent = mine.length === 0 ? "" :
        (firing.length ? "alert firing: " + firing.map(alertName).join(", ") : "alert pending: " + mine.map(alertName).join(", "));
    }
    const w = sig.window;
    if (w) {
      const s = parseTime(w.start), e = parseTime(w.end);
      $("window").textContent = "window " + (s ? clock(s) : DASH) + " " + DASH + " " + (e ? clock(e) : DASH) + " \u00b7 " + count(w.requests) + " requests";
    }
  }

  function signalsUnavailable(msg) {
    for (const name of SIGNALS) {
      const tile = $("tile-" + name);
      tile.dataset.state = "unknown";
      tile.className = "tile unknown";
      tile.querySelector("h2").dataset.label = "unknown";
      tile.querySelector(".big").textContent = DASH;
      tile.querySelector(".reason").textContent = msg;
      tile.querySelector(".alert-note").textContent = "";
    }
  }

  // ---- models -------------------------------------------------------------

  // The gateway keeps every signal but precision per model too: a segment
  // per model (an adapter is one of its own), worst first, and "other"
  // for the models without one. Older gateways send no segments.
  const OTHER = "other";
  const MODEL_SIGNALS = [
    ["drift", "Input drift", driftTile], ["confidence", "Confidence", confidenceTile],
    ["latency", "Latency", latencyTile], ["output", "Output", outputTile],
  ];

  let model = params.get("model") || ""; // the model the tiles show; "" for all
  let lastPoll = null; // {sig, alerts}: to redraw at once when the model changes

  function segmentsOf(sig) {
    return sig && Array.isArray(sig.segments) ? sig.segments.filter(s => s && typeof s.model === "string") : [];
  }
  function segmentLabel(s) {
    if (s.model === OTHER && !s.base_model) return "other (models without their own)";
    return s.model + (s.base_model ? " (base: " + s.base_model + ")" : "");
  }
  // segmentClass: a segment is "alarm", "ok" or "unknown".
  function segmentClass(st) { return st === "alarm" ? "alarm" : stateClass(st); }

  // renderModelPicker lists "All models" and the segments by name
  // ("other" last), rebuilt only when they change so that an open list
  // stays open; a model asked for by the URL stays listed.
  function renderModelPicker(segs) {
    const opts = segs.slice().sort((a, b) => (a.model === OTHER) - (b.model === OTHER) || a.model.localeCompare(b.model))
      .map(s => [s.model, segmentLabel(s)]);
    if (model && !opts.some(o => o[0] === model)) opts.push([model, model]);
    opts.unshift(["", "All models"]);
    const sel = $("model");
    const key = JSON.stringify(opts);
    if (sel.dataset.key !== key) {
      sel.replaceChildren(...opts.map(([v, t]) => { const o = el("option", t); o.value = v; return o; }));
      sel.dataset.key = key;
    }
    sel.value = model;
    $("model-pick").hidden = opts.length === 1;
  }

  function miniTile(signal, title, state, cls, big, reason, note) {
    const t = el("div", null, "tile mini " + cls);
    t.dataset.signal = signal;
    t.dataset.state = state;
    const h = el("h3", title);
    h.dataset.label = state;
    t.append(h, el("p", big, "big"));
    const r = el("p", reason, "reason");
    r.title = reason;
    t.appendChild(r);
    if (note) t.appendChild(el("p", note, "alert-note"));
    return t;
  }

  // renderModelRows draws a row of compact tiles per segment, in the
  // gateway's order (worst first); shown is the segment the main tiles
  // show ("" for the fleet).
  function renderModelRows(segs, alerts, thresholds, shown) {
    $("models").hidden = segs.length === 0;
    const box = $("model-rows");
    const focused = box.contains(document.activeElement) ? document.activeElement.dataset.model : undefined;
    const active = (alerts || []).filter(isActive);
    box.replaceChildren(...segs.map(s => {
      const row = el("div", null, "model-row " + segmentClass(s.state) + (shown && s.model === shown ? " selected" : ""));
      row.dataset.model = s.model;
      row.dataset.state = s.state || "unknown";
      const head = el("div", null, "model-name");
      const b = el("button", segmentLabel(s));
      b.type = "button";
      b.dataset.model = s.model;
      b.title = s.model === model ? "show all models" : "show this model's signals in the tiles above";
      b.setAttribute("aria-pressed", String(s.model === model));
      head.append(b, " ", pill(s.state || "unknown", segmentClass(s.state)));
      if (s.state !== "alarm" && s.state !== "ok" && s.reason) head.appendChild(el("p", s.reason, "reason"));
      row.appendChild(head);

      const mine = active.filter(a => modelOf(a) === s.model);
      const note = sig => {
        const m = mine.filter(a => alertSignal(a) === sig);
        if (m.length === 0) return "";
        return m.some(a => a.state !== "pending") ? "alert firing" : "alert pending";
      };
      const th = (Array.isArray(thresholds) ? thresholds : []).filter(t => modelOf(t) === s.model);
      for (const [name, title, fn] of MODEL_SIGNALS) {
        const sg = s[name];
        const st = sg && typeof sg.state === "string" ? sg.state : "unknown";
        const t = fn(sg, th);
        row.appendChild(miniTile(name, title, st, stateClass(st), t.big, t.reason, note(name)));
      }
      // Errors are judged by the alert rules only: their state is the
      // alerts'.
      const errs = mine.filter(a => alertSignal(a) === "errors");
      const est = errs.some(a => a.state !== "pending") ? "firing" : errs.length ? "pending"
        : isNum(s.error_rate) ? "ok" : "unknown";
      const ecls = { firing: "alarm", pending: "warn", ok: "ok", unknown: "unknown" }[est];
      row.appendChild(miniTile("traffic", "Requests", est, ecls, count(s.requests),
        "error rate " + pct(s.error_rate), errs.length ? errs.map(a => a.name).join(", ") : ""));
      return row;
    }));
    if (focused !== undefined) {
      const b = [...box.querySelectorAll("button")].find(x => x.dataset.model === focused);
      if (b) b.focus();
    }
  }

  // renderScope says whose signals the tiles show.
  function renderScope(seg, missing) {
    const box = $("scope");
    $("history-scope").hidden = !model;
    if (!model) { box.hidden = true; box.replaceChildren(); return; }
    const parts = [];
    if (!seg) parts.push("Model " + model + ": " + missing + ".");
    else {
      parts.push((seg.model === model ? "Model " + segmentLabel(seg) : "Model " + model + " has no segment of its own; showing " + segmentLabel(seg)) +
        ": " + count(seg.requests) + " requests in the window, error rate " + pct(seg.error_rate) + ".");
      if (seg.state === "alarm") parts.push("In alarm: " + (Array.isArray(seg.alarms) && seg.alarms.length ? seg.alarms.join(", ") : "yes") + ".");
      else if (seg.state !== "ok" && seg.reason) parts.push(seg.reason.charAt(0).toUpperCase() + seg.reason.slice(1) + ".");
    }
    parts.push("Precision and the charts below cover all models.");
    const all = el("button", "show all models");
    all.type = "button";
    all.addEventListener("click", () => setModel(""));
    box.replaceChildren(el("span", parts.join(" ")), " ", all);
    box.className = seg ? segmentClass(seg.state) : "unknown";
    box.hidden = false;
  }

  // renderSignals draws the tiles, the picker and the model rows from one
  // poll; one is /admin/signals?model= when the model has no segment in
  // the poll (or the error that answered), undefined while not asked.
  function renderSignals(sig, alerts, one) {
    const segs = segmentsOf(sig);
    renderModelPicker(segs);
    if (!model) {
      renderModelRows(segs, alerts, sig.thresholds, "");
      renderScope(null);
      renderTiles(sig, alerts);
      return;
    }
    let seg = segs.find(s => s.model === model) || null, missing = "";
    if (!seg) {
      if (one === undefined) missing = "loading\u2026";
      else if (one instanceof HTTPError && one.status === 404) missing = "no request of this model was seen yet";
      else if (one instanceof Error) missing = "unavailable (" + one.message + ")";
      else if (one && typeof one.model === "string") seg = one;
      else missing = "this gateway keeps no signals per model";
    }
    renderModelRows(segs, alerts, sig.thresholds, seg ? seg.model : "");
    renderScope(seg, missing);
    renderTiles(sig, alerts, seg, missing);
  }

  function setModel(m) {
    model = m;
    const p = new URLSearchParams(location.hash.slice(1));
    if (m) p.set("model", m); else p.delete("model");
    history.replaceState(null, "", "#" + p.toString());
    if (lastPoll) {
      try { renderSignals(lastPoll.sig, lastPoll.alerts); } catch (e) { report("signals", e); showProblems(); }
    }
    if (busy) again = true; // the poll in flight may lack the model's segment
    else refresh();
  }

  // ---- tables -------------------------------------------------------------

  function sourceText(s) { return s ? String(s).replace(/_/g, " ") : DASH; }

  function renderBackends(list) {
    fillBody($("backends"), (list || []).map(b => row => {
      const name = td(row, b.name);
      name.appendChild(el("div", b.url, "labels"));
      const h = td(row, "");
      const hl = b.health || {};
      const ej = parseTime(hl.ejected_until);
      h.appendChild(pill(b.healthy ? "healthy" : "unhealthy", b.healthy ? "ok" : "alarm"));
      const notes = [];
      if (hl.ejected) {
        let n = ej && ej > new Date() ? "ejected, next probe at " + clock(ej) : "ejected, probe due";
        if (hl.failed_probes > 0) n += " (" + hl.failed_probes + " failed)";
        notes.push(n);
      }
      if (hl.active === false) notes.push("active check failing");
      if (hl.consecutive_failures > 0) notes.push(hl.consecutive_failures + " failures in a row");
      if (notes.length) h.appendChild(el("div", notes.join(", "), "labels"));
      td(row, count(b.inflight), "n");
      td(row, num(b.weight) + " / " + num(b.base_weight), "n", b.weight_shared ? "from the replicas' shared store" : "current / configured");
      td(row, pct(b.load_blend), "n");
      const o = b.observed || {};
      td(row, ms(o.ttfb_ms), "n");
      td(row, pct(o.error_rate), "n");
      const pc = b.prefix_cache || {};
      td(row, pct(pc.hit_rate), "n", pc.source ? "prefix cache, last minute, from the " + pc.source + " (" + count(pc.cached_tokens) + " of " + count(pc.prompt_tokens) + " prompt tokens reported cached since start)" : "");
      const load = Object.entries(b.load || {}).map(([k, v]) => k + " " + pct(v));
      if (b.requests) load.push("waiting " + count(b.requests.waiting) + ", running " + count(b.requests.running));
      td(row, load.length ? load.join(", ") : DASH, "labels");
    }), 9, "no backends");
  }

  // renderQuotas lists the tenants under quotas, those held back first:
  // a limit used up now, or refusals since the last poll.
  let lastRefused = {};
  function renderQuotas(usage) {
    const q = usage && usage.quotas;
    const section = $("quotas-section");
    if (!q || !q.enabled) { section.hidden = true; return; }
    section.hidden = false;
    $("quotas-note").textContent = "fail " + q.fail + " · store " + q.store + " · live replicas: " + count(q.live_replicas) +
      (q.admitted_locally > 0 ? " · " + count(q.admitted_locally) + " admitted from the local share" : "");
    const refusedOf = t => Object.values(t.rejected || {}).reduce((a, b) => a + (isNum(b) ? b : 0), 0);
    const exhausted = t => {
      const l = t.limits || {}, r = t.remaining;
      return !!r && ["requests_per_minute", "tokens_per_minute", "tokens_per_day", "max_concurrent"].some(k => l[k] > 0 && r[k] === 0);
    };
    const rows = (q.tenants || []).map(t => {
      const refused = refusedOf(t);
      const held = exhausted(t) || refused > (lastRefused[t.tenant] || 0);
      return { t, refused, held };
    });
    const next = {};
    rows.forEach(r => { next[r.t.tenant] = r.refused; });
    lastRefused = next;
    rows.sort((a, b) => (b.held - a.held) || (b.refused - a.refused) || a.t.tenant.localeCompare(b.t.tenant));
    const of = (used, limit) => limit > 0 ? count(used) + " / " + count(limit) : count(used);
    fillBody($("quotas"), rows.map(({ t, refused, held }) => row => {
      const l = t.limits || {}, u = t.used || {};
      td(row, t.tenant);
      td(row, "").appendChild(pill(held ? "held back" : "ok", held ? "alarm" : "ok"));
      td(row, of(u.requests_last_minute, l.requests_per_minute), "n");
      td(row, of(u.tokens_last_minute, l.tokens_per_minute), "n");
      td(row, of(u.tokens_today, l.tokens_per_day), "n");
      td(row, of(u.in_flight, l.max_concurrent), "n");
      const rj = t.rejected || {};
      td(row, count(refused), "n", Object.entries(rj).map(([k, v]) => k + " " + count(v)).join(", "));
    }), 7, "no tenant under a limit yet");
  }

  const STATE_ORDER = { firing: 0, silenced: 1, pending: 2, resolved: 3 };
  function renderAlerts(list) {
    const sorted = (list || []).slice().sort((a, b) =>
      (STATE_ORDER[a.state] ?? 9) - (STATE_ORDER[b.state] ?? 9) || String(b.since).localeCompare(String(a.since)));
    fillBody($("alerts"), sorted.map(a => row => {
      const cls = a.state === "resolved" ? "ok" : a.state === "pending" ? "warn" : a.state === "silenced" ? "unknown" : "alarm";
      td(row, "").appendChild(pill(a.state, cls));
      const n = td(row, a.name);
      n.appendChild(el("div", a.rule, "labels"));
      const since = parseTime(a.since);
      td(row, ago(since), "", since ? since.toLocaleString() : "");
      const f = ruleFmt(a.rule);
      const over = isNum(a.value) && isNum(a.threshold) && a.value > a.threshold;
      td(row, f(a.value), over ? "n error-text" : "n");
      td(row, f(a.threshold), "n");
      td(row, sourceText(a.threshold_source));
      td(row, labelText(a.labels, ["alertname", "rule"]), "labels");
    }), 7, "no alerts");
  }

  const OUTCOME_CLASS = { sent: "ok", retrying: "warn", failed: "alarm", dropped: "warn", no_receiver: "unknown" };
  function renderNotifications(list) {
    const sorted = (list || []).slice().sort((a, b) => String(b.time).localeCompare(String(a.time))).slice(0, 25);
    fillBody($("notifications"), sorted.map(n => row => {
      const t = parseTime(n.time);
      td(row, t ? clock(t) : DASH, "", t ? t.toLocaleString() + " (" + ago(t) + ")" : "");
      td(row, n.name);
      td(row, "").appendChild(pill(n.resolved ? "resolved" : "firing", n.resolved ? "ok" : "alarm"));
      const o = td(row, "");
      o.appendChild(pill(String(n.outcome || DASH).replace(/_/g, " "), OUTCOME_CLASS[n.outcome] || "unknown"));
      if (n.error) o.appendChild(el("div", n.error, "error-text"));
      td(row, labelText(n.labels, ["alertname"]), "labels");
      td(row, n.summary || DASH);
    }), 6, "no notifications sent");
  }

  // ---- charts -------------------------------------------------------------

  const charts = {};      // id → uPlot
  const chartKeys = {};   // id → the series layout the chart was built for
  const marks = {};       // id → per-point alert level (0 none, 1 pending, 2 firing)
  const timeCharts = {};  // ids of charts on the shared time axis
  let zoom = null;        // {min, max} in seconds while the user has zoomed
  let stepS = 1;
  window.vigilCharts = charts;

  const AXIS = {
    stroke: "#4b5563", font: "11px system-ui, sans-serif",
    grid: { stroke: "#eef2f7", width: 1 }, ticks: { stroke: "#e5e7eb", width: 1, size: 4 },
  };
  // tick writes an axis value with as many decimals as the tick spacing
  // needs, so that neighbouring ticks never read the same.
  function tick(v, incr) {
    if (!isNum(v)) return "";
    if (!isNum(incr) || incr <= 0 || incr >= 1) return num(v);
    let d = Math.max(0, Math.ceil(-Math.log10(incr) - 1e-9));
    while (d < 10 && Math.abs(Number(incr.toFixed(d)) - incr) > incr * 1e-6) d++; // 0.0025 needs 4
    const s = trimZeros(Math.abs(v).toFixed(d));
    return (v < 0 && Number(s) !== 0 ? MINUS : "") + s;
  }
  function yAxis(scale, fmt, right) {
    const a = Object.assign({}, AXIS, { scale, size: 62, values: (u, splits, ai, space, incr) => splits.map(v => fmt(v, incr)) });
    if (right) { a.side = 1; a.grid = { show: false }; }
    return a;
  }
  function line(label, color, fmt, extra) {
    return Object.assign({ label, stroke: color, width: 1.5, value: (u, v) => fmt(v) }, extra || {});
  }
  function thresholdLine(label, color, fmt, extra) {
    return line(label, color, fmt, Object.assign({ width: 1, dash: [6, 4], paths: uPlot.paths.stepped({ align: 1 }) }, extra || {}));
  }
  // fromZero ranges a scale from 0 (or below, for negative values) to at
  // least minSpan, so that noise far below an alert threshold stays flat.
  function fromZero(minSpan) {
    return (u, min, max) => {
      if (!isNum(min) || !isNum(max)) return [0, minSpan];
      const lo = Math.min(0, min * 1.1);
      return [lo, Math.max(max * 1.1, lo + minSpan)];
    };
  }
  function logRange(u, min, max) {
    if (!isNum(min) || !isNum(max) || min <= 0) return [1, 1000];
    return uPlot.rangeLog(min, max, 10, true);
  }
  function autoRange(u, min, max) {
    if (!isNum(min) || !isNum(max)) return [0, 1];
    if (min === max) return [min - Math.abs(min) * 0.1 - 0.01, max + Math.abs(max) * 0.1 + 0.01];
    const pad = (max - min) * 0.1;
    return [min - pad, max + pad];
  }
  const PCT_SCALE = { range: [0, 1.05] };

  // shading draws the alert spans of a time chart behind its series.
  function shading(id) {
    return {
      hooks: {
        drawClear: [u => {
          const m = marks[id];
          const xs = u.data[0];
          if (!m || !xs || xs.length === 0) return;
          const ctx = u.ctx;
          const { left, top, width, height } = u.bbox;
          ctx.save();
          ctx.beginPath();
          ctx.rect(left, top, width, height);
          ctx.clip();
          const px = Math.max(1, Math.round(uPlot.pxRatio || 1));
          for (let i = 0; i < xs.length;) {
            const lv = m[i];
            if (!lv) { i++; continue; }
            let j = i;
            while (j + 1 < xs.length && m[j + 1] === lv) j++;
            const x0 = u.valToPos(xs[i], "x", true);
            const x1 = u.valToPos(j + 1 < xs.length ? xs[j + 1] : xs[j] + stepS, "x", true);
            ctx.fillStyle = lv === 2 ? "rgba(220, 38, 38, 0.14)" : "rgba(245, 158, 11, 0.18)";
            ctx.fillRect(x0, top, Math.max(x1 - x0, px), height);
            ctx.fillStyle = lv === 2 ? "rgba(220, 38, 38, 0.75)" : "rgba(217, 119, 6, 0.8)";
            ctx.fillRect(x0, top, px, height);
            i = j + 1;
          }
          ctx.restore();
        }],
      },
    };
  }

  function applyZoom() {
    for (const id of Object.keys(timeCharts)) {
      const u = charts[id];
      if (!u) continue;
      u.batch(() => {
        if (zoom) u.setScale("x", zoom);
        else u.setData(u.data, true);
      });
    }
    $("unzoom").hidden = !zoom;
  }

  function onSelect(u) {
    if (u.select.width < 4) return;
    const min = u.posToVal(u.select.left, "x");
    const max = u.posToVal(u.select.left + u.select.width, "x");
    for (const id of Object.keys(timeCharts)) if (charts[id]) charts[id].setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    if (!(max > min)) return;
    zoom = { min, max };
    applyZoom();
  }

  // timeTicks writes local times, as precise as the tick spacing needs (one
  // line: uPlot's default adds a second, date line that crowds short spans).
  function timeTicks(u, splits, ai, space, incr) {
    return splits.map(v => {
      const d = new Date(v * 1000);
      if (incr >= 86400) return (d.getMonth() + 1) + "/" + d.getDate();
      const hm = pad2(d.getHours()) + ":" + pad2(d.getMinutes());
      return incr < 60 ? hm + ":" + pad2(d.getSeconds()) : hm;
    });
  }

  function chartOpts(id, def, width) {
    const time = def.time !== false;
    const opts = {
      width, height: CHART_H,
      series: [time ? { value: (u, v) => isNum(v) ? clock(new Date(v * 1000)) : DASH } : { label: def.xLabel || "x", value: (u, v) => def.xFmt(v) }].concat(def.series),
      axes: [time ? Object.assign({}, AXIS, { space: 64, size: 30, values: timeTicks }) : Object.assign({}, AXIS, { values: (u, s) => s.map(def.xFmt) })].concat(def.axes),
      scales: Object.assign({ x: time ? { time: true } : { time: false, range: def.xRange } }, def.scales),
      legend: { live: true },
      cursor: time ? { sync: { key: "vigil" }, drag: { x: true, y: false, setScale: false } } : { drag: { x: false, y: false } },
      plugins: time ? [shading(id)] : [],
      hooks: time ? { setSelect: [onSelect], setCursor: [showLatest] } : {},
    };
    if (def.bands) opts.bands = def.bands;
    return opts;
  }

  // showLatest fills the legend with the newest values while the cursor is
  // off the chart, so that it reads as the current state.
  function showLatest(u) {
    const n = u.data[0] ? u.data[0].length : 0;
    if (n > 0 && u.cursor.idx == null) u.setLegend({ idx: n - 1 }, false);
  }

  function chartWidth(node) { return Math.max(280, Math.floor(node.clientWidth)); }

  function renderChart(id, def) {
    const node = $(id);
    const data = [def.x].concat(def.cols);
    const hasData = def.cols.some(c => c.some(isNum));
    node.dataset.empty = hasData ? "" : (def.empty || "no data in this range");
    const time = def.time !== false;
    if (time) { timeCharts[id] = true; marks[id] = def.marks || null; }
    let u = charts[id];
    if (u && chartKeys[id] !== def.key) { u.destroy(); u = null; delete charts[id]; }
    if (!u) {
      u = new uPlot(chartOpts(id, def, chartWidth(node)), data, node);
      charts[id] = u;
      chartKeys[id] = def.key;
      if (time) u.over.addEventListener("dblclick", () => { zoom = null; applyZoom(); });
      if (time && zoom) u.setScale("x", zoom);
    } else {
      u.batch(() => {
        u.setData(data, true);
        if (time && zoom) u.setScale("x", zoom);
      });
    }
    if (time) showLatest(u);
  }

  // col maps the points to one data column, numbers or null.
  function col(points, f) { return points.map(p => numOrNull(f(p))); }
  function pos(v) { return isNum(v) && v > 0 ? v : null; }

  // pointThreshold finds a rule's threshold in a history point: keyed by
  // rule, or (for per-backend series) by a key naming rule and backend.
  function pointThreshold(p, rule, backend) {
    const t = p.thresholds;
    if (!t) return null;
    if (Array.isArray(t)) { const e = findThreshold(t, rule, backend) || findThreshold(t, rule); return e ? e.threshold : null; }
    let e = t[rule];
    if (backend) {
      for (const k of Object.keys(t)) if (k !== rule && k.indexOf(rule) === 0 && k.indexOf(backend) > 0) { e = t[k]; break; }
    }
    return e && typeof e === "object" ? e.threshold : null;
  }

  function alertLevels(points, signals) {
    return points.map(p => {
      let l = 0;
      for (const a of Array.isArray(p.alerts) ? p.alerts : []) {
        if (!a || signals.indexOf(alertSignal(a)) < 0) continue;
        if (a.state === "firing" || a.state === "silenced") return 2;
        if (a.state === "pending") l = 1;
      }
      return l;
    });
  }

  function driftDef(P) {
    const maxBy = {};
    for (const p of P) for (const [k, v] of Object.entries(featureMap(p.drift && p.drift.features))) maxBy[k] = Math.max(maxBy[k] ?? -Infinity, v);
    const feats = Object.keys(maxBy).sort((a, b) => maxBy[b] - maxBy[a]).slice(0, 6).sort();
    const series = [line("score (largest PSI)", "#111827", num, { width: 2.2 })];
    // Without a reference the score is 0 but means "not computed".
    const cols = [col(P, p => p.drift && p.drift.state !== "unknown" ? p.drift.score : null)];
    feats.forEach((f, i) => {
      series.push(line(f, PALETTE[i % PALETTE.length], num, { width: 1 }));
      cols.push(col(P, p => featureMap(p.drift && p.drift.features)[f]));
    });
    series.push(thresholdLine("alert threshold", "#dc2626", num));
    cols.push(col(P, p => pointThreshold(p, "drift_score")));
    const waiting = P.some(p => p.drift && p.drift.state === "unknown");
    return {
      key: "drift|" + feats.join(","), series, cols, axes: [yAxis("y", tick)], scales: { y: { range: fromZero(0.15) } },
      marks: alertLevels(P, ["drift"]), empty: waiting ? "waiting for a reference window" : undefined,
    };
  }

  function confidenceDef(P) {
    const c = p => p.confidence || {};
    return {
      key: "confidence",
      series: [
        line("confidence", "#2563eb", pct, { scale: "pct", width: 2 }),
        line("low-confidence share", "#ea580c", pct, { scale: "pct" }),
        line("drop vs reference", "#9333ea", pct, { scale: "drop", width: 1 }),
        thresholdLine("drop threshold", "#dc2626", pct, { scale: "drop" }),
      ],
      cols: [
        col(P, p => c(p).confidence),
        col(P, p => c(p).low_share ?? c(p).low_confidence_share),
        col(P, p => c(p).drop),
        col(P, p => pointThreshold(p, "confidence_drop")),
      ],
      axes: [yAxis("pct", pct), yAxis("drop", pct, true)],
      scales: { pct: PCT_SCALE, drop: { range: fromZero(0.05) } },
      marks: alertLevels(P, ["confidence"]),
    };
  }

  function outputDef(P) {
    const o = p => p.output || {};
    const band = (p, s) => {
      const m = o(p).baseline_mean, sd = o(p).baseline_std;
      return isNum(m) && isNum(sd) ? m + s * 3 * sd : null;
    };
    return {
      key: "output",
      series: [
        line("perplexity (last minute)", "#2563eb", num, { width: 2 }),
        line("minute in progress", "#93c5fd", num, { width: 1, dash: [2, 3] }),
        line("band +3\u03c3", "#16a34a", num, { width: 1 }),
        line("band \u22123\u03c3", "#16a34a", num, { width: 1 }),
        line("baseline mean", "#16a34a", num, { width: 1, dash: [6, 4] }),
      ],
      cols: [
        col(P, p => o(p).perplexity),
        col(P, p => o(p).current ?? o(p).current_perplexity),
        col(P, p => band(p, 1)),
        col(P, p => band(p, -1)),
        col(P, p => o(p).baseline_mean),
      ],
      bands: [{ series: [3, 4], fill: "rgba(22, 163, 74, 0.10)" }],
      axes: [yAxis("y", tick)],
      scales: { y: { range: autoRange } },
      marks: alertLevels(P, ["output"]),
    };
  }

  function latencyDef(P) {
    const l = p => p.latency || {};
    return {
      key: "latency",
      series: [
        line("TTFT P95", "#2563eb", ms, { width: 2 }),
        line("E2E P95", "#9333ea", ms, { width: 2 }),
        line("ITL P95", "#16a34a", ms),
        thresholdLine("TTFT threshold", "#2563eb", ms),
        thresholdLine("E2E threshold", "#9333ea", ms),
      ],
      cols: [
        col(P, p => pos(l(p).ttft_p95)),
        col(P, p => pos(l(p).e2e_p95)),
        col(P, p => pos(l(p).itl_p95)),
        col(P, p => pos(pointThreshold(p, "latency_ttft_p95"))),
        col(P, p => pos(pointThreshold(p, "latency_e2e_p95"))),
      ],
      axes: [yAxis("y", ms)],
      scales: { y: { distr: 3, log: 10, range: logRange } },
      marks: alertLevels(P, ["latency"]),
    };
  }

  function pairsOf(p) { return Array.isArray(p.precision) ? p.precision : (p.precision && Array.isArray(p.precision.pairs) ? p.precision.pairs : []); }

  function precisionDef(P) {
    const names = [];
    for (const p of P) for (const q of pairsOf(p)) if (q && q.backend && names.indexOf(q.backend) < 0) names.push(q.backend);
    names.sort();
    const pair = (p, b) => pairsOf(p).find(q => q && q.backend === b) || {};
    const series = [], cols = [], withThreshold = [];
    names.forEach((b, i) => {
      const color = PALETTE[i % PALETTE.length];
      const ref = (P.map(p => pair(p, b).reference).find(Boolean)) || "reference";
      series.push(line(b + " KL vs " + ref, color, nats, { scale: "kl", width: 2 }));
      cols.push(col(P, p => pair(p, b).kl));
      series.push(line(b + " top-1 agreement", color, pct, { scale: "pct", width: 1, dash: [4, 3] }));
      cols.push(col(P, p => pair(p, b).top1_agreement));
      // Per-backend thresholds are not in the history yet: a line only
      // when there are values.
      const th = col(P, p => pointThreshold(p, "precision_divergence", b));
      if (th.some(isNum)) {
        series.push(thresholdLine(b + " KL threshold", "#dc2626", nats, { scale: "kl" }));
        cols.push(th);
        withThreshold.push(b);
      }
    });
    return {
      key: "precision|" + names.join(",") + "|" + withThreshold.join(","), series, cols,
      axes: [yAxis("kl", tick), yAxis("pct", pct, true)],
      scales: { kl: { range: fromZero(0.01) }, pct: PCT_SCALE }, // 0.01: the rule's floor
      marks: alertLevels(P, ["precision"]),
      empty: P.length && names.length === 0 ? "no backend is compared with a reference" : undefined,
    };
  }

  function backendNames(P) {
    const names = [];
    for (const p of P) for (const b of Array.isArray(p.backends) ? p.backends : []) if (b && b.name && names.indexOf(b.name) < 0) names.push(b.name);
    return names;
  }
  function backendOf(p, name) { return (Array.isArray(p.backends) ? p.backends : []).find(b => b && b.name === name) || {}; }

  // shareDef: each backend's share of the requests this gateway sent
  // between two history points (from the cumulative picks); the weights
  // (the node factor) are in the table and follow the load chart.
  function shareDef(P) {
    const names = backendNames(P);
    const share = (i, n) => {
      if (i === 0) return null;
      let total = 0, own = null;
      for (const m of names) {
        const a = backendOf(P[i - 1], m).picks, b = backendOf(P[i], m).picks;
        if (!isNum(a) || !isNum(b) || b < a) continue; // unknown, or a restart
        total += b - a;
        if (m === n) own = b - a;
      }
      return total > 0 && own !== null ? own / total : null;
    };
    return {
      key: "share|" + names.join(","),
      series: names.map((n, i) => line(n, PALETTE[i % PALETTE.length], pct, { scale: "pct", width: 2 })),
      cols: names.map(n => P.map((_, i) => numOrNull(share(i, n)))),
      axes: [yAxis("pct", pct)], scales: { pct: PCT_SCALE },
      marks: alertLevels(P, ["errors"]),
    };
  }

  function reqTick(v) { return Number.isInteger(v) ? count(v) + " req" : ""; }

  function loadDef(P) {
    const names = backendNames(P);
    const blend = P.some(p => (p.backends || []).some(b => b && isNum(b.load_blend)));
    const series = [], cols = [];
    const keys = [];
    if (!blend) {
      for (const p of P) for (const b of p.backends || []) for (const [k, v] of Object.entries((b && b.load) || {})) if (isNum(v) && keys.indexOf(k) < 0) keys.push(k);
      keys.sort();
    }
    names.forEach((n, i) => {
      const color = PALETTE[i % PALETTE.length];
      if (blend) {
        series.push(line(n + " load", color, pct, { scale: "pct", width: 2 }));
        cols.push(col(P, p => backendOf(p, n).load_blend));
      } else {
        keys.forEach((k, j) => {
          series.push(line(n + " " + k, color, pct, { scale: "pct", width: 1.5, dash: j ? [2 + 2 * j, 3] : undefined }));
          cols.push(col(P, p => (backendOf(p, n).load || {})[k]));
        });
      }
      // In-flight counts are noisy: hidden (a click on the legend shows
      // them) unless there is nothing else to draw.
      series.push(line(n + " in flight", color, count, { scale: "n", width: 1, dash: [1, 3], show: !blend && keys.length === 0, paths: uPlot.paths.stepped({ align: 1 }) }));
      cols.push(col(P, p => backendOf(p, n).inflight));
    });
    $("load-note").textContent = names.length && !blend && keys.length === 0 ? "(no load signals reported: in-flight requests only)" : "";
    return {
      key: "load|" + blend + "|" + keys.join(",") + "|" + names.join(","), series, cols,
      // Without load signals the in-flight axis moves to the left.
      axes: series.some(x => x.scale === "pct") ? [yAxis("pct", pct), yAxis("n", reqTick, true)] : [yAxis("n", reqTick)],
      scales: { pct: PCT_SCALE, n: { range: fromZero(4) } },
      marks: alertLevels(P, ["errors"]),
    };
  }

  // prefixDef: each backend's prefix-cache hit rate over the minute
  // before each history point, and the fleet's (hits summed over queries
  // summed).
  function prefixDef(P) {
    const names = backendNames(P);
    const fleet = p => {
      let q = 0, h = 0;
      for (const b of Array.isArray(p.backends) ? p.backends : []) {
        if (b && isNum(b.prefix_window_queries)) { q += b.prefix_window_queries; h += isNum(b.prefix_window_hits) ? b.prefix_window_hits : 0; }
      }
      return q > 0 ? h / q : null;
    };
    const series = names.map((n, i) => line(n, PALETTE[i % PALETTE.length], pct, { scale: "pct", width: 1.5 }));
    const cols = names.map(n => col(P, p => backendOf(p, n).prefix_hit_rate));
    series.push(line("fleet", "#888", pct, { scale: "pct", width: 2.5, dash: [6, 3] }));
    cols.push(col(P, fleet));
    return {
      key: "prefix|" + names.join(","), series, cols,
      axes: [yAxis("pct", pct)], scales: { pct: PCT_SCALE },
    };
  }

  const TIME_CHARTS = [
    ["chart-drift", driftDef], ["chart-confidence", confidenceDef], ["chart-output", outputDef],
    ["chart-latency", latencyDef], ["chart-precision", precisionDef],
    ["chart-backends-weight", shareDef], ["chart-backends-load", loadDef], ["chart-backends-prefix", prefixDef],
  ];

  // spacing is the time between history points: the step asked for, or
  // the resolution when that is coarser.
  function spacing(h) { return Math.max(durSec(h && h.step) || 0, durSec(h && h.resolution) || 0) || null; }
  function durText(sec) {
    if (!isNum(sec)) return DASH;
    return sec >= 3600 ? num(sec / 3600) + " h" : sec >= 60 ? num(sec / 60) + " min" : num(sec) + " s";
  }

  function renderHistory(h, emptyMsg) {
    const points = (h && Array.isArray(h.points) ? h.points : []).filter(p => p && parseTime(p.t))
      .sort((a, b) => Date.parse(a.t) - Date.parse(b.t));
    const x = points.map(p => Date.parse(p.t) / 1000);
    stepS = spacing(h) || (x.length > 1 ? x[x.length - 1] - x[x.length - 2] : 1);
    for (const [id, def] of TIME_CHARTS) {
      try {
        const d = def(points);
        d.x = x;
        if (points.length === 0) d.empty = emptyMsg;
        renderChart(id, d);
      } catch (e) {
        report(id, e);
      }
    }
  }

  function renderCalibration(sig) {
    const cal = sig && sig.confidence && sig.confidence.calibration;
    const labels = cal && isNum(cal.labels) ? cal.labels : 0;
    const bins = labels > 0 && Array.isArray(cal.bins) ? cal.bins.filter(b => b && b.count > 0 && isNum(b.confidence) && isNum(b.accuracy)) : [];
    const xs = [0, 1];
    for (const b of bins) if (xs.indexOf(b.confidence) < 0) xs.push(b.confidence);
    xs.sort((a, b) => a - b);
    const acc = xs.map(v => { const b = bins.find(q => q.confidence === v); return b ? b.accuracy : null; });
    const n = xs.map(v => { const b = bins.find(q => q.confidence === v); return b ? b.count : null; });
    $("calibration-note").textContent = labels > 0
      ? "ECE " + pct(cal.ece) + ", " + count(labels) + " labels, accuracy " + pct(cal.accuracy) + (isNum(cal.temperature) ? ", temperature " + num(cal.temperature) : "")
      : "";
    renderChart("chart-calibration", {
      key: "calibration", time: false, xLabel: "confidence", xFmt: pct, xRange: [0, 1],
      x: xs,
      series: [
        line("perfectly calibrated", "#9ca3af", pct, { width: 1, dash: [5, 4] }),
        line("accuracy", "#2563eb", pct, {
          width: 1.5, spanGaps: true, points: { show: true, size: 8, fill: "#2563eb" },
          value: (u, v, si, i) => isNum(v) ? pct(v) + " (" + count(n[i]) + " labels)" : DASH,
        }),
      ],
      cols: [xs.slice(), acc],
      axes: [yAxis("y", pct)],
      scales: { y: { range: [0, 1.02] } },
      empty: bins.length ? "" : "no calibration labels yet (POST /v1/feedback)",
    });
    // The diagonal is always there: data only counts when accuracy has some.
    if (!bins.length) $("chart-calibration").dataset.empty = "no calibration labels yet (POST /v1/feedback)";
  }

  // ---- the loop -----------------------------------------------------------

  const problems = new Map();
  function report(part, e) { problems.set(part, e && e.message ? e.message : String(e)); }

  function showProblems() {
    const box = $("err");
    if (problems.size === 0) { box.hidden = true; box.textContent = ""; return; }
    const unauthorized = [...problems.values()].some(m => / HTTP 401$/.test(m));
    box.textContent = unauthorized
      ? "The admin API needs a token: open this page as /dashboard#token=YOUR_TOKEN."
      : [...problems.entries()].map(([k, v]) => k + ": " + v).join("; ");
    box.hidden = false;
  }

  let busy = false, again = false;
  async function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    problems.clear();
    const step = Math.max(1, Math.round(RANGES[range] / TARGET_POINTS)) + "s";
    try {
      const [sig, be, al, no, hi, us] = await Promise.allSettled([
        getJSON("/admin/signals"), getJSON("/admin/backends"), getJSON("/admin/alerts"),
        getJSON("/admin/notifications"),
        getJSON("/admin/history?since=" + encodeURIComponent(range) + "&step=" + encodeURIComponent(step)),
        getJSON("/admin/usage"),
      ]);
      const alerts = al.status === "fulfilled" && Array.isArray(al.value) ? al.value : [];
      const part = (name, res, fn, fallback) => {
        try {
          if (res.status === "fulfilled") fn(res.value);
          else { report(name, res.reason); if (fallback) fallback(res.reason); }
        } catch (e) { report(name, e); }
      };
      // A model without a segment in this poll: the one it is counted in
      // (unless the user chose another meanwhile).
      let one;
      const asked = model;
      if (asked && sig.status === "fulfilled" && !segmentsOf(sig.value).some(s => s.model === asked)) {
        try { one = await getJSON("/admin/signals?model=" + encodeURIComponent(asked)); } catch (e) { one = e; }
      }
      part("signals", sig, v => {
        lastPoll = { sig: v || {}, alerts };
        renderSignals(v || {}, alerts, asked === model ? one : undefined);
        renderCalibration(v);
      }, e => {
        lastPoll = null;
        renderModelRows([], [], [], "");
        renderScope(null, "signals unavailable");
        signalsUnavailable(e.status === 501 ? "signal analysis is not enabled" : "signals unavailable");
        renderCalibration(null);
      });
      part("backends", be, renderBackends);
      part("alerts", al, renderAlerts);
      part("notifications", no, renderNotifications);
      // Usage is optional (501 without the analyzers or quotas).
      if (us.status === "fulfilled") part("quotas", us, renderQuotas);
      else renderQuotas(null);
      if (hi.status === "fulfilled") {
        const n = hi.value && Array.isArray(hi.value.points) ? hi.value.points.length : 0;
        $("history-note").textContent = n ? "(" + count(n) + " points, every " + durText(spacing(hi.value)) + ")" : "";
        part("history", hi, v => renderHistory(v, "no history yet"));
      } else {
        const st = hi.reason && hi.reason.status;
        const msg = st === 404 || st === 501 ? "history not available"
          : st === 401 ? "history needs the admin token" : "history unavailable (" + (hi.reason && hi.reason.message) + ")";
        $("history-note").textContent = "(" + msg + ")";
        if (st !== 404 && st !== 501) report("history", hi.reason);
        try { renderHistory(null, msg); } catch (e) { report("history", e); }
      }
      $("status").textContent = "updated " + clock(new Date());
    } finally {
      busy = false;
      showProblems();
      if (again) { again = false; setTimeout(refresh, 0); }
    }
  }

  function setRange(r) {
    range = r;
    zoom = null;
    $("unzoom").hidden = true;
    for (const b of document.querySelectorAll("#range button[data-range]")) b.setAttribute("aria-pressed", String(b.dataset.range === r));
    const p = new URLSearchParams(location.hash.slice(1));
    p.set("range", r);
    history.replaceState(null, "", "#" + p.toString());
  }

  function init() {
    for (const b of document.querySelectorAll("#range button[data-range]")) {
      b.addEventListener("click", () => { setRange(b.dataset.range); refresh(); });
    }
    $("unzoom").addEventListener("click", () => { zoom = null; applyZoom(); });
    $("model").addEventListener("change", e => setModel(e.target.value));
    $("model-rows").addEventListener("click", e => {
      const row = e.target.closest(".model-row");
      // A click that ends a text selection is not a choice.
      if (row && !String(window.getSelection())) setModel(row.dataset.model === model ? "" : row.dataset.model);
    });
    setRange(range);
    let resizeTimer = 0;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        for (const [id, u] of Object.entries(charts)) u.setSize({ width: chartWidth($(id)), height: CHART_H });
      }, 100);
    });
    document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
    refresh();
    setInterval(refresh, REFRESH_MS);
  }

  if (typeof uPlot === "undefined") {
    document.addEventListener("DOMContentLoaded", () => {
      $("err").textContent = "uPlot did not load (/dashboard/assets/vendor/uPlot.iife.min.js)";
      $("err").hidden = false;
    });
    return;
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

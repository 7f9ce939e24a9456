// minitensor's graph explorer. The data (items, backward steps, one pre-rendered SVG per module
// level) is the JSON in #mt-data, written by minitensor/viz/explore.py; this script only shows
// it: it never lays anything out, so the pictures stay Graphviz's.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("mt-data").textContent);
  const view = document.getElementById("view");
  const details = document.getElementById("details");
  const slider = document.getElementById("slider");
  const FILL = { done: "palegreen", current: "orange", partly: "#e3f7dc" };
  let level = -1, svg = null, viewBox = null, selected = null;

  // ------------------------------------------------------------------ helpers
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const shape = (s) => "(" + s.join(", ") + (s.length === 1 ? ",)" : ")");
  const num = (x) => (x === null || x === undefined ? "—" : String(x));
  function units(path) {  // 'encoder.layers.0.ffn' -> ['encoder', 'layers.0', 'ffn']
    const out = [];
    for (const part of path ? path.split(".") : []) {
      if (/^\d+$/.test(part) && out.length) out[out.length - 1] += "." + part;
      else out.push(part);
    }
    return out;
  }
  function nodeEls() { return svg ? Array.from(svg.querySelectorAll("g.node")) : []; }
  function boxOf(g) {  // Graphviz names node n<i> after the i-th box of the level
    const t = g.querySelector("title");
    return data.levels[level].boxes[Number(t.textContent.slice(1))];
  }
  function shapesOf(g) {  // the filled outline(s) of a box (inside an <a> when it has a tooltip)
    return Array.from(g.querySelectorAll("polygon, path, ellipse")).filter(
      (c) => c.getAttribute("fill") && c.getAttribute("fill") !== "none");
  }

  // ------------------------------------------------------------------ levels, zoom and pan
  function showLevel(i, focusPath) {
    if (i !== level) {
      level = i;
      view.innerHTML = data.levels[i].svg;
      svg = view.querySelector("svg");
      svg.removeAttribute("width");
      svg.removeAttribute("height");
      viewBox = svg.getAttribute("viewBox").split(/[\s,]+/).map(Number);
      svg.dataset.full = viewBox.join(" ");
      nodeEls().forEach((g) => shapesOf(g).forEach((s) => { s.dataset.fill = s.getAttribute("fill"); }));
      const d = data.levels[i].depth;
      document.getElementById("level").textContent =
        (d === null ? "every op" : "module level " + d) + " (" + (i + 1) + "/" + data.levels.length + ")";
      paintSteps();
    }
    if (focusPath) focusOn(clusterEl(focusPath) || boxEl((b) => b.path === focusPath));
  }
  function setViewBox(v) { viewBox = v; svg.setAttribute("viewBox", v.join(" ")); }
  function fit() { setViewBox(svg.dataset.full.split(" ").map(Number)); }
  function toSvg(evt, ctm) {
    const p = svg.createSVGPoint();
    p.x = evt.clientX; p.y = evt.clientY;
    return p.matrixTransform((ctm || svg.getScreenCTM()).inverse());
  }
  function zoom(factor, at) {
    const [x, y, w, h] = viewBox;
    const c = at || { x: x + w / 2, y: y + h / 2 };
    setViewBox([c.x - (c.x - x) * factor, c.y - (c.y - y) * factor, w * factor, h * factor]);
  }
  function focusOn(g) {  // centre the view on element g, zoomed to show it with its surroundings
    if (!g) return;
    const b = g.getBBox(), toView = svg.getScreenCTM().inverse().multiply(g.getScreenCTM());
    const p = svg.createSVGPoint();
    p.x = b.x; p.y = b.y;
    const a = p.matrixTransform(toView);
    p.x = b.x + b.width; p.y = b.y + b.height;
    const z = p.matrixTransform(toView);
    const w = Math.max((z.x - a.x) * 1.4, 900), h = Math.max((z.y - a.y) * 1.4, 560);  // and around it
    const cx = (a.x + z.x) / 2, cy = (a.y + z.y) / 2;
    setViewBox([cx - w / 2, cy - h / 2, w, h]);
  }
  let drag = null;
  view.addEventListener("mousedown", (e) => {
    drag = { start: toSvg(e), ctm: svg.getScreenCTM(), box: viewBox.slice(), moved: false, x: e.clientX, y: e.clientY };
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 4) drag.moved = true;
    if (!drag.moved) return;
    view.classList.add("dragging");
    const p = toSvg(e, drag.ctm);
    setViewBox([drag.box[0] - (p.x - drag.start.x), drag.box[1] - (p.y - drag.start.y), drag.box[2], drag.box[3]]);
  });
  window.addEventListener("mouseup", () => { view.classList.remove("dragging"); setTimeout(() => { drag = null; }, 0); });
  view.addEventListener("wheel", (e) => { e.preventDefault(); zoom(e.deltaY > 0 ? 1.2 : 1 / 1.2, toSvg(e)); }, { passive: false });
  document.getElementById("fit").onclick = fit;
  document.getElementById("zin").onclick = () => zoom(1 / 1.5);
  document.getElementById("zout").onclick = () => zoom(1.5);

  function clusterEl(path) {
    const names = data.levels[level].clusters;
    for (const g of svg ? svg.querySelectorAll("g.cluster") : []) {
      if (names[g.querySelector("title").textContent] === path) return g;
    }
    return null;
  }
  function boxEl(pred) { return nodeEls().find((g) => pred(boxOf(g))) || null; }

  // ------------------------------------------------------------------ clicks: open, close, details
  view.addEventListener("click", (e) => {
    if (drag && drag.moved) return;
    const node = e.target.closest("g.node"), cluster = e.target.closest("g.cluster");
    if (node) return clickBox(node);
    if (cluster) return closeModule(data.levels[level].clusters[cluster.querySelector("title").textContent]);
  });
  function clickBox(g) {
    const box = boxOf(g);
    if (box.kind === "item") return select(g, box.items[0]);
    if (box.kind === "fold" && box.kept) return showLevel(level, box.kept);  // the one in detail
    if (level + 1 < data.levels.length) return showLevel(level + 1, box.path);  // open it
    select(g, null, box);
  }
  function closeModule(path) {
    if (!path) return;
    const depth = units(path).length - 1;
    const i = data.levels.findIndex((L) => L.depth !== null && L.depth >= depth);
    showLevel(i < 0 ? 0 : i);
    const g = boxEl((b) => b.path === path) || boxEl((b) => b.kind === "fold" && path.startsWith(b.path.replace(/\.\d+$/, "")));
    if (g) { focusOn(g); select(g, null, boxOf(g)); }
  }
  function select(g, itemIndex, box) {
    if (selected) selected.classList.remove("selected");
    selected = g;
    if (g) g.classList.add("selected");
    details.innerHTML = "";
    if (itemIndex !== null && itemIndex !== undefined) showItem(itemIndex);
    else if (box) details.appendChild(el("h3", {}, box.path + " (" + box.items.length + " nodes)"));
  }
  function row(table, k, v) {
    const tr = el("tr"); tr.appendChild(el("td", {}, k));
    const td = el("td"); td.appendChild(typeof v === "string" ? document.createTextNode(v) : v);
    tr.appendChild(td); table.appendChild(tr);
  }
  function showItem(i) {
    const it = data.items[i], t = el("table");
    details.appendChild(el("h3", { id: "item-title" }, it.title));
    if (it.op) row(t, "op", it.op);
    row(t, "module", it.scope || "(top level)");
    if (it.where) { const c = el("code", {}, it.line || ""); row(t, it.where, c); }
    if (it.inputs) it.inputs.forEach((x, k) => row(t, "input " + k, x.name + " " + shape(x.shape)));
    row(t, "output", shape(it.out) + " " + it.dtype);
    const s = it.stats;
    row(t, "values", s ? (s.nonfinite && s.min === undefined ? "no finite values" :
      "min " + s.min + " max " + s.max + " mean " + s.mean + " std " + s.std + (s.nonfinite ? " (NaN/Inf too)" : ""))
      : (it.op ? "(value freed: run the forward inside mt.autograd.keep_intermediates())" : "—"));
    row(t, "gradient norm", it.grad_norm === null ? (it.requires_grad === false ? "(no grad needed)" : "none") : String(it.grad_norm));
    details.appendChild(t);
    showStepOf(it);
    if (it.heat) details.appendChild(heatmap(it.heat));
  }
  function showStepOf(it) {
    if (it.step === null || it.step === undefined || !it.op) return;
    const st = data.steps[it.step], now = Number(slider.value);
    const h = el("h3", {}, "backward step " + (it.step + 1) + "/" + data.steps.length);
    details.appendChild(h);
    if (now <= it.step) {
      details.appendChild(el("p", {}, "not reached yet: move the slider to step " + (it.step + 1)));
      return;
    }
    const t = el("table"), g = st.grad_out;
    row(t, "gradient arriving", shape(g.shape) + " ‖g‖ " + num(g.norm) + " min " + num(g.min) + " max " + num(g.max));
    st.sends.forEach((x, k) => row(t, "sends to input " + k, x.name + " " + shape(x.shape) +
      (x.norm === null ? ": no gradient needed" : " ‖g‖ " + x.norm)));
    details.appendChild(t);
  }
  function heatmap(h) {
    const cell = Math.max(3, Math.min(20, Math.floor(260 / Math.max(h.rows, h.cols))));
    const ns = "http://www.w3.org/2000/svg";
    const s = document.createElementNS(ns, "svg");
    s.setAttribute("width", h.cols * cell); s.setAttribute("height", h.rows * cell);
    s.setAttribute("class", "heatmap");
    const top = Math.max(...h.values, 1e-12);
    h.values.forEach((v, k) => {
      const r = document.createElementNS(ns, "rect"), a = Math.max(0, v) / top;
      r.setAttribute("x", (k % h.cols) * cell); r.setAttribute("y", Math.floor(k / h.cols) * cell);
      r.setAttribute("width", cell); r.setAttribute("height", cell);
      r.setAttribute("fill", "rgb(" + Math.round(255 - 222 * a) + "," + Math.round(255 - 180 * a) + "," + Math.round(255 - 75 * a) + ")");
      const title = document.createElementNS(ns, "title"); title.textContent = String(v);
      r.appendChild(title); s.appendChild(r);
    });
    const div = el("div");
    div.appendChild(el("h3", {}, "attention weights"));
    div.appendChild(s);
    div.appendChild(el("p", {}, h.caption));
    return div;
  }

  // ------------------------------------------------------------------ the backward-step slider
  function paintSteps() {
    const now = Number(slider.value);  // steps 0 … now-1 have run
    nodeEls().forEach((g) => {
      const steps = boxOf(g).items.map((i) => data.items[i].step).filter((s) => s !== null);
      let state = null;
      if (now > 0 && steps.includes(now - 1)) state = "current";
      else if (steps.length && steps.every((s) => s < now)) state = "done";
      else if (steps.some((s) => s < now)) state = "partly";
      g.dataset.state = state || "";
      shapesOf(g).forEach((s) => s.setAttribute("fill", state ? FILL[state] : s.dataset.fill));
    });
    const info = document.getElementById("stepinfo");
    if (!data.steps.length) info.textContent = data.note || "no backward steps";
    else if (now === 0) info.textContent = "0/" + data.steps.length + ": forward pass, no gradient yet";
    else {
      const it = data.items[data.steps[now - 1].item];
      info.textContent = now + "/" + data.steps.length + ": " + it.title + " in " + (it.scope || "(top level)") +
        " — orange: this node, green: gradient known";
    }
  }
  slider.max = String(data.steps.length);
  slider.disabled = !data.steps.length;
  slider.addEventListener("input", () => {
    paintSteps();
    const now = Number(slider.value);
    if (now > 0) {
      const i = data.steps[now - 1].item;
      const g = boxEl((b) => b.items.includes(i));
      select(g, i);
    }
  });

  // ------------------------------------------------------------------ search
  const search = document.getElementById("search"), matches = document.getElementById("matches");
  function targets(q) {  // [{text, level, pred, item}] for items and modules matching q
    const out = [], seen = new Set(), words = q.split(/\s+/);
    data.items.forEach((it, i) => {  // every word in the name, op or module: "layers.0 softmax"
      const hay = [it.title, it.op || "", it.scope].join(" ").toLowerCase();
      if (!words.every((w) => hay.includes(w))) return;
      let li = data.levels.findIndex((L) => L.boxes.some((b) => b.kind === "item" && b.items[0] === i));
      if (li < 0) li = data.levels.length - 1;
      out.push({ text: it.title + (it.scope ? " — " + it.scope : ""), level: li, item: i,
        pred: (b) => b.items.includes(i) });
    });
    data.levels.forEach((L, li) => L.boxes.forEach((b) => {
      if (!b.path || seen.has(b.path) || !b.path.toLowerCase().includes(q)) return;
      seen.add(b.path);
      out.unshift({ text: "module " + b.path, level: li, pred: (x) => x.path === b.path });
    }));
    return out;
  }
  function runSearch() {
    const q = search.value.trim().toLowerCase();
    matches.innerHTML = "";
    nodeEls().forEach((g) => g.classList.remove("match"));
    if (!q) return [];
    const found = targets(q);
    found.slice(0, 30).forEach((m) => {
      const d = el("div", { class: "match-entry" }, m.text);
      d.onclick = () => goTo(m);
      matches.appendChild(d);
    });
    if (!found.length) matches.appendChild(el("p", {}, "no module or op matches “" + q + "”"));
    found.forEach((m) => { if (m.level === level) { const g = boxEl(m.pred); if (g) g.classList.add("match"); } });
    return found;
  }
  function goTo(m) {
    showLevel(m.level);
    const g = boxEl(m.pred);
    focusOn(g);
    if (g) select(g, m.item, boxOf(g));
    runSearch();
  }
  search.addEventListener("input", runSearch);
  search.addEventListener("keydown", (e) => { if (e.key === "Enter") { const f = runSearch(); if (f.length) goTo(f[0]); } });

  // A view can be linked (and screenshot with `chromium --headless --screenshot`): graph.html#
  // level=2&step=40&find=softmax opens module level 2, moves the slider, goes to the first match.
  function fromHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    if (h.has("level")) showLevel(Math.max(0, Math.min(Number(h.get("level")) || 0, data.levels.length - 1)));
    if (h.has("step") && data.steps.length) {
      slider.value = h.get("step");
      slider.dispatchEvent(new Event("input"));
    }
    if (h.has("find")) {
      search.value = h.get("find");
      const found = runSearch();
      if (found.length) goTo(found[0]);
    }
  }
  showLevel(data.start);
  if (data.note) details.appendChild(el("p", { id: "note" }, data.note));
  fromHash();
  window.mtExplorer = { showLevel, levels: data.levels.length, get level() { return level; } };
})();

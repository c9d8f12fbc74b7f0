"use strict";
(function () {
  const data = JSON.parse(document.getElementById("data").textContent);
  const LABEL_W = 280, LANE_H = 40, TOP = 26, BOX_H = 26;
  const COLORS = {
    launch: "#4c78d0", memcpy: "#2f9e73", memset: "#2f9e73", record: "#8b5cc7", wait: "#8b5cc7",
    host_func: "#c07a2a", alloc: "#c9a227", free: "#c9a227", host: "#8a93a6",
  };
  const SYNC_DASH = { "legacy barrier": [5, 4] };

  // Lanes in display order (host threads first, then streams by symbol).
  const lanes = data.lanes.slice().sort((a, b) => a.sort - b.sort);
  const laneOf = new Map();
  lanes.forEach((l, i) => { l.index = i; l.lines = []; l.names = []; l.kinds = []; laneOf.set(l.tid, l); });
  let maxLine = 1, minLine = Infinity;
  for (let i = 0; i < data.ops.length; i += 4) {
    const l = laneOf.get(data.ops[i]);
    l.lines.push(data.ops[i + 1]); l.names.push(data.ops[i + 2]); l.kinds.push(data.ops[i + 3]);
    maxLine = Math.max(maxLine, data.ops[i + 1] + 1);
    minLine = Math.min(minLine, data.ops[i + 1]);
  }
  if (!isFinite(minLine)) minLine = 1;
  const flows = [];
  for (let i = 0; i < data.flows.length; i += 5) {
    const f = { a: laneOf.get(data.flows[i]).index, al: data.flows[i + 1], b: laneOf.get(data.flows[i + 2]).index, bl: data.flows[i + 3], kind: data.kinds[data.flows[i + 4]] };
    f.lo = Math.min(f.al, f.bl); f.hi = Math.max(f.al, f.bl);
    flows.push(f);
  }
  // Races with the same two ends get different bends so that each has its own link.
  const seen = new Map();
  data.races.forEach((r, i) => {
    r.index = i;
    r.cur = laneOf.get(r.current.tid); r.prev = laneOf.get(r.previous.tid);
    const key = r.current.tid + ":" + r.current.line + ":" + r.previous.tid + ":" + r.previous.line;
    r.bend = seen.get(key) || 0; seen.set(key, r.bend + 1);
  });

  const view = document.getElementById("view");
  const canvas = document.getElementById("timeline");
  const svg = document.getElementById("races-svg");
  const panel = document.getElementById("panel");
  const tip = document.getElementById("tip");
  const ctx = canvas.getContext("2d");
  const st = { x0: minLine - 1, scale: 1, y0: 0, w: 0, h: 0, selected: -1 };
  const SVGNS = "http://www.w3.org/2000/svg";

  document.getElementById("trace-name").textContent = data.title;
  document.getElementById("summary").textContent = data.summary;

  const xOf = (line) => LABEL_W + (line - st.x0) * st.scale;
  const yOf = (lane) => TOP + lane * LANE_H - st.y0 + LANE_H / 2;
  const mid = (line) => xOf(line + 0.5);

  function lowerBound(arr, v) {
    let lo = 0, hi = arr.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (arr[m] < v) lo = m + 1; else hi = m; }
    return lo;
  }

  function resize() {
    const dpr = window.devicePixelRatio || 1;
    st.w = view.clientWidth; st.h = view.clientHeight;
    canvas.width = Math.max(1, st.w * dpr); canvas.height = Math.max(1, st.h * dpr);
    canvas.style.width = st.w + "px"; canvas.style.height = st.h + "px";
    svg.setAttribute("width", st.w); svg.setAttribute("height", st.h);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  }

  function fit() {
    const span = Math.max(1, maxLine - minLine + 1);
    st.scale = Math.max(1e-4, (st.w - LABEL_W - 30) / span);
    st.x0 = minLine - 0.5;
    st.y0 = 0;
  }

  function clampY() {
    const total = TOP + lanes.length * LANE_H + 10;
    st.y0 = Math.max(0, Math.min(st.y0, Math.max(0, total - st.h)));
  }

  function arrow(x1, y1, x2, y2) {
    ctx.beginPath(); ctx.moveTo(x1, y1); ctx.lineTo(x2, y2); ctx.stroke();
    const a = Math.atan2(y2 - y1, x2 - x1), s = 6;
    ctx.beginPath(); ctx.moveTo(x2, y2);
    ctx.lineTo(x2 - s * Math.cos(a - 0.45), y2 - s * Math.sin(a - 0.45));
    ctx.lineTo(x2 - s * Math.cos(a + 0.45), y2 - s * Math.sin(a + 0.45));
    ctx.closePath(); ctx.fill();
  }

  function draw() {
    clampY();
    const lo = st.x0 - 1, hi = st.x0 + (st.w - LABEL_W) / st.scale + 1;
    ctx.clearRect(0, 0, st.w, st.h);
    // Lane backgrounds.
    lanes.forEach((l, i) => {
      const y = TOP + i * LANE_H - st.y0;
      if (y + LANE_H < 0 || y > st.h) return;
      ctx.fillStyle = i % 2 ? "#f7f8fb" : "#ffffff";
      ctx.fillRect(0, y, st.w, LANE_H);
    });
    // Ruler: trace lines.
    ctx.fillStyle = "#eef0f5"; ctx.fillRect(LABEL_W, 0, st.w, TOP - 4);
    ctx.fillStyle = "#5b6478"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
    const step = niceStep(80 / st.scale);
    for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) {
      const x = xOf(t);
      if (x < LABEL_W) continue;
      ctx.fillRect(x, TOP - 10, 1, 6);
      ctx.fillText("line " + t, x + 3, (TOP - 4) / 2);
    }
    // Operations.
    ctx.save();
    ctx.beginPath(); ctx.rect(LABEL_W, TOP - 4, st.w - LABEL_W, st.h); ctx.clip();
    let drawnOps = 0;
    lanes.forEach((l, i) => {
      const yc = yOf(i);
      if (yc + LANE_H < 0 || yc - LANE_H > st.h) return;
      const w = Math.max(1, st.scale * 0.86);
      let lastPx = -1e9;
      for (let k = lowerBound(l.lines, lo); k < l.lines.length && l.lines[k] <= hi; k++) {
        const x = xOf(l.lines[k]);
        if (w < 3 && x - lastPx < 1) continue;
        lastPx = x;
        const kind = data.kinds[l.kinds[k]];
        ctx.fillStyle = COLORS[kind] || (l.name.startsWith("host") ? COLORS.host : "#6b7a99");
        ctx.fillRect(x, yc - BOX_H / 2, w, BOX_H);
        drawnOps++;
        if (w > 20) {
          ctx.fillStyle = "#fff"; ctx.font = "10px system-ui, sans-serif";
          const label = fitText(data.names[l.names[k]], w - 6);
          if (label) ctx.fillText(label, x + 3, yc);
        }
      }
    });
    // Synchronization edges.
    ctx.strokeStyle = "rgba(45,52,70,.75)"; ctx.fillStyle = "rgba(45,52,70,.85)"; ctx.lineWidth = 1.2;
    let drawnFlows = 0;
    for (const f of flows) {
      if (f.hi < lo || f.lo > hi) continue;
      ctx.setLineDash(SYNC_DASH[f.kind] || []);
      const ya = yOf(f.a), yb = yOf(f.b);
      arrow(mid(f.al), ya + (yb > ya ? BOX_H / 2 : yb < ya ? -BOX_H / 2 : 0), mid(f.bl), yb + (yb > ya ? -BOX_H / 2 : yb < ya ? BOX_H / 2 : 0));
      drawnFlows++;
    }
    ctx.setLineDash([]);
    ctx.restore();
    // Lane labels.
    ctx.fillStyle = "#eef0f5"; ctx.fillRect(0, 0, LABEL_W, st.h);
    ctx.fillStyle = "#d4d8e2"; ctx.fillRect(LABEL_W - 1, 0, 1, st.h);
    ctx.font = "11.5px ui-monospace, Menlo, Consolas, monospace";
    lanes.forEach((l, i) => {
      const yc = yOf(i);
      if (yc < 0 || yc > st.h) return;
      ctx.fillStyle = l.name.startsWith("host") ? "#5b6478" : "#1d2330";
      ctx.fillText(fitText(l.name, LABEL_W - 16), 8, yc);
    });
    drawRaces(lo, hi);
    window.streamsanDrawn.ops = drawnOps;
    window.streamsanDrawn.flows = drawnFlows;
  }

  function niceStep(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  const textCache = new Map();
  function fitText(s, w) {
    const key = ctx.font + "|" + w + "|" + s;
    if (textCache.has(key)) return textCache.get(key);
    let out = s;
    if (ctx.measureText(s).width > w) {
      let n = s.length;
      while (n > 0 && ctx.measureText(s.slice(0, n) + "\u2026").width > w) n--;
      out = n > 0 ? s.slice(0, n) + "\u2026" : "";
    }
    if (textCache.size > 5000) textCache.clear();
    textCache.set(key, out);
    return out;
  }

  // Race links: SVG elements, only for the races in view (and the selected one).
  function drawRaces(lo, hi) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const drawn = [];
    for (const r of data.races) {
      const a = Math.min(r.previous.line, r.current.line), b = Math.max(r.previous.line, r.current.line);
      if ((b < lo || a > hi) && r.index !== st.selected) continue;
      const x1 = mid(r.previous.line), y1 = yOf(r.prev.index);
      const x2 = mid(r.current.line), y2 = yOf(r.cur.index);
      const bend = 26 + 12 * r.bend;
      const cx = (x1 + x2) / 2, cy = Math.min(y1, y2) - bend;
      const attrs = {
        "data-race": r.index,
        "data-current-line": r.current.line, "data-previous-line": r.previous.line,
        "data-current-lane": r.cur.name, "data-previous-lane": r.prev.name,
      };
      const path = document.createElementNS(SVGNS, "path");
      path.setAttribute("d", `M${x1},${y1} Q${cx},${cy} ${x2},${y2}`);
      path.setAttribute("class", "race-link" + (r.index === st.selected ? " selected" : ""));
      for (const k in attrs) path.setAttribute(k, attrs[k]);
      const title = document.createElementNS(SVGNS, "title");
      title.textContent = r.headline;
      path.appendChild(title);
      const dot = document.createElementNS(SVGNS, "circle");
      dot.setAttribute("cx", x2); dot.setAttribute("cy", y2); dot.setAttribute("r", 6);
      dot.setAttribute("class", "race-marker" + (r.index === st.selected ? " selected" : ""));
      for (const k in attrs) dot.setAttribute(k, attrs[k]);
      svg.appendChild(path); svg.appendChild(dot);
      drawn.push({ index: r.index, current_line: r.current.line, previous_line: r.previous.line, current_lane: r.cur.name, previous_lane: r.prev.name });
    }
    window.streamsanDrawn.races = drawn;
  }

  svg.addEventListener("click", (e) => {
    const t = e.target.closest ? e.target.closest("[data-race]") : null;
    if (t) { select(+t.getAttribute("data-race")); e.stopPropagation(); }
  });

  // The race list and the panel.
  const list = document.getElementById("race-list");
  document.getElementById("race-count").textContent = data.races.length === 1 ? "1 race" : data.races.length + " races";
  data.races.forEach((r) => {
    const li = document.createElement("li");
    li.setAttribute("data-race", r.index);
    li.textContent = (r.index + 1) + ". " + r.headline.replace(/^RACE /, "") + "  (lines " + r.previous.line + " \u2192 " + r.current.line + ")";
    li.title = "Show this race";
    li.addEventListener("click", () => { jump(r.index); select(r.index); });
    list.appendChild(li);
  });
  if (data.warnings.length) {
    document.getElementById("warnings-section").hidden = false;
    const ul = document.getElementById("warning-list");
    for (const w of data.warnings) {
      const li = document.createElement("li");
      li.textContent = `line ${w.line} [${w.kind}]: ${w.message}`;
      ul.appendChild(li);
    }
  }

  function select(i) {
    st.selected = i;
    const r = data.races[i];
    panel.textContent = r.text;
    for (const li of list.children) li.classList.toggle("selected", +li.getAttribute("data-race") === i);
    const li = list.children[i];
    if (li && li.scrollIntoView) li.scrollIntoView({ block: "nearest" });
    draw();
  }

  // Shows race i: both ends in view, with room around them.
  function jump(i) {
    const r = data.races[i];
    const a = Math.min(r.previous.line, r.current.line), b = Math.max(r.previous.line, r.current.line) + 1;
    const avail = st.w - LABEL_W;
    const span = Math.max(b - a, 12);
    st.scale = Math.min(Math.max(st.scale, avail / (span * 1.6)), avail / (span * 1.3));
    st.scale = Math.max(st.scale, 1e-4);
    st.x0 = (a + b) / 2 - avail / st.scale / 2;
    const la = Math.min(r.cur.index, r.prev.index), lb = Math.max(r.cur.index, r.prev.index);
    const top = TOP + la * LANE_H - 40, bottom = TOP + (lb + 1) * LANE_H;
    if (top < st.y0 || bottom > st.y0 + st.h) st.y0 = Math.max(0, top - 20);
    draw();
  }

  // Pan and zoom.
  function zoomAt(px, factor) {
    const line = st.x0 + (px - LABEL_W) / st.scale;
    st.scale = Math.min(400, Math.max(1e-4, st.scale * factor));
    st.x0 = line - (px - LABEL_W) / st.scale;
    draw();
  }
  document.getElementById("zoom-in").addEventListener("click", () => zoomAt(LABEL_W + (st.w - LABEL_W) / 2, 1.6));
  document.getElementById("zoom-out").addEventListener("click", () => zoomAt(LABEL_W + (st.w - LABEL_W) / 2, 1 / 1.6));
  document.getElementById("zoom-fit").addEventListener("click", () => { fit(); draw(); });
  view.addEventListener("wheel", (e) => {
    e.preventDefault();
    if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      st.x0 += (e.deltaX || e.deltaY) / st.scale; draw();
    } else if (e.altKey) {
      st.y0 += e.deltaY; draw();
    } else {
      const r = view.getBoundingClientRect();
      zoomAt(Math.max(LABEL_W, e.clientX - r.left), Math.exp(-e.deltaY * 0.002));
    }
  }, { passive: false });
  let drag = null;
  view.addEventListener("mousedown", (e) => {
    if (e.target.closest && e.target.closest("[data-race]")) return;
    drag = { x: e.clientX, y: e.clientY, x0: st.x0, y0: st.y0 };
    view.classList.add("dragging");
  });
  window.addEventListener("mouseup", () => { drag = null; view.classList.remove("dragging"); });
  window.addEventListener("mousemove", (e) => {
    if (drag) {
      st.x0 = drag.x0 - (e.clientX - drag.x) / st.scale;
      st.y0 = drag.y0 - (e.clientY - drag.y);
      draw();
      return;
    }
    const r = view.getBoundingClientRect();
    const px = e.clientX - r.left, py = e.clientY - r.top;
    const laneIdx = Math.floor((py + st.y0 - TOP) / LANE_H);
    const l = lanes[laneIdx];
    if (px < LABEL_W || px > st.w || py < 0 || py > st.h || !l) { tip.hidden = true; return; }
    const line = st.x0 + (px - LABEL_W) / st.scale;
    let k = lowerBound(l.lines, Math.floor(line));
    if (k < l.lines.length && l.lines[k] === Math.floor(line) || (st.scale < 3 && k < l.lines.length && (l.lines[k] - line) * st.scale < 3)) {
      tip.textContent = `line ${l.lines[k]}: ${data.names[l.names[k]]} (${data.kinds[l.kinds[k]]})\n${l.name}`;
      tip.style.left = Math.min(px + 12, st.w - 260) + "px"; tip.style.top = (py + 14) + "px";
      tip.hidden = false;
    } else {
      tip.hidden = true;
    }
  });
  window.addEventListener("resize", () => { resize(); draw(); });

  // First render: the whole trace, the first race open.
  window.streamsanDrawn = { races: [], ops: 0, flows: 0 };
  resize();
  fit();
  if (data.races.length) {
    st.selected = 0;
    panel.textContent = data.races[0].text;
    if (list.children[0]) list.children[0].classList.add("selected");
  }
  draw();
  const renderMs = performance.now();
  window.streamsanRenderMs = renderMs;

  if (location.hash === "#selftest") selftest(renderMs);

  // Clicks every race link in turn (real click events) and records what the panel showed.
  function selftest(renderMs) {
    const t0 = performance.now();
    const out = {
      render_ms: Math.round(renderMs),
      ops: data.ops.length / 4, flows: flows.length, lanes: lanes.map((l) => l.name),
      races: data.races.length,
      default_open: data.races.length ? panel.textContent : null,
      default_open_index: st.selected,
      drawn_at_start: window.streamsanDrawn.races.length,
      clicks: [],
    };
    for (const r of data.races) {
      jump(r.index);
      const link = svg.querySelector(`path.race-link[data-race="${r.index}"]`);
      const entry = { index: r.index, found: !!link };
      if (link) {
        panel.textContent = "";
        link.dispatchEvent(new MouseEvent("click", { bubbles: true, cancelable: true, view: window }));
        entry.current_line = +link.getAttribute("data-current-line");
        entry.previous_line = +link.getAttribute("data-previous-line");
        entry.current_lane = link.getAttribute("data-current-lane");
        entry.previous_lane = link.getAttribute("data-previous-lane");
        entry.listed = window.streamsanDrawn.races.some((d) => d.index === r.index);
        entry.selected = st.selected;
        entry.panel = panel.textContent;
      }
      out.clicks.push(entry);
    }
    if (data.races.length) {
      // The marker and the list entry open the race too.
      const last = data.races.length - 1;
      jump(last);
      svg.querySelector(`circle.race-marker[data-race="${last}"]`).dispatchEvent(new MouseEvent("click", { bubbles: true, cancelable: true, view: window }));
      out.marker_opens = panel.textContent === data.races[last].text;
      list.children[0].dispatchEvent(new MouseEvent("click", { bubbles: true, cancelable: true, view: window }));
      out.list_opens = panel.textContent === data.races[0].text;
    }
    out.selftest_ms = Math.round(performance.now() - t0);
    const pre = document.getElementById("selftest");
    pre.textContent = JSON.stringify(out);
    pre.hidden = false;
  }
})();

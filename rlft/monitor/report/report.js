// rlft report: completions browser, top/bottom completions and reward logs. Runs offline from the
// data embedded in this page; builds every element with textContent (completions are untrusted text).
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("rlft-data").textContent);
  var PAGE = 100;

  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      for (var k in attrs) {
        if (!Object.prototype.hasOwnProperty.call(attrs, k)) continue;
        var v = attrs[k];
        if (k === "text") node.textContent = v;
        else if (k === "cls") node.className = v;
        else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), v);
        else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v);
      }
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }
  function fmt(x) {
    if (x === null || x === undefined) return "–";
    if (typeof x !== "number") return String(x);
    if (Number.isInteger(x)) return String(x);
    var a = Math.abs(x);
    return a !== 0 && (a < 1e-3 || a >= 1e5) ? x.toExponential(2) : x.toFixed(4).replace(/0+$/, "").replace(/\.$/, "");
  }
  function short(s, n) { return s.length > n ? s.slice(0, n) + "…" : s; }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  function byId(id) { return document.getElementById(id); }

  // ---- tabs ---------------------------------------------------------------------------------
  var tabs = Array.prototype.slice.call(document.querySelectorAll("nav button"));
  function showTab(name) {
    tabs.forEach(function (b) { b.classList.toggle("active", b.getAttribute("data-tab") === name); });
    Array.prototype.forEach.call(document.querySelectorAll("section.tab"), function (s) {
      s.classList.toggle("active", s.id === "tab-" + name);
    });
  }
  tabs.forEach(function (b) {
    b.addEventListener("click", function () { showTab(b.getAttribute("data-tab")); history.replaceState(null, "", "#" + b.getAttribute("data-tab")); });
  });
  var initial = (location.hash || "").replace("#", "");
  showTab(tabs.some(function (b) { return b.getAttribute("data-tab") === initial; }) ? initial : "graphs");

  // ---- per-run indexes ------------------------------------------------------------------------
  function index(run) {
    if (run._ix) return run._ix;
    var c = run.completions, byPrompt = [], i;
    for (i = 0; i < c.prompts.length; i++) byPrompt.push([]);
    for (i = 0; i < c.s.length; i++) byPrompt[c.p[i]].push(i);
    byPrompt.forEach(function (list) { list.sort(function (a, b) { return c.s[a] - c.s[b] || a - b; }); });
    run._ix = { byPrompt: byPrompt };
    return run._ix;
  }
  function stepsOf(run, p) {
    var c = run.completions, out = [], seen = {};
    index(run).byPrompt[p].forEach(function (i) { if (!seen[c.s[i]]) { seen[c.s[i]] = 1; out.push(c.s[i]); } });
    return out;
  }
  function atStep(run, p, step) {
    var c = run.completions;
    return index(run).byPrompt[p].filter(function (i) { return c.s[i] === step; });
  }
  function totalKey(run, i) { var t = run.completions.tot[i]; return t === null ? -Infinity : t; }
  function bestOf(run, list) {
    var best = list[0];
    list.forEach(function (i) { if (totalKey(run, i) > totalKey(run, best)) best = i; });
    return best;
  }
  function selectRunOptions(select, filter) {
    DATA.runs.forEach(function (r, i) { if (filter(r)) select.appendChild(el("option", { value: String(i), text: r.name + " (" + r.stage + ")" })); });
  }

  // ---- completions tab ------------------------------------------------------------------------
  var cmpRuns = DATA.runs.filter(function (r) { return r.completions; });
  var S = { run: null, prompt: 0, sides: { left: null, right: null }, page: 0, filter: "", stepFilter: "" };

  function setupCompletions() {
    var root = byId("completions-root");
    if (!root) return;
    var missing = DATA.runs.filter(function (r) { return !r.completions; });
    var notes = byId("completions-notes");
    missing.forEach(function (r) { notes.appendChild(el("p", { cls: "note", text: r.name + ": " + r.noCompletions })); });
    if (!cmpRuns.length) { root.style.display = "none"; return; }
    var runSel = byId("cmp-run");
    selectRunOptions(runSel, function (r) { return !!r.completions; });
    runSel.addEventListener("change", function () { openRun(DATA.runs[+runSel.value]); });
    if (cmpRuns.length < 2) byId("cmp-run-wrap").style.display = "none";
    byId("prompt-filter").addEventListener("input", function (e) { S.filter = e.target.value.toLowerCase(); renderPromptTable(); });
    byId("all-step").addEventListener("input", function (e) { S.stepFilter = e.target.value; S.page = 0; renderAll(); });
    openRun(cmpRuns[0]);
  }

  function openRun(run) {
    S.run = run;
    byId("cmp-run").value = String(DATA.runs.indexOf(run));
    var c = run.completions;
    byId("cmp-meta").textContent = c.s.length + " completions of " + c.prompts.length + " prompts; lengths in " + c.lengthUnit +
      (c.truncated ? "; " + c.truncated + " long completions shortened here (full text in completions.jsonl)" : "") +
      (run.samplesOnly ? " (from samples.jsonl)" : "");
    selectPrompt(0);
  }

  function renderPromptTable() {
    var run = S.run, c = run.completions, head = byId("prompt-head"), body = clear(byId("prompt-body"));
    clear(head).appendChild(el("tr", null, el("th", { cls: "num", text: "#" }), el("th", { text: "prompt" }),
      el("th", { cls: "num", text: c.lengthUnit.split(" ")[0] }),
      c.extraCols.length ? c.extraCols.map(function (k) { return el("th", { text: k }); }).reduce(function (f, n) { f.appendChild(n); return f; }, document.createDocumentFragment()) : null,
      el("th", { text: "steps used" }), el("th", { cls: "num", text: "completions" })));
    var shown = 0, matched = 0;
    c.prompts.forEach(function (p, i) {
      if (S.filter && p.text.toLowerCase().indexOf(S.filter) < 0) return;
      matched++;
      if (shown >= 200 && i !== S.prompt) return;
      shown++;
      var tr = el("tr", { cls: "click" + (i === S.prompt ? " sel" : ""), "data-prompt": String(i), onclick: function () { selectPrompt(i); } },
        el("td", { cls: "num", text: String(p.id) }), el("td", null, el("pre", { cls: "text", text: short(p.text, 400) })),
        el("td", { cls: "num", text: fmt(p.len) }));
      c.extraCols.forEach(function (k) { tr.appendChild(el("td", { text: short(fmt(p.extra[k]), 200) })); });
      tr.appendChild(el("td", { text: p.steps }));
      tr.appendChild(el("td", { cls: "num", text: String(p.n) }));
      body.appendChild(tr);
    });
    byId("prompt-count").textContent = matched > shown ? "showing " + shown + " of " + matched + " prompts (filter to narrow)" : matched + " prompts";
  }

  function selectPrompt(p) {
    var run = S.run;
    S.prompt = p;
    S.page = 0;
    var steps = stepsOf(run, p);
    var last = steps[steps.length - 1];
    var best = bestOf(run, atStep(run, p, last));
    var firstList = atStep(run, p, steps[0]);
    var left = firstList[0] === best && firstList.length > 1 ? firstList[1] : firstList[0];
    if (left === best && steps.length > 1) left = atStep(run, p, steps[steps.length - 2])[0];
    S.sides.left = left;
    S.sides.right = best;
    renderPromptTable();
    byId("cmp-prompt").textContent = run.completions.prompts[p].text;
    renderSide("left");
    renderSide("right");
    renderAll();
  }

  function scoreTable(run, i) {
    var c = run.completions, t = el("table");
    var body = el("tbody");
    c.rewardNames.forEach(function (name, j) { body.appendChild(el("tr", null, el("td", { text: name }), el("td", { cls: "num", text: fmt(c.r[j][i]) }))); });
    body.appendChild(el("tr", null, el("td", null, el("b", { text: "total" })), el("td", { cls: "num" }, el("b", { text: fmt(c.tot[i]) }))));
    body.appendChild(el("tr", null, el("td", { text: "length (" + c.lengthUnit.split(" ")[0] + ")" }), el("td", { cls: "num", text: fmt(c.len[i]) })));
    Object.keys(c.pc).forEach(function (k) { body.appendChild(el("tr", null, el("td", { text: k }), el("td", { cls: "num", text: fmt(c.pc[k][i]) }))); });
    t.appendChild(body);
    return t;
  }

  function renderSide(which) {
    var run = S.run, c = run.completions, i = S.sides[which], p = S.prompt;
    var box = clear(byId("cmp-" + which));
    var steps = stepsOf(run, p), step = c.s[i], list = atStep(run, p, step), k = list.indexOf(i);
    var si = steps.indexOf(step);
    var slider = el("input", { type: "range", min: "0", max: String(steps.length - 1), value: String(si), "aria-label": which + " step" });
    slider.addEventListener("input", function () { var l = atStep(run, p, steps[+slider.value]); S.sides[which] = which === "right" ? bestOf(run, l) : l[0]; renderSide(which); });
    var prev = el("button", { cls: "small", text: "◀", title: "previous completion at this step", onclick: function () { S.sides[which] = list[k - 1]; renderSide(which); } });
    var next = el("button", { cls: "small", text: "▶", title: "next completion at this step", onclick: function () { S.sides[which] = list[k + 1]; renderSide(which); } });
    prev.disabled = k <= 0; next.disabled = k >= list.length - 1;
    var isBest = i === bestOf(run, atStep(run, p, steps[steps.length - 1]));
    box.setAttribute("data-index", String(i));
    box.appendChild(el("div", { cls: "head" },
      el("span", { cls: "title", text: (which === "left" ? "Left" : "Right") + ": step " + step + (isBest ? " (best at the latest step)" : "") }),
      el("span", { cls: "muted", text: "completion " + (k + 1) + " of " + list.length + " at this step" }), prev, next,
      el("button", { cls: "small", text: "best at step", onclick: function () { S.sides[which] = bestOf(run, list); renderSide(which); } })));
    box.appendChild(el("div", { cls: "head" }, el("span", { cls: "muted", text: "step " + steps[0] }), slider, el("span", { cls: "muted", text: "step " + steps[steps.length - 1] })));
    box.appendChild(el("pre", { cls: "text completion-text", text: c.t[i] }));
    box.appendChild(scoreTable(run, i));
  }

  function renderAll() {
    var run = S.run, c = run.completions, list = index(run).byPrompt[S.prompt];
    if (S.stepFilter !== "") list = list.filter(function (i) { return String(c.s[i]) === S.stepFilter.trim(); });
    var head = clear(byId("all-head")), body = clear(byId("all-body"));
    var hr = el("tr", null, el("th", { cls: "num", text: "step" }), el("th", { text: "completion" }));
    c.rewardNames.forEach(function (n) { hr.appendChild(el("th", { cls: "num", text: n })); });
    hr.appendChild(el("th", { cls: "num", text: "total" }));
    hr.appendChild(el("th", { cls: "num", text: "length" }));
    Object.keys(c.pc).forEach(function (k) { hr.appendChild(el("th", { cls: "num", text: k })); });
    hr.appendChild(el("th", { text: "view" }));
    head.appendChild(hr);
    var pages = Math.max(1, Math.ceil(list.length / PAGE));
    S.page = Math.min(S.page, pages - 1);
    list.slice(S.page * PAGE, (S.page + 1) * PAGE).forEach(function (i) {
      var tr = el("tr", null, el("td", { cls: "num", text: String(c.s[i]) }), el("td", null, el("pre", { cls: "text", text: c.t[i] })));
      c.rewardNames.forEach(function (n, j) { tr.appendChild(el("td", { cls: "num", text: fmt(c.r[j][i]) })); });
      tr.appendChild(el("td", { cls: "num", text: fmt(c.tot[i]) }));
      tr.appendChild(el("td", { cls: "num", text: fmt(c.len[i]) }));
      Object.keys(c.pc).forEach(function (k) { tr.appendChild(el("td", { cls: "num", text: fmt(c.pc[k][i]) })); });
      tr.appendChild(el("td", null,
        el("button", { cls: "small", text: "◀ left", onclick: function () { S.sides.left = i; renderSide("left"); byId("cmp-left").scrollIntoView({ block: "nearest" }); } }), " ",
        el("button", { cls: "small", text: "right ▶", onclick: function () { S.sides.right = i; renderSide("right"); byId("cmp-right").scrollIntoView({ block: "nearest" }); } })));
      body.appendChild(tr);
    });
    var pager = clear(byId("all-pager"));
    pager.appendChild(el("span", { cls: "muted", text: list.length + " completions; page " + (S.page + 1) + " of " + pages + " " }));
    var pp = el("button", { cls: "small", text: "◀", onclick: function () { S.page--; renderAll(); } });
    var np = el("button", { cls: "small", text: "▶", onclick: function () { S.page++; renderAll(); } });
    pp.disabled = S.page <= 0; np.disabled = S.page >= pages - 1;
    pager.appendChild(pp); pager.appendChild(np);
  }

  // ---- top / bottom ---------------------------------------------------------------------------
  function setupTop() {
    var root = byId("top-root");
    if (!root) return;
    if (!cmpRuns.length) { root.style.display = "none"; byId("top-notes").appendChild(el("p", { cls: "note", text: "No completions in these runs: nothing to rank." })); return; }
    var runSel = byId("top-run"), keySel = byId("top-key"), nSel = byId("top-n");
    selectRunOptions(runSel, function (r) { return !!r.completions; });
    if (cmpRuns.length < 2) byId("top-run-wrap").style.display = "none";
    function fillKeys() {
      var run = DATA.runs[+runSel.value];
      clear(keySel).appendChild(el("option", { value: "-1", text: "total" }));
      run.completions.rewardNames.forEach(function (n, j) { keySel.appendChild(el("option", { value: String(j), text: n })); });
    }
    runSel.addEventListener("change", function () { fillKeys(); renderTop(); });
    keySel.addEventListener("change", renderTop);
    nSel.addEventListener("change", renderTop);
    fillKeys();
    renderTop();
  }
  function renderTop() {
    var run = DATA.runs[+byId("top-run").value], c = run.completions, key = +byId("top-key").value, n = +byId("top-n").value;
    var vals = key < 0 ? c.tot : c.r[key];
    var idx = [];
    for (var i = 0; i < vals.length; i++) if (vals[i] !== null) idx.push(i);
    idx.sort(function (a, b) { return vals[b] - vals[a] || a - b; });
    fillTop("top-high", run, idx.slice(0, n));
    fillTop("top-low", run, idx.slice(Math.max(0, idx.length - n)).reverse());
  }
  function fillTop(id, run, list) {
    var c = run.completions, table = clear(byId(id));
    var hr = el("tr", null, el("th", { cls: "num", text: "step" }), el("th", { text: "prompt" }), el("th", { text: "completion" }));
    c.rewardNames.forEach(function (n) { hr.appendChild(el("th", { cls: "num", text: n })); });
    hr.appendChild(el("th", { cls: "num", text: "total" }));
    hr.appendChild(el("th", { cls: "num", text: "length" }));
    hr.appendChild(el("th", { text: "" }));
    table.appendChild(el("thead", null, hr));
    var body = el("tbody");
    list.forEach(function (i) {
      var tr = el("tr", null, el("td", { cls: "num", text: String(c.s[i]) }), el("td", null, el("pre", { cls: "text", text: short(c.prompts[c.p[i]].text, 200) })),
        el("td", null, el("pre", { cls: "text", text: c.t[i] })));
      c.rewardNames.forEach(function (n, j) { tr.appendChild(el("td", { cls: "num", text: fmt(c.r[j][i]) })); });
      tr.appendChild(el("td", { cls: "num", text: fmt(c.tot[i]) }));
      tr.appendChild(el("td", { cls: "num", text: fmt(c.len[i]) }));
      tr.appendChild(el("td", null, el("button", { cls: "small", text: "compare", onclick: function () {
        openRun(run); selectPrompt(c.p[i]); S.sides.left = i; renderSide("left"); showTab("completions");
      } })));
      body.appendChild(tr);
    });
    table.appendChild(body);
  }

  // ---- reward logs ----------------------------------------------------------------------------
  var L = { page: 0 };
  function setupLogs() {
    var root = byId("logs-root");
    if (!root) return;
    var withLogs = DATA.runs.filter(function (r) { return r.rewardLogs && r.rewardLogs.length; });
    if (!withLogs.length) { root.style.display = "none"; return; }
    var runSel = byId("logs-run");
    selectRunOptions(runSel, function (r) { return r.rewardLogs && r.rewardLogs.length; });
    if (withLogs.length < 2) byId("logs-run-wrap").style.display = "none";
    function fillFns() {
      var run = DATA.runs[+runSel.value], names = {}, sel = clear(byId("logs-fn"));
      sel.appendChild(el("option", { value: "", text: "all functions" }));
      run.rewardLogs.forEach(function (r) { names[r.reward] = 1; });
      Object.keys(names).sort().forEach(function (n) { sel.appendChild(el("option", { value: n, text: n })); });
    }
    runSel.addEventListener("change", function () { fillFns(); L.page = 0; renderLogs(); });
    ["logs-fn", "logs-from", "logs-to", "logs-text", "logs-errors"].forEach(function (id) {
      byId(id).addEventListener("input", function () { L.page = 0; renderLogs(); });
    });
    fillFns();
    renderLogs();
  }
  function renderLogs() {
    var run = DATA.runs[+byId("logs-run").value];
    var fn = byId("logs-fn").value, from = byId("logs-from").value, to = byId("logs-to").value;
    var text = byId("logs-text").value.toLowerCase(), errorsOnly = byId("logs-errors").checked;
    var rows = run.rewardLogs.filter(function (r) {
      return (!fn || r.reward === fn) && (from === "" || r.step >= +from) && (to === "" || r.step <= +to) &&
        (!errorsOnly || r.errors > 0) && (!text || ((r.output || "") + (r.error || "")).toLowerCase().indexOf(text) >= 0);
    });
    var body = clear(byId("logs-body"));
    var pages = Math.max(1, Math.ceil(rows.length / PAGE));
    L.page = Math.min(L.page, pages - 1);
    rows.slice(L.page * PAGE, (L.page + 1) * PAGE).forEach(function (r) {
      var out = el("td", null, r.output ? el("pre", { cls: "text", text: r.output }) : el("span", { cls: "muted", text: "(no output)" }));
      if (r.error) out.appendChild(el("details", null, el("summary", { cls: "bad", text: "error" }), el("pre", { cls: "text", text: r.error })));
      body.appendChild(el("tr", null, el("td", { cls: "num", text: String(r.step) }), el("td", { text: r.reward }),
        el("td", { cls: "num", text: fmt(r.calls) }), el("td", { cls: "num", text: fmt(r.ms) }),
        el("td", { cls: "num" + (r.errors ? " bad" : ""), text: fmt(r.errors) }), out));
    });
    var pager = clear(byId("logs-pager"));
    pager.appendChild(el("span", { cls: "muted", text: rows.length + " rows; page " + (L.page + 1) + " of " + pages + " " }));
    var pp = el("button", { cls: "small", text: "◀", onclick: function () { L.page--; renderLogs(); } });
    var np = el("button", { cls: "small", text: "▶", onclick: function () { L.page++; renderLogs(); } });
    pp.disabled = L.page <= 0; np.disabled = L.page >= pages - 1;
    pager.appendChild(pp); pager.appendChild(np);
  }

  setupCompletions();
  setupTop();
  setupLogs();
  document.body.setAttribute("data-ready", "1");
})();

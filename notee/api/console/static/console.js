// Notee console: live job progress without reloading. An element with data-poll="<url>" is refreshed
// from that JSON endpoint every second: the jobs table (data-kind="jobs") or one job (data-kind="job").
// Text goes in with textContent only (never as HTML). Polling stops once a job is finished.
// A job's page also draws the pushes sent per minute it has seen (an SVG made of DOM nodes: no
// inline style or script, so the CSP holds) and counts down to a scheduled job's send_at.
(function () {
  "use strict";
  var FINISHED = ["done", "failed", "expired", "cancelled"];
  var SVG = "http://www.w3.org/2000/svg";
  var countdown = document.getElementById("countdown");
  if (countdown) { tickCountdown(); }
  var box = document.querySelector("[data-poll]");
  if (!box) { return; }
  var url = box.getAttribute("data-poll");
  var kind = box.getAttribute("data-kind");
  var status = document.getElementById("poll-status");
  var samples = [];  // [time ms, sent] of a job, one per poll

  function tickCountdown() {
    var left = Number(countdown.getAttribute("data-until")) - Date.now() / 1000;
    if (left <= 0) { countdown.textContent = "due now"; return; }
    var d = Math.floor(left / 86400), h = Math.floor(left % 86400 / 3600);
    var m = Math.floor(left % 3600 / 60), s = Math.floor(left % 60);
    var text = d ? d + " d " + h + " h " : h ? h + " h " : "";
    countdown.textContent = "in " + text + m + " min " + s + " s";  // seconds too: it visibly counts
    window.setTimeout(tickCountdown, 1000);
  }

  function stateBadge(cell, state) {
    var span = document.createElement("span");
    span.className = "state state-" + state;
    span.textContent = state;
    cell.replaceChildren(span);
  }

  function setFields(root, data) {
    root.querySelectorAll("[data-field]").forEach(function (cell) {
      var name = cell.getAttribute("data-field");
      var value = data[name];
      if (name === "state") { stateBadge(cell, value); return; }
      cell.textContent = value === null || value === undefined ? "" : String(value);
    });
  }

  function cell(text, className, field) {
    var td = document.createElement("td");
    if (className) { td.className = className; }
    if (field) { td.setAttribute("data-field", field); }
    td.textContent = text;
    return td;
  }

  function jobRow(job) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-job", job.job_id);
    var link = document.createElement("a");
    link.href = box.getAttribute("data-base") + "/jobs/" + job.job_id;
    var code = document.createElement("code");
    code.textContent = job.job_id.slice(0, 8);
    link.appendChild(code);
    var first = document.createElement("td");
    first.appendChild(link);
    tr.appendChild(first);
    tr.appendChild(cell("", "", "state"));
    tr.appendChild(cell("", "wrap", "target_text"));
    tr.appendChild(cell("", "wrap", "progress_text"));
    tr.appendChild(cell("", "wrap", "time_text"));
    tr.appendChild(cell(job.notification_type, "more"));
    tr.appendChild(cell("", "num more", "failed"));
    tr.appendChild(cell("", "num more", "pruned"));
    return tr;
  }

  function updateJobs(data) {
    var body = box.querySelector("tbody");
    var rows = data.items.map(function (job) {
      var row = body.querySelector('tr[data-job="' + job.job_id + '"]') || jobRow(job);
      setFields(row, job);
      return row;
    });
    if (!rows.length) {  // nothing (left) matches the filter
      var empty = document.createElement("tr");
      empty.className = "empty";
      var td = cell("No jobs.", "muted");
      td.colSpan = 8;
      empty.appendChild(td);
      rows = [empty];
    }
    body.replaceChildren.apply(body, rows);
    return true;
  }

  function updateFailures(job) {
    var table = document.getElementById("failures");
    if (!table || !job.failures) { return; }
    var rows = job.failures.map(function (f) {
      var tr = document.createElement("tr");
      tr.appendChild(cell(f.reason, "wrap"));
      tr.appendChild(cell(f.platform));
      tr.appendChild(cell(String(f.count), "num"));
      return tr;
    });
    if (!rows.length) {
      var tr = document.createElement("tr");
      tr.className = "empty";
      var td = cell("No dead letters from this job.", "muted");
      td.colSpan = 3;
      tr.appendChild(td);
      rows = [tr];
    }
    var body = table.querySelector("tbody");
    body.replaceChildren.apply(body, rows);
  }

  // Pushes per minute over the last 30 s of samples, one bar per poll (at most 60 bars).
  function drawRate(job) {
    var svg = document.getElementById("rate");
    if (!svg) { return; }
    var now = Date.now();
    samples.push([now, job.sent]);
    if (samples.length > 61) { samples.shift(); }
    var rates = [];
    for (var i = 1; i < samples.length; i++) {
      var dt = (samples[i][0] - samples[i - 1][0]) / 60000;
      rates.push(dt > 0 ? Math.max(0, (samples[i][1] - samples[i - 1][1]) / dt) : 0);
    }
    var peak = Math.max.apply(null, rates.concat([1]));
    var keep = svg.querySelector("title");
    svg.replaceChildren(keep);
    rates.forEach(function (r, n) {
      var rect = document.createElementNS(SVG, "rect");
      var h = Math.round(90 * r / peak);
      rect.setAttribute("x", String(n * 10));
      rect.setAttribute("y", String(95 - h));
      rect.setAttribute("width", "8");
      rect.setAttribute("height", String(h));
      rect.setAttribute("fill", "#2f5bea");
      svg.appendChild(rect);
    });
    var label = document.getElementById("rate-now");
    if (label) { label.textContent = String(Math.round(rates.length ? rates[rates.length - 1] : 0)); }
  }

  function updateJob(job) {
    setFields(box, job);
    updateFailures(job);
    drawRate(job);
    var bar = document.getElementById("progress");
    if (bar) { bar.value = job.tasks_done; }
    var open = FINISHED.indexOf(job.state) < 0;
    var cancel = document.getElementById("cancel");
    if (cancel) { cancel.hidden = !open; }
    return open;
  }

  function tick() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); throw new Error("signed out"); }
        return r.json();
      })
      .then(function (data) {
        var again = kind === "jobs" ? updateJobs(data) : updateJob(data);
        box.setAttribute("data-updated", String(Date.now()));
        if (status) { status.textContent = "updated " + new Date().toLocaleTimeString(); }
        if (again) { window.setTimeout(tick, 1000); }
      })
      .catch(function () { window.setTimeout(tick, 3000); });
  }
  window.setTimeout(tick, 1000);
})();

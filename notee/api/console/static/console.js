// Notee console: live job progress without reloading. An element with data-poll="<url>" is refreshed
// from that JSON endpoint every second: the jobs table (data-kind="jobs") or one job (data-kind="job").
// Text goes in with textContent only (never as HTML). Polling stops once a job is finished.
(function () {
  "use strict";
  var FINISHED = ["done", "failed", "expired", "cancelled"];
  var box = document.querySelector("[data-poll]");
  if (!box) { return; }
  var url = box.getAttribute("data-poll");
  var kind = box.getAttribute("data-kind");
  var status = document.getElementById("poll-status");

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

  function cell(text, className) {
    var td = document.createElement("td");
    if (className) { td.className = className; }
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
    tr.appendChild(cell(job.notification_type));
    tr.appendChild(cell(job.target.topic !== undefined ? job.target.topic : JSON.stringify(job.target)));
    var state = cell("");
    state.setAttribute("data-field", "state");
    tr.appendChild(state);
    ["targeted", "sent", "failed", "pruned"].forEach(function (name) {
      var td = cell("", "num");
      td.setAttribute("data-field", name);
      tr.appendChild(td);
    });
    tr.appendChild(cell(job.created_at.slice(0, 19).replace("T", " ")));
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
      td.colSpan = 9;
      empty.appendChild(td);
      rows = [empty];
    }
    body.replaceChildren.apply(body, rows);
    return true;
  }

  function updateJob(job) {
    setFields(box, job);
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

// Notee console composer (publish page): shows the fields of the chosen target and time, and 400 ms
// after each change POSTs the form to publish/preview.json (the session's CSRF token is in the form)
// to show the target's reach and the push per locale and platform with its size against each
// provider's limit. Text goes in with textContent only. With script off, the form still works: the
// confirmation page shows the same reach and preview.
(function () {
  "use strict";
  var form = document.getElementById("publish");
  if (!form) { return; }
  var pick = document.getElementById("pick-template");
  var timer = null;
  var asked = 0;

  if (pick) {
    pick.addEventListener("change", function () { document.getElementById("pick").submit(); });
  }

  function el(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    if (className) { node.className = className; }
    return node;
  }

  function showFields() {
    var kind = form.elements.target.value;
    form.querySelectorAll("[data-target]").forEach(function (label) {
      label.hidden = label.getAttribute("data-target") !== kind;
    });
    var checked = form.querySelector('input[name="when"]:checked');
    var moment = checked ? checked.value : "now";
    form.querySelectorAll("[data-when]").forEach(function (label) {
      label.hidden = label.getAttribute("data-when") !== moment;
    });
  }

  function reachText(r) {
    if (!r) { return "Not counted."; }
    var parts = [];
    if (r.users !== null && r.users !== undefined) { parts.push(r.users + " users"); }
    if (r.devices !== null && r.devices !== undefined) { parts.push(r.devices + " devices"); }
    if (r.devices_by_platform) {
      parts.push("(" + Object.keys(r.devices_by_platform).map(function (os) {
        return os + " " + r.devices_by_platform[os];
      }).join(", ") + ")");
    }
    if (r.unknown_users) { parts.push(r.unknown_users + " unknown ids skipped"); }
    return "Reaches " + parts.join(" · ") + (r.exact ? "" : " (from the topic counters: at most)");
  }

  function showPreview(data) {
    var reach = document.getElementById("reach");
    reach.textContent = reachText(data.reach);
    reach.className = data.zero ? "warn" : "";
    var warnings = document.getElementById("warnings");
    warnings.replaceChildren.apply(warnings, (data.warnings || []).map(function (w) { return el("li", w, "warn"); }));
    var box = document.getElementById("preview");
    box.replaceChildren.apply(box, (data.variants || []).map(function (v) {
      var card = el("section", null, "device");
      card.setAttribute("data-locale", v.locale);
      card.appendChild(el("h3", v.locale));
      var title = el("p");
      title.appendChild(el("strong", v.title));
      card.appendChild(title);
      if (v.subtitle) {  // iOS shows it between the title and the body; Android has none
        var subtitle = el("p", "iOS subtitle: " + v.subtitle, "subtitle");
        subtitle.setAttribute("data-subtitle", v.subtitle);
        card.appendChild(subtitle);
      }
      card.appendChild(el("p", v.body, "pre"));
      var sizes = el("ul");
      Object.keys(v.platforms).forEach(function (os) {
        var p = v.platforms[os];
        var item = el("li", os + " (" + p.provider + "): " + p.bytes + " of " + p.limit + " bytes");
        item.setAttribute("data-platform", os);
        if (p.over) { item.appendChild(el("span", " over the limit", "over")); }
        sizes.appendChild(item);
      });
      card.appendChild(sizes);
      return card;
    }));
  }

  function refresh() {
    var mine = ++asked;
    var body = new URLSearchParams(new FormData(form));
    fetch(form.getAttribute("data-preview"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/x-www-form-urlencoded", Accept: "application/json" },
      body: body.toString()
    }).then(function (r) {
      if (r.status === 401) { window.location.reload(); throw new Error("signed out"); }
      return r.json().then(function (data) { return [r.ok, data]; });
    }).then(function (answer) {
      if (mine !== asked) { return; }  // a later change is on its way
      var problem = document.getElementById("preview-error");
      var ok = answer[0], data = answer[1];
      if (ok) {
        problem.hidden = true;
        showPreview(data);
      } else {
        problem.hidden = false;
        problem.textContent = "Not previewed: " + (data.error ? data.error.message : "error");
        document.getElementById("reach").textContent = reachText(data.reach);
        document.getElementById("preview").replaceChildren();
      }
      form.setAttribute("data-previewed", String(Date.now()));
    }).catch(function () { /* the next change asks again */ });
  }

  function changed() {
    showFields();
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, 400);
  }

  form.addEventListener("input", changed);
  form.addEventListener("change", changed);
  // A double click sends one request; the Idempotency-Key makes a resubmission the same job anyway.
  form.addEventListener("submit", function () { document.getElementById("review").disabled = true; });
  showFields();
  refresh();
})();

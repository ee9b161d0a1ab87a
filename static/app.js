// The dashboard's only script besides htmx: no inline handlers, so the CSP stays strict.
(function () {
  "use strict";

  // Every htmx request carries the CSRF token from the page's meta tag.
  document.addEventListener("htmx:configRequest", function (event) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta) {
      event.detail.headers["X-CSRFToken"] = meta.getAttribute("content");
    }
  });

  // "/" jumps to the search box, as on most sites with one.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) {
      return;
    }
    var target = event.target;
    if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) {
      return;
    }
    var search = document.getElementById("q");
    if (search) {
      event.preventDefault();
      search.focus();
      search.select();
    }
  });

  // A "select all" checkbox ticks every checkbox of the same name on the page.
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box || !box.matches || !box.matches("input[type=checkbox][data-select-all]")) {
      return;
    }
    var name = box.getAttribute("data-select-all");
    document.querySelectorAll('input[type=checkbox][name="' + CSS.escape(name) + '"]').forEach(function (other) {
      if (other.checked !== box.checked) {
        other.checked = box.checked;
        other.dispatchEvent(new Event("change", { bubbles: true }));
      }
    });
  });
})();

// --- The stale-data banner and the actions that need NATS -----------------------------------
// The banner (base.html, web/status.py) is polled every 2 s. Its marker says whether NATS is
// reachable; every element marked data-needs-nats is disabled with the reason as its title while
// it is not, and enabled again when it is back. The reason is set as text, never as markup.
(function () {
  "use strict";

  function applyNatsState(root) {
    var marker = root.querySelector("[data-nats-state]");
    if (!marker) {
      return;
    }
    var down = marker.getAttribute("data-nats-state") === "down";
    var reason = marker.getAttribute("data-nats-reason") || "";
    document.querySelectorAll("[data-needs-nats]").forEach(function (element) {
      element.disabled = down;
      if (down) {
        element.setAttribute("title", reason);
      } else {
        element.removeAttribute("title");
      }
      // A disabled <option> that is chosen would submit nothing: choose the first one left.
      var select = element.tagName === "OPTION" ? element.parentElement : null;
      if (down && select && select.value === element.value) {
        var usable = Array.prototype.find.call(select.options, function (option) { return !option.disabled; });
        if (usable) {
          select.value = usable.value;
        }
      }
    });
    document.querySelectorAll("[data-needs-nats-note]").forEach(function (note) {
      note.hidden = !down;
      var text = note.querySelector("[data-needs-nats-reason]");
      if (text) {
        text.textContent = reason;
      }
    });
  }

  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail && event.detail.target;
    if (target && target.matches && target.matches("[data-status-banner]")) {
      applyNatsState(target);
    }
  });
})();

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

// The search page's snippets without the exercise solutions. Sphinx's searchtools.js cuts
// each result's snippet from the text of the whole page it fetched (Search.htmlToText), the
// collapsed solution cells included; this wraps it so that every element of class no-search
// (the solution cells, which Sphinx's index skips too: site/conf.py) is removed first.
(() => {
  const wrap = () => {
    if (typeof Search === "undefined" || Search.htmlToText.withoutSolutions) return;
    const htmlToText = Search.htmlToText;
    const withoutSolutions = (htmlString, anchor) => {
      const page = new DOMParser().parseFromString(htmlString, "text/html");
      page.querySelectorAll(".no-search").forEach((el) => el.remove());
      return htmlToText(page.documentElement.outerHTML, anchor);
    };
    withoutSolutions.withoutSolutions = true;
    Search.htmlToText = withoutSolutions;
  };
  wrap(); // searchtools.js loaded before this script
  // or after it (deferred scripts run before DOMContentLoaded; searches start after it)
  document.addEventListener("DOMContentLoaded", wrap);
})();

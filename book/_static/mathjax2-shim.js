// The Jupyter widgets HTML manager typesets widget labels with MathJax 2's API
// (MathJax.Hub.Queue); the book serves MathJax 3, which has no Hub. Map the one call it makes
// onto MathJax 3's typesetPromise. Installed after MathJax's deferred script has run, before the
// widgets render on window load.
document.addEventListener("DOMContentLoaded", function () {
  if (window.MathJax && !window.MathJax.Hub) {
    window.MathJax.Hub = {
      Queue: function (job) {
        var el = Array.isArray(job) ? job[2] : null;
        if (el && window.MathJax.typesetPromise) { window.MathJax.typesetPromise([el]); }
      }
    };
  }
});

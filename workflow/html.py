"""The HTML building blocks of the report: its stylesheet, the image check, escaped
tables and pictures that say so when their file is missing."""

import html
from pathlib import Path

CSS = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 1180px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 2.2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.note { color: #555; } .missing { color: #a00; }
#banner { display: none; background: #fdd; padding: 0.6em; border: 1px solid #a00; }
code { background: #f4f4f4; padding: 0 3px; }
"""

# Counts loaded images into <body data-images="ok/total"> and warns when some failed.
CHECK = """
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images", ok + "/" + imgs.length);
  if (ok < imgs.length) {
    var b = document.getElementById("banner");
    b.textContent = (imgs.length - ok) + " of " + imgs.length + " pictures did not load: rerun ddplab report";
    b.style.display = "block";
  }
});
"""


def esc(x) -> str:
    return html.escape(str(x))


def table(header: list[str], rows: list[list], left: int = 1) -> str:
    def cell(tag, i, v):
        return f"<{tag}{' class=l' if i < left else ''}>{esc(v)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def img(run_dir: Path, rel: str, alt: str) -> str:
    if not (run_dir / rel).exists():
        return f"<p class=missing>missing: {esc(rel)}</p>"
    return f'<img src="{esc(rel)}" alt="{esc(alt)}">'


def missing(what: str, how: str) -> str:
    return f"<p class=missing>{esc(what)} not found: {esc(how)}</p>"

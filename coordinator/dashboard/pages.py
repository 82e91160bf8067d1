"""The dashboard's HTML: one layout around a static body per page, filled by dashboard.js.

The server writes into a page only what its address names (a job id, an
artifact id) and a job's goal for its heading, each through ``html.escape``;
everything else the script fetches as JSON and shows with ``textContent``.
"""

from __future__ import annotations

import html
from functools import cache
from importlib.resources import files
from string import Template

_TEMPLATES = files(__package__) / "templates"
PAGES = ("jobs", "job", "artifact", "workers")


@cache
def _template(name: str) -> str:
    return (_TEMPLATES / f"{name}.html").read_text(encoding="utf-8")


def render(page: str, *, title: str, heading: str, job_id: str = "", artifact_id: str = "") -> str:
    """The page ``page`` (one of ``PAGES``); every value is escaped here."""
    values = {"title": title, "heading": heading, "job": job_id, "artifact": artifact_id}
    escaped = {k: html.escape(v, quote=True) for k, v in values.items()}
    return Template(_template("layout")).substitute(escaped, page=page, body=_template(page))

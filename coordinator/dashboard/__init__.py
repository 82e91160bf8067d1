"""``redfleet dashboard``: a read-only live web page of the fleet, over its Redis.

Pages (``pages``) are a layout around static bodies, filled by one
hand-written script (``static/dashboard.js``) that polls the JSON endpoints
(``app``) every second and draws the plots as SVG: nothing is built or
downloaded. The documents (``documents``, ``calls``) are read from ``State`` at
each request; ``/metrics`` is the same collector as ``up --metrics-port``.
Off loopback a token is required (``auth``).

    app        routes, error replies, security headers
    documents  jobs, a job (task tree, features, artifacts), events, workers
    calls      a job's model calls, one row each, for the plots
    pages      the HTML around the script
    auth       the loopback rule and the token gate
    server     binding the socket, uvicorn
"""

from .app import create_app
from .auth import is_loopback, require_token
from .server import bind, server

__all__ = ["bind", "create_app", "is_loopback", "require_token", "server"]

"""The hub's live dashboard and its offline API docs.

* :mod:`hub.api.dashboard.routes`: ``dashboard_router`` serves the page at ``/`` and the
  live snapshot stream at ``/dashboard/events``;
* :mod:`hub.api.dashboard.snapshot`: ``build_snapshot`` reads what the page shows from the hub;
* :mod:`hub.api.dashboard.docs`: ``offline_docs`` serves ``/docs`` with Swagger UI's assets from
  the installed ``swagger-ui-bundle`` package.

The page is plain HTML, CSS and JavaScript shipped in this package (``index.html``,
``app.js``, ``style.css``): no build step, and nothing fetched from elsewhere.
"""

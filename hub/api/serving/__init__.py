"""How the hub serves its REST API: uvicorn, with bounds on slow and greedy clients.

uvicorn bounds neither the time a client takes to send its request nor how
many connections it keeps open: 400 connections that each sent half their
headers hold 400 file descriptors for as long as they like. The hub serves
its API with :class:`hub.api.serving.run.ApiServer`, which runs uvicorn with
:class:`hub.api.serving.protocol.BoundedH11` under the
:class:`hub.api.serving.limits.ClientLimits` of ``HubConfig.client_limits``:

* a connection has ``header_s`` from its opening (and from the first byte of
  each following request) to send its request headers, then ``body_s`` for
  the body; a late one is answered 408 and dropped;
* an address that holds ``per_client`` connections already is answered 429,
  and every new connection while ``total`` are open 503, at once;
* the TLS handshake and the TLS close get ``header_s`` too (asyncio's own: 60 s and 30 s).

Idle keep-alive connections are uvicorn's to close (after 5 s); request
headers over 16 KiB, which h11 refuses, get the API's JSON 400.
"""

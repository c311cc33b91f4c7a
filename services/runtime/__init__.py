"""The service's long-lived parts, composed by ``services.api.create_app``.

``state`` (:class:`ServiceState`: one per process, composing the parts below), ``snapshots``
(the snapshot cache: judgments, snapshots and answers as the worker and requests read them),
``refresher``, ``refresh_base`` and ``schedule`` (re-estimation threads, the keys' states and
fits, and when each fit runs), ``events`` (the refits' events, logged and stored),
``store_watch`` (catching re-estimation up with the store: poll and LISTEN), ``worker`` and
``supervisor`` (re-estimation in a process of its own, and its supervision), ``startup``
(the tallies loaded after a start), ``background`` (the analyses computed off the request
path), ``tally`` (running decisions and counts per project), ``tokens`` (API tokens read),
``fit_health`` and ``store_health`` (what ``/health`` reports). Requests read them; routes
and the HTTP guard live in :mod:`services.api`.
"""

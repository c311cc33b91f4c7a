"""The service's long-lived parts, composed by ``services.api.create_app``.

``state`` (:class:`ServiceState`: the store, the snapshot cache, the re-estimation worker or
its supervision, the event writer), ``refresher`` and ``schedule`` (re-estimation threads and
when each fit runs), ``worker`` (re-estimation in a process of its own), ``background`` (the
analyses computed off the request path), ``tally`` (running decisions and counts per
project), ``tokens`` (API tokens read), ``fit_health`` and ``store_health`` (what ``/health``
reports). Requests read them; routes and the HTTP guard live in :mod:`services.api`.
"""

"""The HTTP routes, one module per group: each route parses, calls a use case and answers.

The use cases are evalset's (the batch's plan, decisions, answers) over the service's
runtime (:mod:`services.runtime`); :func:`services.api.create_app` includes every router.
"""

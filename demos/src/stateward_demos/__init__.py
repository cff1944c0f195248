"""stateward's demonstrations: a separate package beside the library, built only on its public API.

It plugs into stateward the way any package would: its agents through the ``stateward.agents`` entry
point (:mod:`stateward_demos.registry`) and its ``demo`` and ``eval`` command groups through the
``stateward.cli`` entry point (:mod:`stateward_demos.cli`, :mod:`stateward_demos.eval_cmd`).
"""

"""The learner's tools: programs run beside the chapters, not taught by one.

- ``doctor``: ``python -m common.tools.doctor`` (``make doctor``): checks this environment and
  says how to fix it; chapter 1 prints its ``summary()``.
- ``make_data``: ``python -m common.tools.make_data`` (``companion-make-data``; ``make data`` runs
  ``data_scripts/make_synthetic_data.py``, which wraps it): the synthetic shapes dataset every
  chapter reads, generated and verified.

Both use the core only (``common.cli``, ``common.paths``, ``common.synthetic``); nothing in the core
or a chapter package imports them.
"""

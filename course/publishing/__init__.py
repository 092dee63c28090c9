"""Publishing: the chapters as notebooks, as a site and as the Chinese edition.

The programs: ``python -m course.publishing.notebooks`` (``make notebooks``: execute, refresh the
jupytext twin and the standard cells of ``bootstrap``), ``python -m course.publishing.site``
(``make html``, with ``site_pages``), ``python -m course.publishing.translate`` (``make
translations``, with ``translate_comments`` and ``code_comments``) and ``python -m
course.publishing.figures`` (``make figures``, ``make lessons``). ``translate`` and ``figures`` are
packages: their libraries in ``__init__`` (which the other modules import), their command lines in
``__main__``.
"""

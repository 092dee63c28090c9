"""Everything that runs inside the sandbox: the judge, the checker and the answer process.

The grader (``course.grading``) starts ``python -m course.grading.inside.judge`` under
bubblewrap and ``setpriv``; nothing here imports the host side, and the sandbox shows only
this folder of ``course/grading/``. The threat model is in the docstring of
``course/grading/__init__.py``.

- ``judge``: the judge's main loop (setup cells, one checker per exercise, cleanup);
- ``checker``: the checker process (limits, the check cell, the report);
- ``answer``: the answer process (the answer cells, serving the checker's calls, the
  integrity record of what it rebound);
- ``answer_rules``: what an answer cell may hold (read from its syntax);
- ``cells``: running a cell's code and saying why it failed;
- ``space``: the same room on disk for every exercise, and saying when it filled;
- ``channel``, ``codec``, ``remote``, ``argstate``: the data-only channel between the checker
  and the answer process (framing, values as plain trees, handles, argument state);
- ``ops``: what either end performs for the other, and the random state each request carries.
"""

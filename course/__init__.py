"""Course tooling for instructors and maintainers, and the student runtime the exercises import.

Not part of the learner's package: ``common`` never imports ``course``. Four packages, by role:

- ``student``: the student runtime (``checks``, ``messages``), what the exercise notebooks import
  at run time, in the learner's kernel and inside the grader's sandbox. It imports nothing of the
  rest of ``course``.
- ``assignments``: instructor sources and student versions (the library in ``__init__``, the
  command line ``python -m course.assignments`` in ``__main__``, ``demo_cells``).
- ``grading``: ``python -m course.grading`` (its docstring is the grader's threat model;
  ``grading/inside/`` is what runs in the sandbox, which shows it only ``student`` and ``common``).
- ``publishing``: the notebooks, the site and the Chinese edition (``python -m
  course.publishing.notebooks``, ``.site``, ``.translate``, ``.figures``).
"""

"""Course tooling for instructors and maintainers: assignments, grading, notebook builds, the site,
the Chinese edition.

Not part of the learner's package: ``common`` never imports ``course``; ``course`` may import
anything. Entry points: ``python -m course.assignments``, ``python -m course.grading`` (a package:
its docstring is the grader's threat model; ``grading/inside/`` is what runs in the sandbox),
``python -m course.notebooks``, ``python -m course.site``, ``python -m course.translate``. The
exercise notebooks import only ``checks`` (``course.checks``, also importable from
``course.assignments``).
"""

"""``python -m course.grading``: grade submitted exercise notebooks (see ``grader.main``)."""

import sys

from course.grading.grader import main

if __name__ == "__main__":
    sys.argv[0] = "python -m course.grading"  # the usage line's name (Python 3.11 would say __main__.py)
    raise SystemExit(main())

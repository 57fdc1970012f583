"""The course's command-line tools: the student release (``tools.make_student``) and grading
(``tools.grade``). Run them as ``python -m tools.make_student`` / ``python -m tools.grade``
from the course root, or through ``make student`` / ``make grade``."""

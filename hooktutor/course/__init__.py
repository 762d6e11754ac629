"""The course machinery: what turns the toolkit and the lessons into a course.

Nothing here is part of the toolkit a learner uses on their own models; these modules build,
check and hand out the lessons:

* :mod:`.claims` — the registry of claims about torch behaviour that changed between releases
  (what changed, since which release, the evidence, a probe); lessons ask it what to expect.
* :mod:`.other_torches` — runs every lesson on other torch releases (``course.py compat``) and
  writes ``docs/torch-versions.md``.
* :mod:`.cpu_profiles` — runs notebooks as other CPUs would compute (strict nbval at every level).
* :mod:`.regen` — executes a notebook and stores outputs that are the same on every machine.
* :mod:`.student` — the student edition and the nbgrader course, made from ``notebooks/``.
* :mod:`.workbook` — the learner's workbook that ``course.py lab`` opens.
* :mod:`.answers` — the answer cells and the instructors' guide entries, made from the
  exercise files (one source for every solution).
* :mod:`.mutation` — mutation testing of every exercise check.
* :mod:`.doctor` — the environment check of lesson 00.
"""

"""``hooktutor lab [FOLDER] | workbook FOLDER | doctor | regen NB... | student OUTDIR | links | ...``.

The ``hooktutor`` console script of the installed package and ``python -m hooktutor`` are the same
command. ``lab`` and ``workbook`` are the learner's; the rest are the course authors' tools."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    usage = ("usage: hooktutor lab [FOLDER] | workbook FOLDER | instructor FOLDER | lab-config FOLDER\n"
             "                 | doctor | regen NOTEBOOK... | student OUTDIR | answers [--write] | mutants [KEY...]\n"
             "                 | links [--write] | site [--out DIR]\n"
             "       (python -m hooktutor ... is the same command)\n"
             "  lab      write the learner's workbook into FOLDER (default ./hooktutor-workbook), then open\n"
             "           JupyterLab on it (needs pip install \"hooktutor[lab]\")\n"
             "  lab-config FOLDER [--instructor]  write the Lab settings of a mode into FOLDER (for\n"
             "           JUPYTER_CONFIG_PATH; binder/postBuild uses it)\n"
             "  doctor   check this environment for the course and say what to fix\n"
             "  regen    execute notebooks top to bottom and store their outputs\n"
             "  student  write the student edition of every lesson into OUTDIR\n"
             "  workbook write or update a learner's workbook in FOLDER, never overwriting their work\n"
             "  instructor write or update the instructor's course folder FOLDER (lessons/, an nbgrader\n"
             "           course: source/, nbgrader_config.py, exchange/); course.py lab --instructor opens it\n"
             "  answers  compare (--write: rewrite) the lessons' answer cells and the instructors' guide\n"
             "           with the exercise files, their one source\n"
             "  mutants  mutate every exercise's solution, run each mutant through its check, print the\n"
             "           kill rate per exercise and the survivors\n"
             "  links    compare (--write: rewrite) every link to the course's public home, its badges and\n"
             "           install commands with [project.urls] of pyproject.toml, their one source\n"
             "  site     build the course's website offline from the stored outputs into build/site\n"
             "           (needs the site extra)")
    if not argv or argv[0] in {"-h", "--help"}:
        print(usage)
        return 0
    command, rest = argv[0], argv[1:]
    if command != "lab" and {"-h", "--help"} & set(rest):   # lab has a help of its own
        print(usage)   # a help request never runs the tool (mutants would run every exercise)
        return 0
    if command == "doctor":
        from .course.doctor import main as doctor
        return doctor(rest)
    if command == "regen":
        if not rest:
            print("regen needs at least one notebook path", file=sys.stderr)
            return 2
        from .course.regen import execute
        for nb in rest:
            execute(nb)
        return 0
    if command == "translate":
        from .course.translate import main as translate
        return translate(rest)
    if command == "student":
        from .course.student import main as student
        return student(rest)
    if command == "answers":
        from .course.answers import main as answers
        return answers(rest)
    if command == "mutants":
        from .course.mutation import main as mutants
        return mutants(rest)
    if command == "workbook":
        from .course.workbook import main as workbook
        return workbook(rest)
    if command == "instructor":
        from .course.instructor import main as instructor
        return instructor(rest)
    if command == "lab":
        from .course.lab import main as lab
        return lab(rest)
    if command == "lab-config":
        from .course.lab import write_config_main
        return write_config_main(rest)
    if command == "links":
        from .course.links import main as links
        return links(rest)
    if command == "site":
        from .course.site import main as site
        return site(rest)
    print(f"unknown command {command!r}\n{usage}", file=sys.stderr)
    return 2


def cli() -> None:
    """The ``hooktutor`` console script."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    cli()

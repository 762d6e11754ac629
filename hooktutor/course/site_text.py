"""The website's own words, in the language the library speaks (:mod:`hooktutor.i18n`).

Everything the site writes around a lesson (``hooktutor.course.site_source``: the launch buttons,
the folded hints, the landing page; ``hooktutor.course.site_widgets``: the captions of a widget's
pictures) comes from here, as a text of the library's catalogue: English as written, or its
translation in ``hooktutor/locale/<lang>/LC_MESSAGES/hooktutor.po`` while ``set_language(lang)``
holds (``python3 course.py site`` builds each edition so). The lessons' own words are their
editions' (``notebooks/zh_CN/``).

Taught nowhere: how the course's website is made (``docs/translating.md``).
"""

from __future__ import annotations

from ..i18n import fmt, language, tr

# each edition's name in its own language: what the language switch of every page shows
LANGUAGE_NAMES = {"en": "English", "zh_CN": "中文"}


def lab_command() -> str:
    """The command that opens the course in JupyterLab in the language spoken now."""
    lang = language()
    return "python3 course.py lab" + ("" if lang == "en" else f" --lang {lang}")


# -- a lesson's page ---------------------------------------------------------------------------

def launch_labels() -> dict[str, str]:
    return {"colab": tr("Open in Colab"), "binder": tr("Open in Binder"),
            "download": tr("Download the notebook"), "source": tr("View the source")}


def launch_note() -> str:
    return tr("Colab, Binder and the download give the learner's edition: exercises blank, hints and "
              "solutions on request.")


def switch_label(lang: str) -> str:
    """The language switch's link to the edition in ``lang``: that language's own name, as
    language switches show it (a reader who needs the link reads that language)."""
    return LANGUAGE_NAMES.get(lang, lang)


def hints_summary(title: str, count: int) -> str:
    return fmt("Hints for \u201c{title}\u201d ({count}): open one at a time", title=title, count=count)


def hint_label(number: int) -> str:
    return fmt("Hint {number}", number=number)


def solution_prompts() -> tuple[str, str]:
    return tr("Show the solution"), tr("Hide the solution")


# -- a widget's pictures -----------------------------------------------------------------------

def widget_heading(kind: str) -> str:
    return fmt("The {kind} above, pictured: a static page cannot run it", kind=kind)


def widget_lead() -> str:
    return fmt("Drawn for this site by the widget's own code on the lesson's seeded model, in each state. "
               "Run it live: `{command}` opens this lesson in JupyterLab (or open it in Colab from the "
               "lesson's buttons above).", command=lab_command())


def same_picture(alt: str) -> str:
    return fmt("{alt}: the same as in the state above.", alt=alt)


def checkbox_state(description: str, ticked: bool) -> str:
    if ticked:
        return fmt("\u2611 {description} (ticked)", description=description)
    return fmt("\u2610 {description} (unticked)", description=description)


def panel_states(layer: str) -> list[str]:
    return [tr("every hook off"), fmt("zero on {layer}", layer=layer)]


def patch_states(name: str, last: int) -> list[str]:
    def patched(position: int) -> str:
        return fmt("{name} patched at position {position}", name=name, position=position)

    return [tr("no patch"), patched(0), patched(last)]

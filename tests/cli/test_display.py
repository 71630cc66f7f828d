import warnings

from ratchet.cli.display import warnings_logged_once

SITE = "/opt/python/lib/python3.11/site-packages/transformers/modeling_utils.py"


def warn(message, category=FutureWarning, filename=SITE, lineno=3314):
    warnings.warn_explicit(message, category, filename, lineno, module=f"w{lineno}")


def test_each_distinct_warning_is_logged_once_as_one_line_naming_its_package():
    lines = []
    before = warnings.showwarning
    with warnings_logged_once(lines.append):
        warnings.simplefilter("always")
        warn("`is_gradient_checkpointing` is deprecated\nand will be removed")
        warn("`is_gradient_checkpointing` is deprecated\nand will be removed", lineno=9)
        warn("[bold]not markup[/bold]", UserWarning, "/opt/scripts/helper.py")
    assert lines == [
        "[yellow]warning[/] (transformers): `is_gradient_checkpointing` is deprecated and will "
        "be removed",
        "[yellow]warning[/] (helper.py): \\[bold]not markup\\[/bold]",
    ]
    assert warnings.showwarning is before


def test_warnings_the_filters_ignore_stay_ignored():
    lines = []
    with warnings_logged_once(lines.append):
        warnings.simplefilter("ignore")
        warn("quiet")
    assert lines == []
